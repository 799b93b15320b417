"""Simulation-only wrapper of the GEMM engine: the engine, a command queue
and a testbench memory, all in HDL, so Python stays out of the per-cycle loop.

The memory is ``2**addr_width`` bytes, ``mem_width`` bits per word, with
byte-granular unaligned reads and writes. It is a small behavioural Verilog
module (:data:`SIM_MEMORY_VERILOG`, appended to the emitted text by
:func:`harness_verilog`) rather than an ``amaranth.lib.memory.Memory``:
Amaranth writes every word of a memory's initial value into the Verilog, which
for the 4 MiB the BERT FFN GEMMs need made an 11 MB file and a 22-minute
emission. Read requests wait a random
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
``cover`` holds the functional cover bits of the engine's streams while
``go`` is high (:func:`stream_cover`, in the order of :data:`COVER_STREAMS`,
then the ``full`` bit): Python is not in the cycle loop, so the harness
records them.
"""

import json

from amaranth.back import verilog
from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.serial_engine import gemm_engine
from bertforge.rtl.stream import Queue
from bertforge.rtl.tile_scheduler import command_layout
from bertforge.rtl.errors import ParameterTypeError

__all__ = ["GemmHarness", "harness_name", "harness_verilog", "add_sim_memory", "MAX_COMMANDS",
           "SIM_MEMORY_VERILOG", "stream_cover", "engine_cover", "COVER_STREAMS"]

#: Commands the harness queue holds.
MAX_COMMANDS = 40

#: The testbench memory: registered (read-before-write) read ports ``h`` (host),
#: ``r0``, ``r1``; bit-masked write ports ``h``, ``w0``, ``w1``; zero at start.
SIM_MEMORY_VERILOG = """
module bertforge_sim_memory #(parameter WIDTH = 8, parameter ABITS = 4) (
  input clk,
  input [ABITS-1:0] h_addr, input [WIDTH-1:0] h_wdata, input h_we, output reg [WIDTH-1:0] h_rdata,
  input [ABITS-1:0] r0_addr, output reg [WIDTH-1:0] r0_data,
  input [ABITS-1:0] r1_addr, output reg [WIDTH-1:0] r1_data,
  input [ABITS-1:0] w0_addr, input [WIDTH-1:0] w0_data, input [WIDTH-1:0] w0_mask,
  input [ABITS-1:0] w1_addr, input [WIDTH-1:0] w1_data, input [WIDTH-1:0] w1_mask
);
  reg [WIDTH-1:0] mem [0:(1 << ABITS) - 1];
  integer i;
  initial for (i = 0; i < (1 << ABITS); i = i + 1) mem[i] = 0;
  always @(posedge clk) begin
    h_rdata <= mem[h_addr];
    r0_data <= mem[r0_addr];
    r1_data <= mem[r1_addr];
    if (h_we) mem[h_addr] <= h_wdata;
    if (|w0_mask) mem[w0_addr] <= (mem[w0_addr] & ~w0_mask) | (w0_data & w0_mask);
    if (|w1_mask) mem[w1_addr] <= (mem[w1_addr] & ~w1_mask) | (w1_data & w1_mask);
  end
endmodule
"""


#: The engine's streams that ``cover`` records, inputs first, with whether
#: each is an input of the engine.
COVER_STREAMS = [("cmd", True), ("rd_data", True), ("rd_req", False), ("wr_req", False),
                 ("done", False)]


def stream_cover(m, go, valid, ready):
    """Four sticky cover bits of one stream while ``go``: a run of beats
    held (``valid`` and not ``ready``) of 1, 2-3 and 4+ cycles ended
    (bits 0-2), and ``ready`` without ``valid`` (bit 3): the points that
    :meth:`bertforge.sim.funcov_tb.Coverage.hdl_streams` reads."""
    run = Signal(range(5))
    bits = Signal(4)
    with m.If(go):
        with m.If(valid & ~ready):
            m.d.sync += run.eq(Mux(run == 4, 4, run + 1))
        with m.Elif(run != 0):
            m.d.sync += run.eq(0)
            with m.If(run == 1):
                m.d.sync += bits[0].eq(1)
            with m.Elif(run < 4):
                m.d.sync += bits[1].eq(1)
            with m.Else():
                m.d.sync += bits[2].eq(1)
        with m.If(ready & ~valid):
            m.d.sync += bits[3].eq(1)
    return bits


def engine_cover(m, go, unit, streams):
    """The cover bits of ``unit``'s ``streams`` (``(name, is_input)``
    pairs, :func:`stream_cover` each) and a last one, ``full``: an input
    held while an output is held (the unit filled up behind a stalled
    consumer)."""
    held = {name: getattr(unit, name).valid & ~getattr(unit, name).ready for name, _ in streams}
    full = Signal()
    refused = Cat(held[name] for name, is_input in streams if is_input).any()
    stalled = Cat(held[name] for name, is_input in streams if not is_input).any()
    with m.If(go & refused & stalled):
        m.d.sync += full.eq(1)
    return Cat(*[stream_cover(m, go, getattr(unit, name).valid, getattr(unit, name).ready)
                 for name, _ in streams], full)


def harness_name(config):
    return f"{config.name}_harness"


def harness_verilog(config, harness_class=None, memory=None, clock_mhz=100.0):
    """Verilog of the harness (``GemmHarness`` or a subclass) around
    ``config``'s engine, with the memory module appended (deterministic);
    ``memory``, ``clock_mhz``: the SDRAM whose timing the memory follows
    (None: the ideal memory)."""
    harness_class = harness_class or GemmHarness
    extra = {} if memory is None or memory.ideal else {"memory": memory, "clock_mhz": clock_mhz}
    text = verilog.convert(harness_class(config, **extra), name=harness_name(config), emit_src=False)
    return (f"// Generated by bertforge: {harness_class.__name__} (simulation only)\n"
            f"// config: {json.dumps(config.to_dict(), sort_keys=True)}\n"
            + text + SIM_MEMORY_VERILOG)


class GemmHarness(wiring.Component):
    """The GEMM engine of the config (:func:`~bertforge.rtl.serial_engine.gemm_engine`:
    a :class:`~bertforge.rtl.gemm.GemmEngine` or, with ``serial``, a
    :class:`~bertforge.rtl.serial_engine.SerialGemmEngine`) + command queue +
    random-latency memory (see module doc).

    A subclass sets ``config_class``, ``engine_class`` and ``command_layout``
    to wrap another engine with the same memory interface."""

    config_class = GemmConfig
    engine_class = staticmethod(gemm_engine)
    command_layout = staticmethod(command_layout)

    def __init__(self, config, *, memory=None, clock_mhz=100.0):
        if not isinstance(config, self.config_class):
            raise ParameterTypeError(f"config must be a {self.config_class.__name__}, not {config!r}")
        self.config = config
        self.memory, self.clock_mhz = memory, clock_mhz
        words = 1 << (config.addr_width - (config.mem_bytes.bit_length() - 1))
        self.words = words
        super().__init__({
            "host_addr": In(range(words)), "host_wdata": In(config.mem_width), "host_we": In(1),
            "host_rdata": Out(config.mem_width),
            "cmd_data": In(self.command_layout(config)), "cmd_push": In(1),
            "go": In(1), "seed": In(32),
            "lat_min": In(8), "lat_mask": In(8),
            "p_req": In(8), "p_data": In(8), "p_wr": In(8), "p_cmd": In(8), "p_done": In(8),
            "bw": In(16),
            "cycles": Out(32), "completions": Out(8), "finished": Out(1),
            "errors": Out(MAX_COMMANDS), "tags": Out(64),
            "cover": Out(4 * len(COVER_STREAMS) + 1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        engine = m.submodules.engine = self._engine = self.engine_class(cfg)

        chance = add_sim_memory(m, self, engine, abits=cfg.addr_width, bw=self.bw,
                                memory=self.memory, clock_mhz=self.clock_mhz)

        # Commands and completions.
        layout = self.command_layout(cfg)
        cmds = m.submodules.cmds = Queue(shape=layout, depth=MAX_COMMANDS)
        pushed = Signal(8)
        done_n = Signal(8)
        started = Signal()
        finished = Signal()
        m.d.comb += [cmds.i.payload.eq(self.cmd_data), cmds.i.valid.eq(self.cmd_push & ~self.go)]
        with m.If(cmds.i.valid & cmds.i.ready):
            m.d.sync += pushed.eq(pushed + 1)
        cmd_ok = self.go & ~chance(self.p_cmd, 3)
        m.d.comb += [engine.cmd.payload.eq(cmds.o.payload), engine.cmd.valid.eq(cmds.o.valid & cmd_ok),
                     cmds.o.ready.eq(engine.cmd.ready & cmd_ok)]
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
                     self.errors.eq(errors), self.tags.eq(tags),
                     self.cover.eq(engine_cover(m, self.go, engine, COVER_STREAMS))]
        return m


def add_sim_memory(m, harness, unit, *, abits, bw=None, memory=None, clock_mhz=100.0):
    """Add the testbench memory (``2**abits`` bytes) to ``m``, serving
    ``unit``'s ``rd_req``/``rd_data``/``wr_req`` streams, with the host
    port and the random knobs (``go``, ``seed``, ``lat_min``, ``lat_mask``,
    ``p_req``, ``p_data``, ``p_wr``) of ``harness``; ``bw`` (a signal, or
    None for no limit) limits read bandwidth; ``memory`` (a
    :class:`~bertforge.sim.sdram.MemoryConfig` of kind "sdr", or None)
    gates the read data with that SDRAM's timing at ``clock_mhz``
    (:func:`~bertforge.sim.sdram.add_sdram_gate`). Returns ``chance(p, byte)``,
    true with probability ``p / 256`` per cycle (bytes 0-2 are the memory's;
    use 3 and up)."""
    mem_width = len(unit.rd_data.payload)
    addr_width = len(unit.rd_req.payload.addr)
    MB = mem_width // 8
    mbb = MB.bit_length() - 1
    go = harness.go
    # Random numbers: xorshift64, seeded while go is low.
    state = Signal(64, init=1)
    x1 = state ^ (state << 13)[:64]
    x2 = x1 ^ (x1 >> 7)
    x3 = x2 ^ (x2 << 17)[:64]
    with m.If(go):
        m.d.sync += state.eq(x3)
    with m.Else():
        m.d.sync += state.eq(Cat(harness.seed, ~harness.seed))

    def chance(p, byte):
        return state[8 * byte:8 * byte + 8] < p
    now = Signal(32)
    m.d.sync += now.eq(now + 1)

    wabits = abits - mbb
    port = {name: Signal(mem_width, name=f"mem_{name}")
            for name in ("h_rdata", "r0_data", "r1_data", "w0_data", "w0_mask", "w1_data", "w1_mask")}
    port.update({name: Signal(wabits, name=f"mem_{name}")
                 for name in ("r0_addr", "r1_addr", "w0_addr", "w1_addr")})
    m.submodules.memory = Instance(
        "bertforge_sim_memory", p_WIDTH=mem_width, p_ABITS=wabits, i_clk=ClockSignal(),
        i_h_addr=harness.host_addr, i_h_wdata=harness.host_wdata, i_h_we=harness.host_we & ~go,
        o_h_rdata=port["h_rdata"],
        i_r0_addr=port["r0_addr"], o_r0_data=port["r0_data"],
        i_r1_addr=port["r1_addr"], o_r1_data=port["r1_data"],
        i_w0_addr=port["w0_addr"], i_w0_data=port["w0_data"], i_w0_mask=port["w0_mask"],
        i_w1_addr=port["w1_addr"], i_w1_data=port["w1_data"], i_w1_mask=port["w1_mask"])
    m.d.comb += harness.host_rdata.eq(port["h_rdata"])

    # Reads: requests wait in order until due, then stream their beats.
    req_layout = data.StructLayout({"addr": addr_width, "beats": 8, "due": 32})
    reqs = m.submodules.reqs = Queue(shape=req_layout, depth=32)
    last_due = Signal(32)
    due = Signal(32)
    fresh = now + harness.lat_min + (state[40:48] & harness.lat_mask)
    m.d.comb += due.eq(Mux(fresh > last_due, fresh, last_due))
    rq = unit.rd_req
    entry = Signal(req_layout)
    m.d.comb += [entry.addr.eq(rq.payload.addr), entry.beats.eq(rq.payload.beats),
                 entry.due.eq(due), reqs.i.payload.eq(entry)]
    req_ok = go & ~chance(harness.p_req, 0)
    m.d.comb += [rq.ready.eq(reqs.i.ready & req_ok), reqs.i.valid.eq(rq.valid & req_ok)]
    with m.If(rq.valid & rq.ready):
        m.d.sync += last_due.eq(due)

    head = reqs.o.payload
    out = m.submodules.rdata = Queue(shape=mem_width, depth=8)
    pending = Signal()
    tokens = Signal(range(4 * MB + (1 << 16)))
    token_ok = 1 if bw is None else (bw == 0) | (tokens >= MB)
    beat = Signal(8)
    want = (reqs.o.valid & (now >= head.due) & token_ok & (out.level + pending < 6)
            & ~chance(harness.p_data, 1))
    word = (head.addr >> mbb) + beat
    if memory is not None and not memory.ideal:
        from .sdram import add_sdram_gate
        serve = want & add_sdram_gate(m, memory, mem_width=mem_width, clock_mhz=clock_mhz, go=go,
                                      now=now, word=word, want=want)
    else:
        serve = want
    m.d.comb += [port["r0_addr"].eq(word), port["r1_addr"].eq(word + 1)]
    offset = Signal(range(MB))
    m.d.sync += [pending.eq(serve), offset.eq(head.addr[:mbb])]
    with m.If(serve):
        m.d.sync += beat.eq(beat + 1)
        with m.If(beat == head.beats - 1):
            m.d.sync += beat.eq(0)
            m.d.comb += reqs.o.ready.eq(1)
    if bw is not None:
        refill = Mux(tokens + bw > MB + bw, MB + bw, tokens + bw)
        m.d.sync += tokens.eq(refill - Mux(serve, MB, 0))
    m.d.comb += [
        out.i.payload.eq((Cat(port["r0_data"], port["r1_data"]) >> (offset * 8))[:mem_width]),
        out.i.valid.eq(pending),
    ]
    wiring.connect(m, out.o, unit.rd_data)

    # Writes: unaligned, byte-masked, over two words.
    wr = unit.wr_req
    wr_ok = go & ~chance(harness.p_wr, 2)
    m.d.comb += wr.ready.eq(wr_ok)
    take = wr.valid & wr_ok
    waddr = wr.payload.addr >> mbb
    woff = wr.payload.addr[:mbb]
    # Signals, not expressions: Amaranth copies an expression for every bit taken of it.
    shifted = Signal(2 * mem_width)
    mask = Signal(2 * MB)
    m.d.comb += [
        shifted.eq(Cat(wr.payload.data, Const(0, mem_width)) << (woff * 8)),
        mask.eq(Mux(take, ((Const(1, 2 * MB + 1) << wr.payload.bytes) - 1) << woff, 0)),
    ]
    bits = Cat(bit.replicate(8) for bit in mask)
    m.d.comb += [
        port["w0_addr"].eq(waddr), port["w1_addr"].eq(waddr + 1),
        port["w0_data"].eq(shifted[:mem_width]), port["w1_data"].eq(shifted[mem_width:]),
        port["w0_mask"].eq(bits[:mem_width]), port["w1_mask"].eq(bits[mem_width:]),
    ]
    return chance
