"""Host driver of an AXI accelerator (:class:`~bertforge.rtl.axi_top.AxiGemmTop`):
``load`` (or ``point`` at a program in memory), ``run``, ``wait``, ``counters``.

It works over any *backend* with four methods: ``read32(addr)`` and
``write32(addr, value)`` on the register file (byte offsets), and
``read_block(addr, length)`` / ``write_block(addr, data)`` on the memory
the accelerator reads and writes. :class:`Driver` calls them as plain
methods (:class:`DevMem` over ``/dev/mem``, PYNQ ``MMIO``, a UART bridge); :class:`AsyncDriver`
awaits them (the cocotb AXI-Lite master of the testbench,
:mod:`bertforge.boards.axi_board_tb`). Both run the same steps: each operation is a
generator that yields the backend calls it needs.

The register offsets and fields come from the compiled register map
(``rtl/axi_regmap.py``, from ``generators/regs/bertforge.rdl``). Programs are
the bytes that :func:`bertforge.generators.program.assemble` writes.
"""

import mmap
import os
import time

from bertforge.rtl.axi_regmap import REGISTERS
from bertforge.rtl.axi_top import ERROR_CODES
from bertforge.rtl.errors import BertforgeError

__all__ = ["Driver", "AsyncDriver", "DevMem", "REG", "COUNTERS", "ProgramError", "field"]

#: Register byte offsets by name.
REG = {reg["name"]: reg["offset"] for reg in REGISTERS}
_FIELDS = {(reg["name"], f["name"]): (f["lsb"], f["width"]) for reg in REGISTERS
           for f in reg["fields"]}
#: The performance counters (register names).
COUNTERS = ("CYCLES", "BUSY_GEMM", "BUSY_SOFTMAX", "BUSY_LAYERNORM", "BUSY_GELU", "BYTES_READ",
            "BYTES_WRITTEN", "MEM_WAIT")


def field(register, name, value):
    """Field ``name`` of ``register`` in the register's ``value``."""
    lsb, width = _FIELDS[(register, name)]
    return (value >> lsb) & ((1 << width) - 1)


def _mask(register, name):
    lsb, width = _FIELDS[(register, name)]
    return ((1 << width) - 1) << lsb


class ProgramError(BertforgeError):
    """A program ended with an error (``code`` as STATUS.error_code) or did not end."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


def _load(base, program, record_bytes):
    if len(program) % record_bytes:
        raise BertforgeError(f"a program is whole records of {record_bytes} bytes, "
                             f"not {len(program)} bytes")
    _check_base(base, record_bytes)
    yield ("write_block", base, bytes(program))
    yield from _point(base, len(program) // record_bytes, record_bytes)


def _check_base(base, record_bytes):
    if base % record_bytes:
        raise BertforgeError(f"the program base must be a multiple of {record_bytes} bytes, "
                             f"not {base:#x}")


def _point(base, records, record_bytes):
    _check_base(base, record_bytes)
    yield ("write32", REG["PROG_BASE_LO"], base & 0xFFFFFFFF)
    yield ("write32", REG["PROG_BASE_HI"], base >> 32)
    yield ("write32", REG["PROG_LEN"], records)


def _run(irq):
    enable = (_mask("IRQ_ENABLE", "done") | _mask("IRQ_ENABLE", "error")) if irq else 0
    yield ("write32", REG["IRQ_STATUS"], _mask("IRQ_STATUS", "done") | _mask("IRQ_STATUS", "error"))
    yield ("write32", REG["IRQ_ENABLE"], enable)
    yield ("write32", REG["CTRL"], _mask("CTRL", "start"))


def _wait(polls, interval=0):
    for index in range(polls):
        if index and interval:
            yield ("sleep", interval)
        status = yield ("read32", REG["STATUS"])
        if not field("STATUS", "busy", status) and field("STATUS", "done", status):
            code = field("STATUS", "error_code", status)
            pc = yield ("read32", REG["PC"])
            if code:
                raise ProgramError(f"the program stopped after {pc} commands: "
                                   f"{ERROR_CODES.get(code, 'error')} (code {code})", code)
            return pc
    raise ProgramError(f"the program did not end in {polls} polls of STATUS")


def _counters():
    values = {}
    for name in COUNTERS:
        values[name.lower()] = yield ("read32", REG[name])
    return values


def _config():
    values = {}
    for reg in ("ID", "VERSION", "CONFIG0", "CONFIG1"):
        word = yield ("read32", REG[reg])
        for (r, name), _ in _FIELDS.items():
            if r == reg:
                values[name if reg != "VERSION" else f"version_{name}"] = field(reg, name, word)
    return values


class Driver:
    """The driver over a backend with plain methods (see the module doc).

    Parameters
    ----------
    backend
        ``read32``, ``write32``, ``read_block``, ``write_block``.
    record_bytes : int
        Bytes of one program record (:func:`bertforge.rtl.axi_top.record_bytes`).
    """

    def __init__(self, backend, *, record_bytes):
        self.backend = backend
        self.record_bytes = record_bytes

    def _drive(self, steps):
        try:
            op = next(steps)
            while True:
                call = time.sleep if op[0] == "sleep" else getattr(self.backend, op[0])
                op = steps.send(call(*op[1:]))
        except StopIteration as stop:
            return stop.value

    def config(self):
        """The hardware's ID, version and configuration fields."""
        return self._drive(_config())

    def load(self, base, program):
        """Write ``program`` (assembled bytes) at byte ``base`` and point the registers at it."""
        return self._drive(_load(base, program, self.record_bytes))

    def point(self, base, records):
        """Point the registers at a program of ``records`` records already
        in memory at byte ``base`` (loaded before, or by other means)."""
        return self._drive(_point(base, records, self.record_bytes))

    def run(self, *, irq=True):
        """Clear the interrupt status, enable the interrupt (``irq``) and start."""
        return self._drive(_run(irq))

    def wait(self, polls=100_000, interval=0.0):
        """Poll STATUS until the program ends (at most ``polls`` times,
        ``interval`` seconds apart); returns the commands run, or raises
        :class:`ProgramError` with the error code."""
        return self._drive(_wait(polls, interval))

    def counters(self):
        """The performance counters, by lower-case name."""
        return self._drive(_counters())


class AsyncDriver(Driver):
    """The driver over a backend whose methods are coroutines (cocotb)."""

    async def _drive(self, steps):
        try:
            op = next(steps)
            while True:
                op = steps.send(await getattr(self.backend, op[0])(*op[1:]))
        except StopIteration as stop:
            return stop.value

    async def config(self):
        return await self._drive(_config())

    async def load(self, base, program):
        return await self._drive(_load(base, program, self.record_bytes))

    async def point(self, base, records):
        return await self._drive(_point(base, records, self.record_bytes))

    async def run(self, *, irq=True):
        return await self._drive(_run(irq))

    async def wait(self, polls=100_000):
        return await self._drive(_wait(polls))

    async def counters(self):
        return await self._drive(_counters())


class DevMem:
    """The driver's backend on a Linux SoC through ``/dev/mem`` (as root):
    the register page at physical ``regs_base`` and a buffer of
    ``buf_size`` bytes at physical ``buf_base`` (DRAM kept from Linux, e.g. a
    ``reserved-memory`` node with ``no-map``), both mapped with ``mmap``;
    ``O_SYNC`` makes the mappings uncached. Block addresses are physical
    (the accelerator's own), inside the buffer. Registers are read and
    written as whole aligned 32-bit words. ``path``: the device (another
    file in the tests).
    """

    def __init__(self, regs_base, buf_base, buf_size, *, path="/dev/mem"):
        self.buf_base, self.buf_size = buf_base, buf_size
        fd = os.open(path, os.O_RDWR | os.O_SYNC)
        try:
            self._regs_map = mmap.mmap(fd, mmap.PAGESIZE, offset=regs_base)
            self._buf_map = mmap.mmap(fd, buf_size, offset=buf_base)
        finally:
            os.close(fd)
        self.regs = memoryview(self._regs_map).cast("I")
        #: The buffer as bytes (numpy: ``np.frombuffer(dev.buf, np.uint8)``).
        self.buf = memoryview(self._buf_map)

    def _offset(self, addr, length):
        offset = addr - self.buf_base
        if not 0 <= offset <= self.buf_size - length:
            raise BertforgeError(f"{length} bytes at {addr:#x} are outside the buffer "
                                 f"({self.buf_base:#x}, {self.buf_size} bytes)")
        return offset

    def read32(self, addr):
        return self.regs[addr >> 2]

    def write32(self, addr, value):
        self.regs[addr >> 2] = value

    def read_block(self, addr, length):
        offset = self._offset(addr, length)
        return bytes(self.buf[offset:offset + length])

    def write_block(self, addr, data):
        offset = self._offset(addr, len(data))
        self.buf[offset:offset + len(data)] = data

    def close(self):
        self.regs.release()
        self.buf.release()
        self._regs_map.close()
        self._buf_map.close()
