"""cocotb testbench of the emitted :class:`~bertforge.rtl.axi_top.AxiGemmTop`,
with cocotbext-axi's ``AxiRam`` as memory (random pauses on all five
channels) and its ``AxiLiteMaster`` on the registers, driven through
:class:`bertforge.boards.driver.AsyncDriver`.

Spec keys: ``config`` (a GemmConfig dict; a SparseEngineConfig dict with
``engine: "sparse"``; an EncoderConfig dict with ``engine: "encoder"``, whose
memory the caller checks), ``mem_size`` (bytes of memory), ``image`` (``.npy``, the initial
memory, ``2**addr_width`` bytes), ``seed``, ``pause`` (probability that a
channel pauses in a cycle; or a dict of them by channel: ``"aw"``, ``"w"``,
``"b"``, ``"ar"``, ``"r"``), ``record_bytes``, and ``runs``: a list of
programs run one after the other, each with ``base``, ``program`` (hex of
the assembled bytes), ``commands`` (their dicts, for the golden model),
``expect_code`` (STATUS.error_code), optionally ``expect_pc``,
``fail_read`` / ``fail_write`` (``[lo, hi)`` byte ranges answered SLVERR;
DECERR with ``decerr``), ``base`` need not be a record's multiple (the
driver refuses it; the testbench then writes the registers itself),
``abort_after`` (cycles after start to write CTRL.abort), ``records`` (the
PROG_LEN written, when not the program's records: a longer program wraps
around the memory), ``polls`` (of STATUS before the test fails; default 100,000),
``deposit`` (counter name -> a value written into that performance
counter's register just after the start, through the counters' module,
which the build makes public: the counter wraps past 2**32 - 1),
``deposit_pc`` (a value written into the top's program counter, its
register ``pc_count``, just after the start, while the first record is
fetched: the program then ends when the counter reaches ``PROG_LEN``).

Before the runs the register file is read back (:meth:`TB.registers`:
every register after reset, the writable ones after writes of all ones
and byte by byte, the unmapped words). Each run checks the error code, the
program counter, ``irq`` (high at the end, low after the W1C clear) and,
for runs without a bus error, that the
whole memory equals the golden model's
(:func:`bertforge.sim.gemm_golden.run_commands` of the commands that ran,
on the memory as the run found it). Results: ``registers``; one dict per
run (code, pc, ``status`` (the STATUS word at the end), counters, match; ``elapsed``, clock cycles from the start
to the end seen; ``irq_status``, and ``irq`` under each ``IRQ_ENABLE``
value, ``irq_enabled``; ``steps``, the counters' steps summed by
:meth:`TB.count_steps`; ``write_bursts``, its count of AW handshakes;
``offsets``, what each deposit added to its counter, mod 2**32, and
``counters_high``, the counters read just after it) under ``runs``; the final memory in the ``.npy``
file named by ``image``.
"""

import json
import os
import random
import warnings

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam, AxiResp

from bertforge.boards.driver import REG, AsyncDriver, ProgramError
from bertforge.rtl.encoder import EncoderConfig
from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.rtl.sparse_engine import SparseEngineConfig
from bertforge.sim.funcov_tb import RUN_BINS, Coverage, HeldRuns
from bertforge.sim.gemm_golden import run_commands
from bertforge.sim.sparse_engine_golden import run_sparse_commands

# cocotbext-axi 0.1.28 (pinned) makes cocotb 1.x calls that cocotb 2 deprecates:
# silence those deprecations, and only those (by the warning's module).
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"cocotbext\.axi\.")


class CocotbBackend:
    """The driver's backend in simulation: registers through the AXI-Lite
    master, memory through the ``AxiRam``'s own storage."""

    def __init__(self, lite, ram):
        self.lite, self.ram = lite, ram

    async def read32(self, addr):
        return await self.lite.read_dword(addr)

    async def write32(self, addr, value):
        await self.lite.write_dword(addr, value)

    async def read_block(self, addr, length):
        return self.ram.read(addr, length)

    async def write_block(self, addr, data):
        self.ram.write(addr, data)


#: The counters whose steps :meth:`TB.count_steps` sums.
STEPS = ("cycles", "busy_gemm", "busy_softmax", "busy_layernorm", "busy_gelu", "bytes_read",
         "bytes_written", "mem_wait")

#: The channels :meth:`TB.cover_bus` samples: (point, port prefix, the top
#: drives valid, run bins of a held handshake). A held beat the top drives
#: is ``stalled`` (the other side not ready), one it takes ``refused``. The
#: master's R and B are never refused (it takes every read beat it asked
#: for, and BREADY is 1), so they are not listed; the register file's
#: holds are counted once each (``True``: its slave takes AW and W
#: together, and the lite master's pauses are runs of 3 and 6 cycles).
BUS_CHANNELS = (("axi.ar", "m_axi_ar", True, RUN_BINS), ("axi.aw", "m_axi_aw", True, RUN_BINS),
                ("axi.w", "m_axi_w", True, RUN_BINS), ("axi_regs.aw", "s_axi_aw", False, [True]),
                ("axi_regs.w", "s_axi_w", False, [True]),
                ("axi_regs.ar", "s_axi_ar", False, [True]),
                ("axi_regs.r", "s_axi_r", True, [True]), ("axi_regs.b", "s_axi_b", True, [True]))
#: The responses the bus's R and B may carry (EXOKAY needs exclusive access).
RESPONSES = ["OKAY", "SLVERR", "DECERR"]

#: The bytes written one lane at a time by :meth:`TB.registers`.
LANE_BYTES = (0x3D, 0xC6, 0x5B, 0xA7)


def _pauses(rng, probability):
    while True:
        yield rng.random() < probability


class TB:
    def __init__(self, dut, spec):
        self.dut = dut
        engine, c = spec.get("engine", "gemm"), spec["config"]
        if engine == "encoder":     # checked by the caller, stage by stage
            self.config = EncoderConfig(
                gemm=GemmConfig(**c["gemm"]), softmax=SoftmaxConfig(**c["softmax"]),
                layernorm=LayerNormConfig(**c["layernorm"]), gelu=GeluConfig(**c["gelu"]))
            self.golden = None
        else:
            self.config = (SparseEngineConfig if engine == "sparse" else GemmConfig)(**c)
            self.golden = run_sparse_commands if engine == "sparse" else run_commands
        self.size = spec["mem_size"]
        self.max_burst = spec["max_burst"]
        #: The bus's functional coverage (:meth:`cover_bus`).
        self.cover = Coverage("axi")
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=self.size)
        self.lite = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
        self.driver = AsyncDriver(CocotbBackend(self.lite, self.ram),
                                  record_bytes=spec["record_bytes"])
        rng = random.Random(spec.get("seed", 0))
        p = spec.get("pause", 0.0)
        channels = {"aw": self.ram.write_if.aw_channel, "w": self.ram.write_if.w_channel,
                    "b": self.ram.write_if.b_channel, "ar": self.ram.read_if.ar_channel,
                    "r": self.ram.read_if.r_channel}
        for name, channel in channels.items():
            chance = float(p.get(name, 0.0) if isinstance(p, dict) else p)
            seed = rng.random()
            if chance:
                channel.set_pause_generator(_pauses(random.Random(seed), chance))
        self._read, self._write = self.ram.read_if._read, self.ram.write_if._write
        # An injected error answers DECERR instead of SLVERR while decerr is set.
        self.decerr = False
        for channel, field in ((self.ram.read_if.r_channel, "rresp"),
                               (self.ram.write_if.b_channel, "bresp")):
            channel.send = self._decerr(channel.send, field)

    def _decerr(self, send, field):
        async def wrapped(item):
            if self.decerr and getattr(item, field) == AxiResp.SLVERR:
                setattr(item, field, AxiResp.DECERR)
            await send(item)
        return wrapped

    async def reset(self):
        cocotb.start_soon(Clock(self.dut.clk, 10, unit="ns").start())
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    def inject(self, fail_read=None, fail_write=None, decerr=False):
        """Answer SLVERR (``decerr``: DECERR) to reads / writes of bytes in
        ``[lo, hi)``."""
        self.decerr = bool(decerr)
        def failing(call, span):
            async def wrapped(address, data_or_length):
                if span and span[0] <= address < span[1]:
                    raise OSError("injected bus error")
                return await call(address, data_or_length)
            return wrapped
        self.ram.read_if._read = failing(self._read, fail_read)
        self.ram.write_if._write = failing(self._write, fail_write)

    def memory(self):
        return np.frombuffer(self.ram.read(0, self.size), dtype=np.uint8).copy()

    async def responses(self):
        """The AXI4-Lite responses (``"OKAY"``, ``"SLVERR"``, ...) to probe
        accesses, by name: reads and writes of a register, of an unmapped
        address, and writes to read-only registers (which must not change);
        under ``prot``, a read of ID and a write of IRQ_ENABLE with AxPROT 7,
        then 0 (``[read resp, data, write resp]``); under ``w_after_aw``,
        IRQ_ENABLE read back after a write of 3 whose W came after its AW;
        under ``r_held`` and ``b_held``, two reads and two writes at once whose
        R and B wait for their ready."""
        lite, names = self.lite, {v: k for k, v in AxiResp.__members__.items()}
        out = {}
        for name, addr in (("read_id", REG["ID"]), ("read_unmapped", 0x30),
                           ("read_unmapped_top", 0xFC)):
            out[name] = names[(await lite.read(addr, 4)).resp]
        # a byte read at an unaligned address reads its word's byte
        answer = await lite.read(REG["ID"] + 3, 1)
        out["read_id_byte3"] = [names[answer.resp], answer.data[0]]
        for name, addr in (("write_irq_enable", REG["IRQ_ENABLE"]), ("write_unmapped", 0x30),
                           ("write_unmapped_top", 0xFC),
                           ("write_id", REG["ID"]), ("write_status", REG["STATUS"]),
                           ("write_cycles", REG["CYCLES"])):
            out[name] = names[(await lite.write(addr, (0).to_bytes(4, "little"))).resp]
        out["id_after_write"] = await lite.read_dword(REG["ID"])
        # W after AW: the lite master's W channel paused 3 cycles in 4, so
        # AWVALID rises first; the slave must wait for W (its data lands)
        self.lite.write_if.w_channel.set_pause_generator(iter([True] * 3 + [False] * 1000))
        await lite.write(REG["IRQ_ENABLE"], (3).to_bytes(4, "little"))
        self.lite.write_if.w_channel.clear_pause_generator()
        out["w_after_aw"] = await lite.read_dword(REG["IRQ_ENABLE"])
        await lite.write_dword(REG["IRQ_ENABLE"], 0)
        # R and B held: the lite master's R, then B channel paused 6 cycles,
        # so RVALID and BVALID wait for their ready, data and response held
        # (two reads at once, ID and VERSION, then two writes at once,
        # IRQ_ENABLE and an unmapped word: each second access is taken only
        # once the first's R or B is)
        self.lite.read_if.r_channel.set_pause_generator(iter([True] * 6 + [False] * 1000))
        reads = [cocotb.start_soon(lite.read_dword(addr)) for addr in (REG["ID"], REG["VERSION"])]
        out["r_held"] = [await read for read in reads]
        self.lite.read_if.r_channel.clear_pause_generator()
        self.lite.write_if.b_channel.set_pause_generator(iter([True] * 6 + [False] * 1000))
        writes = [cocotb.start_soon(lite.write(addr, bytes(4)))
                  for addr in (REG["IRQ_ENABLE"], 0x30)]
        out["b_held"] = [names[(await write).resp] for write in writes]
        self.lite.write_if.b_channel.clear_pause_generator()
        # AxPROT is ignored: a read and a write with every bit set, then clear
        out["prot"] = []
        for prot in (7, 0):
            answer = await lite.read(REG["ID"], 4, prot=prot)
            written = await lite.write(REG["IRQ_ENABLE"], bytes(4), prot=prot)
            out["prot"].append([names[answer.resp], int.from_bytes(answer.data, "little"),
                                names[written.resp]])
        return out

    async def cover_bus(self):
        """Functional coverage of the bus, sampled every cycle into
        ``self.cover`` (:class:`~bertforge.sim.funcov_tb.Coverage`): each
        channel of :data:`BUS_CHANNELS` held for a run of cycles; the
        master's burst lengths (one beat, more, the longest write burst),
        bursts that end a 4 KB page, WSTRB full and partial, WLAST and
        RLAST set and clear, the responses on R and B; the register file's
        reads and writes of each register, an unmapped word and (writes) a
        read-only one."""
        from bertforge.rtl.axi import MAX_WRITE_BURST
        from bertforge.rtl.axi_regmap import REGISTERS
        from bertforge.rtl.axi_regs import is_writable
        from bertforge.rtl.axi_top import gemm_config
        dut, cover = self.dut, self.cover
        mb = gemm_config(self.config).mem_bytes
        longest = min(self.max_burst, MAX_WRITE_BURST)
        held = [(getattr(dut, f"{prefix}valid"), getattr(dut, f"{prefix}ready"),
                 HeldRuns(cover.point(f"{point}.{'stalled' if drives else 'refused'}", bins),
                          lengths=bins == RUN_BINS))
                for point, prefix, drives, bins in BUS_CHANNELS]
        ar_len = cover.point("axi.ar.len", ["1", "2+"])
        aw_len = cover.point("axi.aw.len", ["1", f"2-{longest - 1}", f"{longest}"])
        page_end = {ch: cover.point(f"axi.{ch}.page_end", [True]) for ch in ("ar", "aw")}
        strb = cover.point("axi.w.strb", ["full", "partial"])
        last = {ch: cover.point(f"axi.{ch}.last", [True, False]) for ch in ("w", "r")}
        resp = {ch: cover.point(f"axi.{ch}.resp", RESPONSES) for ch in ("r", "b")}
        names = {r["offset"] >> 2: r["name"] for r in REGISTERS}
        writable = {r["name"] for r in REGISTERS if is_writable(r)}
        reads = cover.point("axi_regs.read", [r["name"] for r in REGISTERS] + ["unmapped"])
        writes = cover.point("axi_regs.write", sorted(writable) + ["read-only", "unmapped"])
        full = (1 << mb) - 1
        while True:
            await RisingEdge(dut.clk)
            for valid, ready, runs in held:
                runs.sample(bool(int(valid.value)) and not int(ready.value))
            for ch, length in (("ar", ar_len), ("aw", aw_len)):
                port = f"m_axi_{ch}"
                if int(getattr(dut, port + "valid").value) and int(getattr(dut, port + "ready").value):
                    beats = int(getattr(dut, port + "len").value) + 1
                    addr = int(getattr(dut, port + "addr").value)
                    if ch == "ar":
                        length("1" if beats == 1 else "2+")
                    else:
                        length("1" if beats == 1 else str(longest) if beats == longest
                               else f"2-{longest - 1}")
                    if (addr + beats * mb) % 4096 == 0:
                        page_end[ch](True)
            if int(dut.m_axi_wvalid.value) and int(dut.m_axi_wready.value):
                strb("full" if int(dut.m_axi_wstrb.value) == full else "partial")
                last["w"](bool(int(dut.m_axi_wlast.value)))
            if int(dut.m_axi_rvalid.value) and int(dut.m_axi_rready.value):
                last["r"](bool(int(dut.m_axi_rlast.value)))
                resp["r"](AxiResp(int(dut.m_axi_rresp.value)).name)
            if int(dut.m_axi_bvalid.value) and int(dut.m_axi_bready.value):
                resp["b"](AxiResp(int(dut.m_axi_bresp.value)).name)
            if int(dut.s_axi_arvalid.value) and int(dut.s_axi_arready.value):
                reads(names.get(int(dut.s_axi_araddr.value) >> 2, "unmapped"))
            if int(dut.s_axi_awvalid.value) and int(dut.s_axi_awready.value):
                name = names.get(int(dut.s_axi_awaddr.value) >> 2)
                writes(name if name in writable else "unmapped" if name is None else "read-only")

    async def count_steps(self):
        """The performance counters' steps summed cycle by cycle (the top's
        ``*_step`` wires, cleared with the counters by ``clear``), into
        ``self.steps``: each counter must read its sum; and the write
        bursts (AW handshakes) since the last ``clear``, into ``self.bursts``."""
        dut, self.steps, self.bursts = self.dut, {}, 0
        if not hasattr(dut, "clear"):
            return
        wires = {name: getattr(dut, f"{name}_step") for name in STEPS
                 if hasattr(dut, f"{name}_step")}
        awvalid, awready = dut.m_axi_awvalid, dut.m_axi_awready
        while True:
            await RisingEdge(dut.clk)
            if dut.clear.value:
                self.steps, self.bursts = dict.fromkeys(wires, 0), 0
            else:
                for name, wire in wires.items():
                    self.steps[name] = self.steps.get(name, 0) + int(wire.value)
                self.bursts += int(awvalid.value) & int(awready.value)

    async def registers(self):
        """The register file read back: every mapped register (response and
        data) after reset; each read-write one after a write of all ones, of
        one byte lane at a time (``WSTRB``) from 0, and of 0 again; the data of
        every unmapped word (``[resp, data]`` pairs, by register name)."""
        from bertforge.rtl.axi_regmap import REGISTERS
        lite, names = self.lite, {v: k for k, v in AxiResp.__members__.items()}

        async def read(addr):
            answer = await lite.read(addr, 4)
            return [names[answer.resp], int.from_bytes(answer.data, "little")]
        out = {"reset": {r["name"]: await read(r["offset"]) for r in REGISTERS}}
        mapped = {r["offset"] for r in REGISTERS}
        out["unmapped"] = [await read(addr) for addr in range(0, 256, 4) if addr not in mapped]
        writable = ("PROG_BASE_LO", "PROG_BASE_HI", "PROG_LEN", "IRQ_ENABLE", "IRQ_STATUS")
        out["ones"], out["lanes"] = {}, {}
        for name in writable:
            await lite.write_dword(REG[name], 0xFFFFFFFF)
            out["ones"][name] = await read(REG[name])
            await lite.write_dword(REG[name], 0)
            out["lanes"][name] = []
            for lane, byte in enumerate(LANE_BYTES):
                await lite.write(REG[name] + lane, bytes([byte]))
                out["lanes"][name].append(await read(REG[name]))
            await lite.write_dword(REG[name], 0)
        out["cleared"] = {name: await read(REG[name]) for name in writable}
        return out

    async def run(self, run):
        dut, driver = self.dut, self.driver
        before = self.memory()
        self.inject(run.get("fail_read"), run.get("fail_write"), run.get("decerr"))
        if run["base"] % self.driver.record_bytes:     # the driver refuses such a base
            program = bytes.fromhex(run["program"])
            self.ram.write(run["base"], program)
            for name, value in (("PROG_BASE_LO", run["base"]), ("PROG_BASE_HI", 0),
                                ("PROG_LEN", len(program) // self.driver.record_bytes)):
                await self.lite.write_dword(REG[name], value)
        else:
            await driver.load(run["base"], bytes.fromhex(run["program"]))
        if run.get("records") is not None:     # PROG_LEN other than the program's records
            await driver.point(run["base"], run["records"])
        start = get_sim_time("ns")
        await driver.run(irq=True)
        # counters moved to near the top: each then reads its steps since
        # the start plus the offset the deposit made (mod 2**32)
        offsets, high = {}, None
        if run.get("deposit") or run.get("deposit_pc") is not None:
            # between clock edges, after the start's clear: the value read is
            # the register's, and the write lands before the next edge
            await ClockCycles(dut.clk, 2)
            await FallingEdge(dut.clk)
            if run.get("deposit_pc") is not None:
                # the register is named after the port it drives, regs' pc_count
                assert int(dut.pc_count.value) == 0, "the program counter moved before the deposit"
                dut.pc_count.value = run["deposit_pc"]
        if run.get("deposit"):
            for name, value in run["deposit"].items():
                handle = getattr(dut.counters, f"count_{name}")
                offsets[name] = (value - int(handle.value)) % (1 << 32)
                handle.value = value
            high = await driver.counters()
        if run.get("abort_after") is not None:
            await ClockCycles(dut.clk, run["abort_after"])
            await self.lite.write_dword(REG["CTRL"], 2)
        try:
            pc, code = await driver.wait(run.get("polls", 100_000)), 0
        except ProgramError as error:
            # a program that never ends fails the test at once (a hung
            # mutant is not simulated through the other runs' polls)
            assert error.code is not None, str(error)
            code = error.code
            pc = await self.lite.read_dword(REG["PC"])
        elapsed = round((get_sim_time("ns") - start) / 10)
        await RisingEdge(dut.clk)
        irq = int(dut.irq.value)
        # irq follows each status bit only with its enable bit
        status = await self.lite.read_dword(REG["STATUS"])
        irq_status = await self.lite.read_dword(REG["IRQ_STATUS"])
        irq_enabled = []
        for enable in (0, 1, 2, 3):
            await self.lite.write_dword(REG["IRQ_ENABLE"], enable)
            await RisingEdge(dut.clk)
            irq_enabled.append(int(dut.irq.value))
        await self.lite.write_dword(REG["IRQ_STATUS"], 3)
        await ClockCycles(dut.clk, 2)
        irq_after = int(dut.irq.value)
        steps, bursts = dict(self.steps), self.bursts
        counters = await driver.counters()
        self.inject()
        ran = [c for c in run["commands"] if c.get("opcode", "run") == "run"][:pc]
        expected = before.copy()
        # The program's own bytes are memory too.
        expected[run["base"]:run["base"] + len(run["program"]) // 2] = np.frombuffer(
            bytes.fromhex(run["program"]), dtype=np.uint8)
        errors = self.golden(self.config, expected, ran) if self.golden else []
        got = self.memory()
        checked = self.golden and not (run.get("fail_read") or run.get("fail_write"))
        mismatches = int(np.count_nonzero(got != expected)) if checked else None
        return {"code": code, "pc": pc, "status": status, "irq": irq, "irq_after": irq_after, "counters": counters,
                "elapsed": elapsed, "irq_status": irq_status, "irq_enabled": irq_enabled,
                "steps": steps, "write_bursts": bursts, "offsets": offsets,
                "counters_high": high,
                "mismatches": mismatches, "errors": errors}


@cocotb.test()
async def axi_programs(dut):
    with open(os.environ["BERTFORGE_SPEC"]) as f:
        spec = json.load(f)
    tb = TB(dut, spec)
    image = np.load(spec["image"]).astype(np.uint8)
    tb.ram.write(0, image.tobytes())
    await tb.reset()
    cocotb.start_soon(tb.count_steps())
    cocotb.start_soon(tb.cover_bus())
    # Watchdogs: a mutant that never answers a register access, or never
    # ends a program, fails in about the cycles of its run's polls
    # (``polls``; a poll takes at most 8 cycles) instead of hanging.
    results = {"registers": await with_timeout(tb.registers(), 200, "us"),
               "responses": await with_timeout(tb.responses(), 50, "us"),
               "config": await with_timeout(tb.driver.config(), 50, "us"), "runs": []}
    for run in spec["runs"]:
        budget = 8 * run.get("polls", 100_000) + 50_000     # cycles of 10 ns
        results["runs"].append(await with_timeout(tb.run(run), budget / 100, "us"))
        with open(spec["result_path"], "w") as f:
            json.dump(results, f)
    results["image"] = spec["result_path"] + ".npy"
    results["functional_coverage"] = tb.cover.report()
    np.save(results["image"], tb.memory())
    with open(spec["result_path"], "w") as f:
        json.dump(results, f)
    for index, (run, got) in enumerate(zip(spec["runs"], results["runs"])):
        where = f"run {index}"
        assert got["code"] == run["expect_code"], f"{where}: error code {got['code']}, expected {run['expect_code']}"
        if "expect_pc" in run:
            assert got["pc"] == run["expect_pc"], f"{where}: pc {got['pc']}, expected {run['expect_pc']}"
        assert got["irq"] == 1 and got["irq_after"] == 0, f"{where}: irq {got['irq']} then {got['irq_after']}"
        assert not any(got["errors"]), f"{where}: the golden model rejects a command"
        if got["mismatches"] is not None:
            assert got["mismatches"] == 0, f"{where}: {got['mismatches']} bytes differ from the golden model"
