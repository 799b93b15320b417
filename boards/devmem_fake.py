"""A stand-in for a board's ``/dev/mem``: a file and a thread, so the
``/dev/mem`` example of the AXI page (:class:`~bertforge.boards.driver.DevMem`)
runs without a board (tests/test_docs.py runs it).

:class:`FakeDevMem` makes a sparse file as large as the physical address
space it needs and maps the register page and the buffer from it, as
:class:`~bertforge.boards.driver.DevMem` does. Its thread polls
``CTRL.start``; on a start it runs the program (records at ``PROG_BASE``,
``PROG_LEN`` of them, :func:`~bertforge.rtl.axi_top.record_layout`) with the
golden model (:func:`~bertforge.sim.gemm_golden.run_commands`) on the
buffer, then sets ``PC``, ``STATUS`` (done, error, error code) and
``IRQ_STATUS`` as the hardware does. It models what a program computes and
how it ends (``end``, a bad opcode, a rejected command, an address outside
the buffer as a read DECERR), not the register file's timing: its
performance counters stay 0, and a start is taken within a poll of the
thread, not at once, so until then ``STATUS`` still shows the previous
program's end (:meth:`FakeDevMem.settle` waits for it; the first program
has no previous one).
"""

import mmap
import threading
import time

import numpy as np

from bertforge.rtl.axi_regmap import REGISTERS
from bertforge.rtl.axi_top import ERR_BAD_OPCODE, ERR_REJECTED, OP_END, OP_RUN, record_bytes, \
    record_layout
from bertforge.rtl.payload import unpack
from bertforge.sim.gemm_golden import run_commands

from .driver import REG, DevMem

__all__ = ["FakeDevMem"]

ADDR_FIELDS = ("a_addr", "b_addr", "c_addr", "bias_addr", "scale_addr")
#: STATUS.error_code of an address outside the buffer (read DECERR).
ERR_OUTSIDE = 2


class FakeDevMem:
    """The file ``path`` standing in for ``/dev/mem`` of a board with the
    GEMM engine ``config`` on AXI: registers at ``regs_base``, a buffer of
    ``buf_size`` bytes at ``buf_base`` (see the module doc). ``close()``
    stops the thread."""

    def __init__(self, config, *, regs_base, buf_base, buf_size, path, poll=0.0005):
        self.config, self.path = config, str(path)
        self.buf_base, self.buf_size = buf_base, buf_size
        with open(self.path, "wb") as f:
            f.truncate(max(regs_base + mmap.PAGESIZE, buf_base + buf_size))
        # The board's side maps the file as the driver does.
        self._device = DevMem(regs_base, buf_base, buf_size, path=self.path)
        self.regs = self._device.regs
        self.mem = np.frombuffer(self._device.buf, dtype=np.uint8)
        values = {"CONFIG0_rows": config.rows, "CONFIG0_cols": config.cols,
                  "CONFIG0_dataflow": config.dataflow == "ws", "CONFIG0_bf16": config.bf16,
                  "CONFIG0_width": config.width, "CONFIG0_acc_width": config.acc_width,
                  "CONFIG1_mem_width": config.mem_width, "CONFIG1_addr_width": config.addr_width,
                  "CONFIG1_lanes": config.lanes, "CONFIG1_units": 1}
        for reg in REGISTERS:
            word = 0
            for f in reg["fields"]:
                word |= int(values.get(f"{reg['name']}_{f['name']}", f["reset"])) << f["lsb"]
            self.regs[reg["offset"] >> 2] = word
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(poll,), daemon=True)
        self._thread.start()

    def _serve(self, poll):
        while not self._stop.is_set():
            if self.regs[REG["CTRL"] >> 2] & 1:
                self.regs[REG["STATUS"] >> 2] = 1          # busy, then the start taken
                self.regs[REG["IRQ_STATUS"] >> 2] = 0
                self.regs[REG["CTRL"] >> 2] = 0
                pc, code = self._run()
                self.regs[REG["PC"] >> 2] = pc
                self.regs[REG["IRQ_STATUS"] >> 2] = 2 if code else 1
                self.regs[REG["STATUS"] >> 2] = 0b10 | (int(code != 0) << 2) | (code << 8)
            time.sleep(poll)

    def _run(self):
        """The program's ``(pc, error code)``."""
        size = record_bytes(self.config)
        base = self.regs[REG["PROG_BASE_LO"] >> 2] | (self.regs[REG["PROG_BASE_HI"] >> 2] << 32)
        for pc in range(self.regs[REG["PROG_LEN"] >> 2] & 0xFFFF):
            start = base + pc * size - self.buf_base
            if not 0 <= start <= self.buf_size - size:
                return pc, ERR_OUTSIDE
            record = unpack(record_layout(self.config),
                            int.from_bytes(self.mem[start:start + size].tobytes(), "little"))
            if record["opcode"] == OP_END:
                return pc, 0
            if record["opcode"] != OP_RUN:
                return pc, ERR_BAD_OPCODE
            cmd = dict(record["cmd"])
            used = ["a_addr", "b_addr", "c_addr"] + (["bias_addr"] if cmd.get("bias") else []) \
                + (["scale_addr"] if cmd.get("per_channel") else [])
            for key in ADDR_FIELDS:
                if key in cmd:
                    cmd[key] -= self.buf_base
            if any(cmd[key] < 0 for key in used):
                return pc, ERR_OUTSIDE
            try:
                (rejected,) = run_commands(self.config, self.mem, [cmd])
            except (IndexError, ValueError):        # a matrix past the buffer's end
                return pc, ERR_OUTSIDE
            if rejected:
                return pc, ERR_REJECTED
        return self.regs[REG["PROG_LEN"] >> 2] & 0xFFFF, 0

    def settle(self, timeout=10.0):
        """Wait until the thread has taken a written ``CTRL.start``."""
        end = time.monotonic() + timeout
        while self.regs[REG["CTRL"] >> 2] & 1 and time.monotonic() < end:
            time.sleep(0.0005)

    def close(self):
        self._stop.set()
        self._thread.join()
        del self.mem
        self._device.close()
