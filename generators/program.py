"""The assembler of accelerator programs: command dicts -> the bytes that an
AXI accelerator (:class:`~bertforge.rtl.axi_top.AxiGemmTop`) fetches.

A program is a sequence of records of :func:`~bertforge.rtl.axi_top.record_bytes`
bytes (a power of two, at least one memory beat), each one
:func:`~bertforge.rtl.axi_top.record_layout` packed by the payload codec:

======  =========  ==========================================================
opcode  name       record
======  =========  ==========================================================
0x01    ``gemm``   bits 0-7 the opcode, then the GEMM command
                   (:func:`~bertforge.rtl.tile_scheduler.command_layout`)
0x0F    ``end``    the program ends here (without error)
other   --         the program ends with error code 5 (bad opcode)
======  =========  ==========================================================

The simulator (the AXI testbench's spec), the command line and the driver
(:mod:`bertforge.boards.driver`, which takes these bytes) all use it.
"""

from bertforge.rtl.axi_top import OP_END, OP_GEMM, record_bytes, record_layout
from bertforge.rtl.errors import ParameterError
from bertforge.rtl.payload import pack

__all__ = ["OPCODES", "assemble", "record_bytes"]

#: Opcodes by name.
OPCODES = {"gemm": OP_GEMM, "end": OP_END}


def assemble(config, commands):
    """The bytes of a program of ``commands``: dicts of GEMM command fields
    (``m, k, n, a_addr, ...``), with an optional ``op`` (``"gemm"``, the
    default, ``"end"``, or an opcode number, for tests of bad opcodes)."""
    size = record_bytes(config)
    layout = record_layout(config)
    out = bytearray()
    for index, command in enumerate(commands):
        op = command.get("op", "gemm")
        if isinstance(op, str):
            if op not in OPCODES:
                raise ParameterError(f"command {index}: op must be 'gemm' or 'end', not {op!r}")
            op = OPCODES[op]
        elif isinstance(op, bool) or not isinstance(op, int) or not 0 <= op <= 255:
            raise ParameterError(f"command {index}: op must be a name or an opcode 0 to 255, "
                                 f"not {op!r}")
        fields = {key: value for key, value in command.items() if key != "op"}
        out += pack(layout, {"opcode": op, "cmd": fields}).to_bytes(size, "little")
    return bytes(out)
