"""Simulation-only wrapper of the GEMM engine: the engine, a command queue
and a testbench memory, all in HDL, so Python stays out of the per-cycle loop.

The memory is ``2**addr_width`` bytes, ``mem_width`` bits per word, with
byte-granular unaligned reads and writes. Read requests wait a random
latency (``lat_min + (rnd & lat_mask)`` cycles, in order); the memory stalls
the read-request and write streams, gaps the read data, gaps commands and
stalls completions at random (probability ``p_* / 256`` each cycle), from a
seeded xorshift64 generator. ``bw`` limits read data to ``bw`` bytes per cycle
on average (0: one full beat per cycle).

Host side (used while ``go`` is low): ``host_we``/``host_addr``/``host_wdata``
write memory words, ``host_rdata`` reads word ``host_addr`` one cycle later,
``cmd_push`` queues ``cmd_data``. With ``go`` high the engine runs the queued
commands; ``cycles`` counts from the first command handshake to the last
completion handshake (both included), ``finished`` rises when every queued
command has completed, and bit ``i`` of ``errors`` is the error flag of
completion ``i`` (``tags`` keeps their tags, 8 bits each, for the first 8).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from bertforge.rtl.gemm_engine import GemmConfig, GemmEngine
from bertforge.rtl.tile_scheduler import command_layout

__all__ = ["GemmHarness", "harness_name", "MAX_COMMANDS"]

#: Commands the harness queue holds.
MAX_COMMANDS = 32


def harness_name(config):
    return f"{config.name}_harness"


class GemmHarness(wiring.Component):
    """:class:`GemmEngine` + command queue + random-latency memory (see module doc)."""

    def __init__(self, config):
        if not isinstance(config, GemmConfig):
            raise TypeError(f"config must be a GemmConfig, not {config!r}")
        self.config = config
        words = 1 << (config.addr_width - (config.mem_bytes.bit_length() - 1))
        self.words = words
        super().__init__({
            "host_addr": In(range(words)), "host_wdata": In(config.mem_width), "host_we": In(1),
            "host_rdata": Out(config.mem_width),
            "cmd_data": In(command_layout(config)), "cmd_push": In(1),
            "go": In(1), "seed": In(32),
            "lat_min": In(8), "lat_mask": In(8),
            "p_req": In(8), "p_data": In(8), "p_wr": In(8), "p_cmd": In(8), "p_done": In(8),
            "bw": In(16),
            "cycles": Out(32), "completions": Out(8), "finished": Out(1),
            "errors": Out(MAX_COMMANDS), "tags": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        MB = cfg.mem_bytes
        mbb = MB.bit_length() - 1
        engine = m.submodules.engine = self._engine = GemmEngine(cfg)

        # Random numbers: xorshift64, seeded while go is low.
        state = Signal(64, init=1)
        x1 = state ^ (state << 13)[:64]
        x2 = x1 ^ (x1 >> 7)
        x3 = x2 ^ (x2 << 17)[:64]
        with m.If(self.go):
            m.d.sync += state.eq(x3)
        with m.Else():
            m.d.sync += state.eq(Cat(self.seed, ~self.seed))
        def chance(p, byte):
            return state[8 * byte:8 * byte + 8] < p
        now = Signal(32)
        m.d.sync += now.eq(now + 1)

        mem = m.submodules.memory = Memory(shape=unsigned(cfg.mem_width), depth=self.words, init=[])
        host_wp = mem.write_port()
        host_rp = mem.read_port()
        m.d.comb += [host_wp.addr.eq(self.host_addr), host_wp.data.eq(self.host_wdata),
                     host_wp.en.eq(self.host_we & ~self.go),
                     host_rp.addr.eq(self.host_addr), self.host_rdata.eq(host_rp.data)]

        # Commands and completions.
        layout = command_layout(cfg)
        cmds = m.submodules.cmds = SyncFIFOBuffered(width=layout.size, depth=MAX_COMMANDS)
        pushed = Signal(8)
        done_n = Signal(8)
        started = Signal()
        finished = Signal()
        m.d.comb += [cmds.w_data.eq(self.cmd_data), cmds.w_en.eq(self.cmd_push & ~self.go)]
        with m.If(cmds.w_en & cmds.w_rdy):
            m.d.sync += pushed.eq(pushed + 1)
        cmd_ok = self.go & ~chance(self.p_cmd, 3)
        m.d.comb += [engine.cmd.payload.eq(cmds.r_data), engine.cmd.valid.eq(cmds.r_rdy & cmd_ok),
                     cmds.r_en.eq(engine.cmd.ready & cmd_ok)]
        first = engine.cmd.valid & engine.cmd.ready & ~started
        done_take = engine.done.valid & engine.done.ready
        m.d.comb += engine.done.ready.eq(self.go & ~chance(self.p_done, 4))
        with m.If(first):
            m.d.sync += started.eq(1)
        with m.If(first | (started & ~finished)):
            m.d.sync += self.cycles.eq(self.cycles + 1)
        errors = Signal(MAX_COMMANDS)
        tags = Signal(64)
        with m.If(done_take):
            m.d.sync += done_n.eq(done_n + 1)
            for i in range(MAX_COMMANDS):
                with m.If(done_n == i):
                    m.d.sync += errors[i].eq(engine.done.payload.error)
            for i in range(8):
                with m.If(done_n == i):
                    m.d.sync += tags[8 * i:8 * i + 8].eq(engine.done.payload.tag)
            with m.If(done_n + 1 == pushed):
                m.d.sync += finished.eq(1)
        m.d.comb += [self.completions.eq(done_n), self.finished.eq(finished),
                     self.errors.eq(errors), self.tags.eq(tags)]

        # Reads: requests wait in order until due, then stream their beats.
        req_layout = data.StructLayout({"addr": cfg.addr_width, "beats": 8, "due": 32})
        reqs = m.submodules.reqs = SyncFIFOBuffered(width=req_layout.size, depth=32)
        last_due = Signal(32)
        due = Signal(32)
        fresh = now + self.lat_min + (state[40:48] & self.lat_mask)
        m.d.comb += due.eq(Mux(fresh > last_due, fresh, last_due))
        rq = engine.rd_req
        entry = Signal(req_layout)
        m.d.comb += [entry.addr.eq(rq.payload.addr), entry.beats.eq(rq.payload.beats),
                     entry.due.eq(due), reqs.w_data.eq(entry)]
        req_ok = self.go & ~chance(self.p_req, 0)
        m.d.comb += [rq.ready.eq(reqs.w_rdy & req_ok), reqs.w_en.eq(rq.valid & req_ok)]
        with m.If(rq.valid & rq.ready):
            m.d.sync += last_due.eq(due)

        head = data.View(req_layout, reqs.r_data)
        out = m.submodules.rdata = SyncFIFOBuffered(width=cfg.mem_width, depth=8)
        pending = Signal()
        tokens = Signal(range(4 * MB + (1 << 16)))
        token_ok = (self.bw == 0) | (tokens >= MB)
        beat = Signal(8)
        serve = (reqs.r_rdy & (now >= head.due) & token_ok & (out.level + pending < 6)
                 & ~chance(self.p_data, 1))
        word = (head.addr >> mbb) + beat
        p0, p1 = mem.read_port(), mem.read_port()
        m.d.comb += [p0.addr.eq(word), p1.addr.eq(word + 1)]
        offset = Signal(range(MB))
        m.d.sync += [pending.eq(serve), offset.eq(head.addr[:mbb])]
        with m.If(serve):
            m.d.sync += beat.eq(beat + 1)
            with m.If(beat == head.beats - 1):
                m.d.sync += beat.eq(0)
                m.d.comb += reqs.r_en.eq(1)
        refill = Mux(tokens + self.bw > MB + self.bw, MB + self.bw, tokens + self.bw)
        m.d.sync += tokens.eq(refill - Mux(serve, MB, 0))
        m.d.comb += [
            out.w_data.eq((Cat(p0.data, p1.data) >> (offset * 8))[:cfg.mem_width]),
            out.w_en.eq(pending),
            engine.rd_data.payload.eq(out.r_data), engine.rd_data.valid.eq(out.r_rdy),
            out.r_en.eq(engine.rd_data.ready),
        ]

        # Writes: unaligned, byte-masked, over two words.
        wr = engine.wr_req
        wr_ok = self.go & ~chance(self.p_wr, 2)
        m.d.comb += wr.ready.eq(wr_ok)
        take = wr.valid & wr_ok
        w0, w1 = mem.write_port(granularity=8), mem.write_port(granularity=8)
        waddr = wr.payload.addr >> mbb
        woff = wr.payload.addr[:mbb]
        shifted = (Cat(wr.payload.data, Const(0, cfg.mem_width)) << (woff * 8))[:2 * cfg.mem_width]
        mask = ((Const(1, 2 * MB + 1) << wr.payload.bytes) - 1)[:2 * MB]
        mask = (mask << woff)[:2 * MB]
        m.d.comb += [
            w0.addr.eq(waddr), w1.addr.eq(waddr + 1),
            w0.data.eq(shifted[:cfg.mem_width]), w1.data.eq(shifted[cfg.mem_width:]),
            w0.en.eq(Mux(take, mask[:MB], 0)), w1.en.eq(Mux(take, mask[MB:], 0)),
        ]
        return m
