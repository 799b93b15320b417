"""The assembler of accelerator programs: command dicts -> the bytes that an
AXI accelerator (:class:`~bertforge.rtl.axi_top.AxiGemmTop`) fetches.

A program is a sequence of records of :func:`~bertforge.rtl.axi_top.record_bytes`
bytes (a power of two, at least one memory beat), each one
:func:`~bertforge.rtl.axi_top.record_layout` packed by the payload codec:

======  =========  ==========================================================
opcode  name       record
======  =========  ==========================================================
0x01    ``run``    bits 0-7 the opcode, then the engine's command
                   (:func:`~bertforge.rtl.tile_scheduler.command_layout`,
                   or the sparse engine's, or the encoder top's)
0x0F    ``end``    the program ends here (without error)
other   --         the program ends with error code 5 (bad opcode)
======  =========  ==========================================================

The simulator (the AXI testbench's spec), the command line and the driver
(:mod:`bertforge.boards.driver`, which takes these bytes) all use it.
"""

from bertforge.rtl.axi_top import OP_END, OP_RUN, record_bytes, record_layout
from bertforge.rtl.errors import ParameterError
from bertforge.rtl.payload import pack

__all__ = ["OPCODES", "assemble", "record_bytes"]

#: Opcodes by name.
OPCODES = {"run": OP_RUN, "end": OP_END}


def assemble(config, commands):
    """The bytes of a program of ``commands``: dicts of the engine's command
    fields (``m, k, n, a_addr, ...``), with an optional ``opcode``
    (``"run"``, the default, ``"end"``, or a number, for tests of bad
    opcodes)."""
    size = record_bytes(config)
    layout = record_layout(config)
    out = bytearray()
    for index, command in enumerate(commands):
        op = command.get("opcode", "run")
        if isinstance(op, str):
            if op not in OPCODES:
                raise ParameterError(f"command {index}: opcode must be 'run' or 'end', not {op!r}")
            op = OPCODES[op]
        elif isinstance(op, bool) or not isinstance(op, int) or not 0 <= op <= 255:
            raise ParameterError(f"command {index}: opcode must be a name or a number 0 to 255, "
                                 f"not {op!r}")
        fields = {key: value for key, value in command.items() if key != "opcode"}
        out += pack(layout, {"opcode": op, "cmd": fields}).to_bytes(size, "little")
    return bytes(out)
