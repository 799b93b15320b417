"""The formal properties of the GEMM block (see :mod:`bertforge.sim.formal`).

- :class:`SchedulerSpec`: :class:`~bertforge.rtl.tile_scheduler.TileScheduler`
  with commands from an environment that obeys the stream rules and any
  ``ready`` on ``chunk``: the stream rules on ``chunk``; no chunk without a
  command; a descriptor's ``error`` is set exactly for a bad command (the
  spec's own check: a size 0, a matrix past the address space, accumulate
  with int8 or int16 output, both int8 and int16, per-channel scales
  without int8 or int16; a bf16 engine: int8, int16, or accumulate with
  bf16 output) and a bad command yields that one descriptor and nothing else;
  every chunk of a good command lies inside its A, B and C matrices
  (between the first and the last byte of each).
- :class:`EngineSpec`: the engine's
  :class:`~bertforge.sim.formal_specs.StreamSpec` and ``done_per_command``.
- :class:`AccumulatorSpec`: the engine's accumulator writes each sum its
  rows make, saturated, into the buffer (``sums_saturate``).

``gemm_proofs()`` (the scheduler's, the engine's, the serial engine's and
the accumulator's)
is the registry's proof list.
"""

import dataclasses

from amaranth.hdl import Mux, Signal, signed

from bertforge.rtl.accumulator import Accumulator, accumulator_fields
from bertforge.rtl.engine import project
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.serial_engine import gemm_engine
from bertforge.rtl.stream import clamp, delay
from bertforge.rtl.tile_scheduler import TileScheduler, chunk_layout, command_layout
from .formal import Proof, Spec
from .formal_specs import StreamSpec, Timing, one_command, stream_proofs, took

__all__ = ["SchedulerSpec", "SCHEDULER_CONFIG", "scheduler_proofs", "EngineSpec", "ENGINE_COMMAND",
           "AccumulatorSpec", "accumulator_proofs",
           "SERIAL_ENGINE_CONFIG", "engine_proofs", "gemm_proofs"]


class SchedulerSpec(Spec):
    """Properties of a tile scheduler (``make()`` builds it)."""

    PROPERTIES = ("chunk_valid_held", "chunk_payload_held", "no_chunk_without_command",
                  "error_iff_bad", "bad_gives_one_descriptor", "a_in_bounds", "b_in_bounds",
                  "c_in_bounds", "reaches_second_command")

    def build(self, m, platform):
        sched = m.submodules.dut = self.make()
        cfg = sched.config
        self.assume_stream_in(m, sched.cmd, "cmd")
        m.d.comb += sched.chunk.ready.eq(self.any_seq(m, 1, "chunk_ready"))
        self.check_stream_out(m, sched.chunk, "chunk")
        taken = sched.cmd.valid & sched.cmd.ready
        d, given = sched.chunk.payload, sched.chunk.valid & sched.chunk.ready

        # The command being worked on, and whether it has ended.
        cmd = Signal(command_layout(cfg))
        busy = Signal()
        since = Signal(2)            # descriptors given since the command (saturating)
        commands = Signal(2)         # commands taken (saturating)
        with m.If(taken):
            m.d.sync += [cmd.eq(sched.cmd.payload), busy.eq(1), since.eq(0),
                         commands.eq(commands + (commands != 3))]
        with m.Elif(given):
            m.d.sync += since.eq(since + (since != 3))
            with m.If(d.error | d.end):
                m.d.sync += busy.eq(0)
        self.check(m, "no_chunk_without_command", ~sched.chunk.valid | busy)

        # The spec's own check of a command: exact byte spans. C's elements
        # are int32, int16 or int8 (a bf16 engine: float32, or bf16 with
        # ``bf16_out``, 2 bytes).
        bf16 = cfg.bf16
        two_bytes = (cmd.int16 | cmd.bf16_out) if bf16 else cmd.int16
        narrow = cmd.int8 | cmd.int16
        esize, osize = cfg.width // 8, Mux(cmd.int8, 1, Mux(two_bytes, 2, 4))
        wide = cfg.addr_width + 2 * cfg.dim_width + 4
        a_end, b_end, c_end = Signal(wide), Signal(wide), Signal(wide)
        m.d.comb += [a_end.eq(cmd.a_addr + (cmd.m - 1) * cmd.a_stride + cmd.k * esize),
                     b_end.eq(cmd.b_addr + (cmd.k - 1) * cmd.b_stride + cmd.n * esize),
                     c_end.eq(cmd.c_addr + (cmd.m - 1) * cmd.c_stride + cmd.n * osize)]
        limit = 1 << cfg.addr_width
        bad = ((cmd.m == 0) | (cmd.k == 0) | (cmd.n == 0) | (cmd.accumulate & narrow)
               | (cmd.int8 & cmd.int16)
               | (a_end > limit) | (b_end > limit) | (c_end > limit)
               | (cmd.bias & (cmd.bias_addr + cmd.n * 4 > limit))
               | (cmd.per_channel & (~narrow | (cmd.scale_addr + cmd.n * 4 > limit))))
        if bf16:         # no requantization in a bf16 engine; old C is float32
            bad = bad | narrow | (cmd.accumulate & cmd.bf16_out)
        self.check(m, "error_iff_bad", ~sched.chunk.valid | (d.error == bad))
        self.check(m, "bad_gives_one_descriptor", ~(sched.chunk.valid & bad & (since != 0)))

        # Every chunk of a good command: its first and last byte inside the matrix.
        good = sched.chunk.valid & ~bad
        nonempty = (d.m_len != 0) & (d.k_len != 0) & (d.n_len != 0)
        spans = {
            "a": (d.a_base, cmd.a_addr, (d.m_len - 1) * cmd.a_stride + d.k_len * esize, a_end),
            "b": (d.b_base, cmd.b_addr, (d.k_len - 1) * cmd.b_stride + d.n_len * esize, b_end),
            "c": (d.c_base, cmd.c_addr, (d.m_len - 1) * cmd.c_stride + d.n_len * osize, c_end),
        }
        for name, (base, start, length, end) in spans.items():
            self.check(m, f"{name}_in_bounds",
                       ~good | (nonempty & (base >= start) & (base + length <= end)))
        self.cover(m, "reaches_second_command",
                   (commands == 2) & given & d.end & ~d.error)


#: The scheduler's small config: 2x2 OS array, 4 lanes (panel of 4 columns),
#: K chunks of 4, 8-bit addresses, 4-bit sizes.
SCHEDULER_CONFIG = GemmConfig(rows=2, cols=2, mem_width=32, k_chunk=4, m_tile=4,
                              addr_width=8, dim_width=4, acc_width=16)


def scheduler_proofs(*, make=None, config=SCHEDULER_CONFIG, depth=None):
    """The proofs of the GEMM engine's tile scheduler (block ``gemm``): the
    stream rules on ``chunk`` by k-induction; the rest by bmc: 12 cycles
    for no chunk without a command, ``dim_width + 6`` (from reset: a command
    taken, its ``dim_width`` cycles of shift-and-add range check, the check
    and its first 3 chunks, with a multiply-heavy spec check) for the error
    rule and the address bounds."""
    make = make or TileScheduler
    label = (f"scheduler {config.dataflow} panel={config.panel} block_rows={config.block_rows} "
             f"k_chunk={config.k_chunk} addr={config.addr_width} dim={config.dim_width}")
    bmc = depth or config.dim_width + 6
    methods = {"chunk_valid_held": ("prove", 4), "chunk_payload_held": ("prove", 4),
               "no_chunk_without_command": ("bmc", 12), "error_iff_bad": ("bmc", bmc),
               "bad_gives_one_descriptor": ("bmc", bmc), "a_in_bounds": ("bmc", bmc),
               "b_in_bounds": ("bmc", bmc), "c_in_bounds": ("bmc", bmc),
               "reaches_second_command": ("cover", 2 * config.dim_width + 10)}
    # the error and bounds proofs take 20-240 s each (the spec's byte spans
    # multiply strides by sizes)
    return [Proof(block="gemm", name=name, config=label,
                  spec=lambda only: SchedulerSpec(lambda: make(config), only=only),
                  method=method, depth=depth_, slow=name != "no_chunk_without_command")
            for name, (method, depth_) in methods.items()]


class EngineSpec(StreamSpec):
    """:class:`StreamSpec` of a GEMM engine, and ``done_per_command``: the
    completions given never outnumber the commands taken (one ``done`` per
    command: the Icarus run of issue 18 saw two). Every register without an
    initial value and every memory starts anywhere (the solver's choice,
    as X in a four-state simulator), so a control decision that read an
    empty queue's head would show here."""

    PROPERTIES = ("done_per_command",)

    def build(self, m, platform):
        super().build(m, platform)
        engine = self.dut
        commands, completions = Signal(6), Signal(6)
        m.d.sync += [commands.eq(commands + took(engine.cmd)),
                     completions.eq(completions + took(engine.done))]
        self.check(m, "done_per_command", completions <= commands)


#: The command of the engine's timing checks: C (1x1, int32) = A (1x1) B (1x1).
ENGINE_COMMAND = {"m": 1, "k": 1, "n": 1, "a_addr": 0, "b_addr": 16, "c_addr": 32,
                  "a_stride": 4, "b_stride": 4, "c_stride": 4}
#: Cycles from a read request's handshake to its first beat in the test
#: harness's memory at ``lat_min`` 1 (:func:`~bertforge.sim.gemm_harness.add_sim_memory`:
#: its request queue 2 cycles, the read 1, its read-data queue 2).
ENGINE_READ_LATENCY = 5


def _engine_memory(spec, m, engine):
    """An environment of :class:`Timing`: the engine's memory, which gives
    each read request's beats on ``rd_data``, in order, one a cycle, from
    :data:`ENGINE_READ_LATENCY` cycles after the request (any data)."""
    req, beats = engine.rd_req, engine.rd_data
    arriving = delay(m, Mux(took(req), req.payload.beats, 0), ENGINE_READ_LATENCY - 1,
                     "mem_beats", reset_less=False)
    owed = Signal(8, name="mem_owed")          # beats arrived and not yet taken
    m.d.sync += owed.eq(owed + arriving - took(beats))
    m.d.comb += [beats.valid.eq(owed != 0),
                 beats.payload.eq(spec.any_seq(m, len(beats.payload), "rd_data_payload"))]
    return {"rd_data"}


#: The serial engine of the proofs: the scheduler's config, serial, with no
#: command queue (as the iCEBreaker's).
SERIAL_ENGINE_CONFIG = dataclasses.replace(SCHEDULER_CONFIG, serial=True, command_queue=0)


def engine_proofs(*, make=None, config=SCHEDULER_CONFIG):
    """The GEMM engine's stream proofs (``done``, ``rd_req``, ``wr_req``;
    the engine of :func:`~bertforge.rtl.serial_engine.gemm_engine`, or
    ``make``'s);
    ``first_output``: a completion within the cycle model's start
    (:func:`~bertforge.sim.gemm_cycles.start_cycles`: a command taken,
    checked and rejected, then the writer's ``END``: 38 cycles; the serial
    engine's model of a rejected command);
    ``rd_req``'s payload rule by bmc of 24 cycles (its k-induction does not
    close: the step starts in unreachable states, the loader busy on an
    empty queue whose head changes); ``done_per_command`` by bmc of 24
    cycles; in the serial engine also ``rd_req``'s valid rule and the
    payload rules of ``wr_req`` and ``done`` by bmc of a command's cycles
    and 7 more (the step starts in a state that works on a descriptor the
    scheduler no longer offers). The timing checks run one command,
    :data:`ENGINE_COMMAND`, with the memory of :func:`_engine_memory`: ``latency``, its completion
    within :func:`~bertforge.sim.gemm_cycles.gemm_cycles` less 1 of its
    handshake; each port valid with its ``ready`` low: ``rd_req`` within
    ``start_cycles``, ``wr_req`` within the cycles to the first write
    beat (``gemm_cycles`` less ``END`` and the writer's cycles), ``done``
    within ``latency``'s bound. The serial engine's bounds are exact: its
    first read request ``dim_width + 6`` cycles after the command (the
    range check, the hand-over, A's first row), its write ``rows * cols``
    cycles before the completion (a cycle per PE of the block's walk)."""
    from .gemm_cycles import END, chunks, gemm_cycles, start_cycles, write_cycles
    from .gemm_golden import command_rejected
    assert not command_rejected(config, ENGINE_COMMAND)
    build = make or gemm_engine
    label = f"engine {config.rows}x{config.cols} {config.dataflow}" + " serial" * config.serial
    cycles = gemm_cycles(config, [ENGINE_COMMAND], lat=1)["cycles"]
    job = one_command("cmd", ENGINE_COMMAND)

    def environment(spec, m, engine):
        return job(spec, m, engine) | _engine_memory(spec, m, engine)
    if config.serial:
        first_read = config.dim_width + 6
        first_write = cycles - 1 - config.rows * config.cols
        first_output = gemm_cycles(config, [dict(ENGINE_COMMAND, m=0)])["cycles"]
    else:
        # the last write beat comes before the completion, the first as
        # many before it as the writer takes
        first_read = start_cycles(config)
        first_write = cycles - 1 - write_cycles(config, chunks(config, ENGINE_COMMAND)[-1])
        first_output = start_cycles(config) + END
    timing = Timing(start=lambda spec, engine: took(engine.cmd), done=lambda e: took(e.done),
                    bound=cycles - 1, lead=2, environment=environment,
                    ports={"rd_req": first_read, "wr_req": first_write})
    overrides = {"rd_req_payload_held": ("bmc", 24), "done_per_command": ("bmc", 24)}
    if config.serial:   # the sequencer's states hold the descriptor; no invariant says so
        overrides.update({name: ("bmc", cycles + 7) for name in (
            "rd_req_valid_held", "rd_req_payload_held", "wr_req_payload_held",
            "done_payload_held")})
    return stream_proofs("gemm", label, lambda: build(config), timing=timing, output="done",
                         first_output=first_output, spec=EngineSpec, overrides=overrides)


def gemm_proofs(*, make=None, config=None):
    """The GEMM block: its tile scheduler's proofs, the engine's, the
    serial engine's, its accumulator's, its AXI master's (:mod:`bertforge.sim.axi_formal`) and
    the AXI top's program fetcher's (:mod:`bertforge.sim.axi_fetch_formal`).
    Given ``make`` or ``config`` (the interface of every block's proofs: the
    proofs of the block's component, :func:`~bertforge.rtl.serial_engine.gemm_engine`,
    stated for ``config`` and built by ``make(config)``: ``bertforge
    mutate``'s proofs on a mutant), the engine's proofs only
    (:func:`engine_proofs`); the others are stated on parts of the engine."""
    if make is not None or config is not None:
        return engine_proofs(make=make, config=config or SCHEDULER_CONFIG)
    from .axi_fetch_formal import fetch_proofs
    from .axi_formal import axi_proofs
    return (scheduler_proofs() + engine_proofs() + engine_proofs(config=SERIAL_ENGINE_CONFIG)
            + accumulator_proofs() + axi_proofs() + fetch_proofs())


class AccumulatorSpec(Spec):
    """``sums_saturate``: the :class:`~bertforge.rtl.accumulator.Accumulator`
    writes the sums it should into the accumulator buffer. One buffer word
    ``(addr, lane)`` is picked (``any_const``); the spec walks the chunks
    itself (per chunk ``tiles`` tiles of ``kblocks`` result streams of
    ``block_rows`` rows, the block slot flipping after a ``last`` chunk)
    and keeps the value the buffer must hold there: a row taken on ``c``
    for that word makes it ``clamp(base + lane)`` (saturated to
    ``acc_width``), ``base`` 0 on a block's first chunk (first k-block),
    the old C value there when that chunk accumulates, and the word's
    previous value on later k-blocks and chunks. Every write to that word
    comes 2 cycles (the accumulator's latency) after such a row and holds
    that value, and no other write touches it. ``reaches_saturated_sum``
    (a cover): a later chunk's sum to the word saturates.

    Stated on the ports only (it holds for a mutant's Verilog too). The
    environment, as the engine gives it: ``chunk`` and ``c`` obey the
    stream rules; a chunk has 1 .. ``max_kblocks`` k-blocks (WS; an OS
    chunk is one) and 1 .. ``group`` tiles (the scheduler's); ``released``
    frees only a block that was committed (the writer's); the buffer's read port gives the
    word as last written (transparent, as the engine's ``acc_buf``; at
    power-up any value); the old C port gives one value for the word
    (``any_const``: the loader writes a block's old C before it starts and
    the spec holds it for the whole run); every other word read anything.
    ``config``: the accumulator's (an OS GemmConfig, not compact, integer,
    no weight groups)."""

    PROPERTIES = ("sums_saturate", "reaches_saturated_sum")
    #: The accumulator's latency: a row taken on ``c`` is written 2 cycles later.
    LATENCY = 2

    def __init__(self, make, *, config, only=None):
        super().__init__(make, only=only)
        self.config = config

    def build(self, m, platform):
        acc = m.submodules.dut = self.make()
        cfg = self.config
        C, Mt, aw = cfg.cols, cfg.block_rows, cfg.acc_width
        words = 2 * Mt
        addr = self.any_const(m, (words - 1).bit_length(), "word")
        lane = self.any_const(m, (cfg.panel - 1).bit_length(), "lane")
        old_c = self.any_const(m, aw, "old_c")
        power_up = self.any_const(m, aw, "power_up")
        self.assume(m, (addr < words) & (lane < cfg.panel))

        # Environment: the streams, the descriptors' counts, released.
        self.assume_stream_in(m, acc.chunk, "chunk")
        self.assume_stream_in(m, acc.c, "c")
        d = acc.chunk.payload
        # (an OS chunk is one k-block: its descriptor has no kblocks)
        kblocks = d.kblocks if "kblocks" in accumulator_fields(cfg) else 1
        self.assume(m, ~acc.chunk.valid | ((kblocks >= 1) & (kblocks <= cfg.max_kblocks)
                                           & (d.tiles >= 1) & (d.tiles <= cfg.group)))
        owed = Signal(2, name="blocks_owed")      # committed, not yet released
        m.d.comb += acc.released.eq(self.any_seq(m, 1, "released"))
        m.d.sync += owed.eq(owed + acc.committed - acc.released)
        self.assume(m, ~acc.released | (owed != 0))

        def word_of(data):
            return data.word_select(lane, aw)

        # The buffers' read ports (one cycle after the address).
        written = acc.wr.en.bit_select(lane, 1) & (acc.wr.addr == addr)
        held, stored = Signal(aw, name="held"), Signal(name="held_stored")
        with m.If(written):
            m.d.sync += [held.eq(word_of(acc.wr.data)), stored.eq(1)]
        now = Mux(stored, held, power_up)
        rd_at = self.past(m, acc.rd.addr == addr, "rd_at")
        old_at = self.past(m, acc.old.addr == addr, "old_at")
        for name, at, value in (("rd", rd_at, now), ("old", old_at, old_c)):
            port = getattr(acc, name)
            m.d.comb += port.data.eq(self.any_seq(m, len(port.data), f"{name}_data"))
            self.assume(m, ~at | (word_of(port.data) == value))

        # The spec's walk of the chunks and its value of the word.
        row = Signal(range(Mt), name="walk_row")
        kb = Signal(range(cfg.max_kblocks + 1), name="walk_kb")
        j = Signal(range(cfg.group + 1), name="walk_j")
        slot = Signal(name="walk_slot")
        take = acc.c.valid & acc.c.ready
        with m.If(take):
            m.d.sync += row.eq(row + 1)
            with m.If(row == Mt - 1):
                m.d.sync += [row.eq(0), kb.eq(kb + 1)]
                with m.If(kb == kblocks - 1):
                    m.d.sync += [kb.eq(0), j.eq(j + 1)]
                    with m.If(j == d.tiles - 1):
                        m.d.sync += [j.eq(0), slot.eq(slot ^ d.last)]
        expect, known = Signal(aw, name="expect"), Signal(name="expect_known")
        value = Mux(known, expect, power_up)
        starts = d.first & (kb == 0)
        base = Mux(starts, Mux(d.accumulate, old_c, 0), value)
        total = Signal(signed(aw + 1), name="expect_total")
        m.d.comb += total.eq(base.as_signed() + acc.c.payload.data[lane % C])
        new = clamp(total, aw).as_unsigned()        # the word's bits
        hit = take & (slot * Mt + row == addr) & (j == lane // C)
        with m.If(hit):
            m.d.sync += [expect.eq(new), known.eq(1)]
        due = delay(m, hit, self.LATENCY, "due", reset_less=False)
        sum_due = delay(m, new, self.LATENCY, "sum_due")
        over = total[aw] ^ total[aw - 1]
        saturated = delay(m, hit & ~starts & over, self.LATENCY, "saturated", reset_less=False)
        self.check(m, "sums_saturate",
                   (written == due) & (~due | (word_of(acc.wr.data) == sum_due)))
        self.cover(m, "reaches_saturated_sum", saturated & written)


def _accumulator(config):
    """The accumulator of a GEMM engine of ``config`` (its descriptor fields,
    the array's result stream)."""
    engine = GemmEngine(config)
    array = engine.array()
    engine._MustUse__silence = array._MustUse__silence = True    # only the signature is read
    return Accumulator(config, project(chunk_layout(config), accumulator_fields(config)),
                       array.signature.members["c"].signature)


def accumulator_proofs(*, make=None, config=SCHEDULER_CONFIG):
    """The GEMM engine's accumulator (``make(config)``; the scheduler's small
    config: 2x2 OS, 4 lanes, 2-row blocks, 16-bit sums): ``sums_saturate``
    by bmc of 18 cycles (two blocks, one in each slot, of two chunks of
    every tile: the second chunk adds onto the first's sums; and the
    latency; 15 s); ``reaches_saturated_sum`` (a cover) within as many:
    saturation on a later chunk is in reach."""
    make = make or _accumulator
    label = f"accumulator {config.dataflow} panel={config.panel} block_rows={config.block_rows}"
    depth = 2 * 2 * config.group * config.max_kblocks * config.block_rows + AccumulatorSpec.LATENCY
    return [Proof(block="gemm", name=name, config=label,
                  spec=lambda only: AccumulatorSpec(lambda: make(config), config=config, only=only),
                  method=method, depth=depth, slow=method == "bmc")
            for name, method in (("sums_saturate", "bmc"), ("reaches_saturated_sum", "cover"))]
