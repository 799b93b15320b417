"""The stages of the GEMM engines, the way Gemmini splits Load / Execute / Store.

A command runs through these stages, each a component::

    commands -> scheduler --chunks--> Loader --beats--> operand buffers -> feeders -> array
                                        |                                              |
                              memory reads                                   result rows
                                                                                       v
            memory writes <-- Writer <-- accumulator buffer <-------------- Accumulator

- The scheduler (:class:`~bertforge.rtl.tile_scheduler.TileScheduler`) cuts
  commands into chunk descriptors; :func:`fan_out` hands each stage the
  fields it uses, through its own :class:`~bertforge.rtl.stream.Queue`.
- :class:`Loader` reads a chunk's rows from memory, one :class:`Job` after
  another (dense: old C, bias, scales, A, B; sparse: old C, bias, scales,
  A, values, indices), and tags each beat with its job, row and buffer slot.
- Feeders (per engine: output stationary, weight stationary, sparse) read
  the operand buffers into the array.
- :class:`Accumulator` adds the array's result rows into the accumulator
  buffer; :class:`Writer` adds the bias, requantizes (:class:`Requantizer`)
  and writes C.

Operand buffers hold two chunks and the accumulator, old C, bias and scale
buffers two blocks (double buffering). Stages tell each other about slots
with one-cycle *token* pulses: ``loaded`` (a chunk is in its slot; loader ->
feeders), ``freed`` (a feeder is done with a chunk slot; -> loader),
``committed`` (a block's last sum is in the accumulator buffer; ->
writer), ``released`` (the writer has read a block out; -> loader,
accumulator). Each stage counts the tokens it receives with
:func:`outstanding`.
"""

from dataclasses import dataclass
from typing import Callable

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory, ReadPort, WritePort
from amaranth.lib.wiring import In, Out

from .arith import FP32_NEG_ZERO, MULTIPLIER_CELLS, Bf16Arith, mult18x18d
from .params import check_bool, check_choice, check_int
from .stream import Queue, clamp, delay, register, stage
from .tile_scheduler import CHANNEL_MULT_BITS

__all__ = ["STAGE_QUEUE", "FEED_QUEUE", "read_request_layout", "write_request_layout",
           "engine_members", "project", "fan_out", "outstanding", "read_port", "feeder_members",
           "operand_queue", "Job", "Loader", "Accumulator", "Requantizer", "Writer",
           "StagedEngine"]

#: Default depth of the descriptor queues in front of the stages
#: (``GemmConfig.stage_queue``) and of the command queue (``command_queue``).
STAGE_QUEUE = 4
#: Depth of the operand queues in front of the array.
FEED_QUEUE = 8


def read_request_layout(config):
    """Read ``beats`` memory beats of consecutive bytes from byte ``addr`` on."""
    return data.StructLayout({"addr": unsigned(config.addr_width),
                              "beats": range(max(config.segments, 4) + 1)})


def write_request_layout(config):
    """Write the low ``bytes`` bytes of ``data`` at byte ``addr`` on."""
    return data.StructLayout({"addr": unsigned(config.addr_width),
                              "data": unsigned(config.mem_width),
                              "bytes": range(config.mem_bytes + 1)})


def engine_members(config, command_layout, completion_layout):
    """The ports of a GEMM engine: ``cmd``, ``done``, ``rd_req`` /
    ``rd_data`` (memory reads) and ``wr_req`` (memory writes)."""
    return {
        "cmd": In(stream.Signature(command_layout)),
        "done": Out(stream.Signature(completion_layout)),
        "rd_req": Out(stream.Signature(read_request_layout(config))),
        "rd_data": In(stream.Signature(unsigned(config.mem_width))),
        "wr_req": Out(stream.Signature(write_request_layout(config))),
    }


def project(layout, names):
    """The ``StructLayout`` of the fields ``names`` of ``layout``."""
    return data.StructLayout({name: layout.members[name] for name in names})


def fan_out(m, source, targets):
    """Offer each payload of stream ``source`` to every target that needs it,
    and take it once all of those have. ``targets`` is a list of
    ``(stream, needed)``: an input stream whose payload has a subset of the
    source's fields (copied by name) and a 1-bit expression of the source
    payload saying whether this target gets the payload.

    Each target takes the payload as soon as it can (a register per target
    remembers that it has), so no target's ``valid`` waits on another's
    ``ready``: the stage queues' fill levels reach only ``source.ready``,
    not each other's enables."""
    ready = Signal()
    m.d.comb += ready.eq(1)
    for n, (sink, needed) in enumerate(targets):
        taken = Signal(name=f"fan_out_taken{n}")
        for name in sink.payload.shape().members:
            m.d.comb += getattr(sink.payload, name).eq(getattr(source.payload, name))
        m.d.comb += sink.valid.eq(source.valid & needed & ~taken)
        with m.If(needed & ~taken & ~sink.ready):
            m.d.comb += ready.eq(0)
        with m.If(source.valid & ready):
            m.d.sync += taken.eq(0)
        with m.Elif(sink.valid & sink.ready):
            m.d.sync += taken.eq(1)
    m.d.comb += source.ready.eq(ready)


def outstanding(m, name, up, down, width=2):
    """A counter of ``up`` pulses not yet matched by ``down`` pulses (``up``
    and ``down`` are 1-bit; the count is updated the next cycle). Two bits
    by default: every token counts the slots of a double buffer (at most 2
    outstanding), and a narrow count is a short carry chain."""
    count = Signal(width, name=name)
    m.d.sync += count.eq(count + up - down)
    return count


def read_port(depth, shape):
    """The port a stage uses to read a buffer of ``depth`` words of ``shape``
    (connect it to the memory's ``read_port()``)."""
    return In(ReadPort.Signature(addr_width=(depth - 1).bit_length(), shape=shape))


def feeder_members(layout, reads, outputs):
    """The ports of a feeder: ``chunk`` (descriptors of ``layout``), the
    ``loaded`` token in and the ``freed`` token out (a pulse when the last
    read of a chunk is issued), buffer ports ``reads`` (name -> member) and
    streams to the array ``outputs`` (name -> payload shape)."""
    return {"chunk": In(stream.Signature(layout)), "loaded": In(1), "freed": Out(1), **reads,
            **{name: Out(stream.Signature(shape)) for name, shape in outputs.items()}}


def operand_queue(m, name, shape):
    """Operand queue with a two-cycle buffer read in front: the buffer's
    read, then a register of its data (an ECP5 block RAM takes 5.8 ns from
    its clock to its data, so no logic sits between them). Returns the
    queue, ``issue`` (drive it with "a read is issued now") and ``space``
    (a read may be issued now; a register, so no path from the queue's
    level into the caller's ``go``). The queue takes a payload two cycles
    after ``issue``: the caller computes it from the read data and what it
    registered with the read, each delayed a cycle more
    (:func:`~bertforge.rtl.stream.delay`)."""
    fifo = m.submodules[name] = Queue(shape=shape, depth=FEED_QUEUE)
    issue = Signal(name=f"{name}_issue")
    pending = delay(m, issue, 1, f"{name}_pending", reset_less=False)
    arriving = delay(m, pending, 1, f"{name}_arriving", reset_less=False)
    space = Signal(name=f"{name}_space")
    # Next cycle's reads in flight and beats queued, less nothing for this
    # cycle's pop: never fewer than there will be.
    m.d.sync += space.eq(fifo.level + pending + arriving + issue < FEED_QUEUE - 2)
    m.d.comb += fifo.i.valid.eq(arriving)
    return fifo, issue, space


def vector_buffer(config):
    """``(depth, width)`` of the bias and scale buffers, two blocks of
    ``panel`` 32-bit values each: a block per address (``panel * 32``
    bits), or with ``config.compact`` a memory beat per address (``Q =
    mem_width // 32`` values; narrow and deep, block RAM on iCE40)."""
    P, Q = config.panel, config.mem_bytes // 4
    if config.compact:
        return 2 * -(-P // Q), Q * 32
    return 2, P * 32


def _select(index, values):
    """``values[index]`` for a run-time ``index``."""
    out = values[-1]
    for number in range(len(values) - 2, -1, -1):
        out = Mux(index == number, values[number], out)
    return out


@dataclass(frozen=True)
class Job:
    """One kind of memory read of a chunk. Each field but ``name`` and the
    flags is a function of the chunk descriptor (a view) giving a value.

    ``when``: the chunk has this job; ``base``: byte address of its first
    row; ``stride``: bytes between rows; ``rows``: rows to read; ``beats``:
    memory beats per row. ``block``: the job fills a block buffer (old C,
    bias, scales), so it waits until the writer has released the block
    slot. ``resume``: after the first chunk of a block, rows continue where
    the previous chunk's stopped (``base`` is used only for ``first``)."""

    name: str
    when: Callable
    base: Callable
    stride: Callable
    rows: Callable
    beats: Callable
    block: bool = False
    resume: bool = False


def loaded_beat_layout(config, jobs):
    """A read-data beat tagged by the loader: its ``job`` (index into the
    job list), ``row`` and ``beat`` in the row, ``index`` (``row * segments
    + beat``), the chunk ``slot`` and ``block_slot`` it belongs to, and
    ``valid`` (buffers always take it)."""
    return data.StructLayout({
        "valid": 1, "job": range(len(jobs)),
        "row": range(max(config.block_rows, config.k_chunk) + 1),
        "beat": range(max(config.segments, 4) + 1),
        "index": range(config.block_rows * config.segments + 1),
        "slot": 1, "block_slot": 1, "data": unsigned(config.mem_width)})


class Loader(wiring.Component):
    """Reads each chunk's rows from memory, job by job, and tags the beats.

    ``chunk`` takes descriptors (any layout the jobs read, with ``first``
    and ``last``). A chunk starts once a slot is free (every feeder has
    pulsed ``freed`` for the chunk two before it) and, if it has block jobs,
    once the writer has ``released`` the block two before its own. The
    issuer sends the read requests; the receiver tags the read data
    (:func:`loaded_beat_layout` on ``beat``, registered: the cycle after
    the read beat) and pulses ``loaded`` with a chunk's last tagged beat.
    Slots alternate 0, 1, 0, ... per chunk and per block.

    Parameters
    ----------
    config : GemmConfig
    layout : data.StructLayout
        The descriptor's layout.
    jobs : list of Job
    feeders : int
        Feeders that read the operand buffers (each pulses its own bit of
        ``freed``).
    """

    def __init__(self, config, layout, jobs, *, feeders=1):
        self.config = config
        self.jobs = list(jobs)
        self.feeders = feeders
        super().__init__({
            "chunk": In(stream.Signature(layout)),
            "rd_req": Out(stream.Signature(read_request_layout(config))),
            "rd_data": In(stream.Signature(unsigned(config.mem_width))),
            "beat": Out(loaded_beat_layout(config, jobs)),
            "loaded": Out(1),
            "freed": In(feeders),
            "released": In(1),
        })

    def _first_job(self, enabled):
        first = Const(len(self.jobs) - 1, range(len(self.jobs)))
        for number in range(len(self.jobs) - 2, -1, -1):
            first = Mux(enabled[number], number, first)
        return first

    def _next_job(self, job, enabled):
        """(there is a job after ``job``, its index)."""
        count = len(self.jobs)
        has = [Const(0) for _ in range(count)]
        nxt = [Const(0, range(count)) for _ in range(count)]
        for number in range(count):
            for later in range(count - 1, number, -1):
                has[number] = has[number] | enabled[later]
                nxt[number] = Mux(enabled[later], later, nxt[number])
        return _select(job, has), _select(job, nxt)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        jobs = self.jobs
        rows_max = max(cfg.block_rows, cfg.k_chunk)

        # -- issuer: read requests, job after job --------------------------------
        d = self.chunk.payload
        enabled = [job.when(d) for job in jobs]
        # What the receiver needs of a chunk, worked out by the issuer.
        rows_shape = range(rows_max + 1)
        beats_shape = range(max(cfg.segments, 4) + 1)
        handoff = m.submodules.handoff = Queue(shape=data.StructLayout({
            "enabled": len(jobs), "first": range(len(jobs)), "last": 1,
            "rows_less": data.ArrayLayout(rows_shape, len(jobs)),
            "beats_less": data.ArrayLayout(beats_shape, len(jobs))}), depth=cfg.stage_queue)
        busy = Signal()
        job = Signal(range(len(jobs)))
        row = Signal(range(rows_max + 1))
        addr = Signal(cfg.addr_width)
        resume_at = {n: Signal(cfg.addr_width, name=f"{j.name}_next")
                     for n, j in enumerate(jobs) if j.resume}

        def base(number):
            j = jobs[number]
            if j.resume:
                return Mux(d.first, j.base(d), resume_at[number])
            return j.base(d)

        issued = Signal()         # a chunk's last request went out
        issued_block = Signal()
        in_use = [outstanding(m, f"chunks_in_use{f}", issued, self.freed[f])
                  for f in range(self.feeders)]
        blocks_in_use = outstanding(m, "blocks_in_use", issued_block, self.released)
        slot_free = Const(1)
        for count in in_use:
            slot_free = slot_free & (count <= 1)
        needs_block = Const(0)
        for number, j in enumerate(jobs):
            if j.block:
                needs_block = needs_block | enabled[number]
        start = (~busy & self.chunk.valid & slot_free & handoff.i.ready
                 & (~needs_block | (blocks_in_use <= 1)))
        first = self._first_job(enabled)
        has_next, following = self._next_job(job, enabled)

        def rows_of(number):
            return _select(number, [j.rows(d) for j in jobs])

        last_row = Signal()       # ``row`` is the job's last, in a register
        req = self.rd_req
        m.d.comb += [
            handoff.i.payload.enabled.eq(Cat(*enabled)), handoff.i.payload.first.eq(first),
            handoff.i.payload.last.eq(d.last), handoff.i.valid.eq(start),
            *[handoff.i.payload.rows_less[n].eq(j.rows(d) - 1) for n, j in enumerate(jobs)],
            *[handoff.i.payload.beats_less[n].eq(j.beats(d) - 1) for n, j in enumerate(jobs)],
            req.payload.addr.eq(addr),
            req.payload.beats.eq(_select(job, [j.beats(d) for j in jobs])),
            req.valid.eq(busy),
        ]
        with m.If(start):
            m.d.sync += [busy.eq(1), row.eq(0), job.eq(first), last_row.eq(rows_of(first) == 1),
                         addr.eq(_select(first, [base(n) for n in range(len(jobs))]))]
        with m.If(busy & req.ready):
            stride = _select(job, [j.stride(d) for j in jobs])
            m.d.sync += [row.eq(row + 1), addr.eq(addr + stride),
                         last_row.eq(row + 2 == rows_of(job))]
            with m.If(last_row):
                m.d.sync += [row.eq(0), last_row.eq(rows_of(following) == 1)]
                for number in resume_at:
                    with m.If(job == number):
                        m.d.sync += resume_at[number].eq(addr + stride)
                with m.If(has_next):
                    m.d.sync += [job.eq(following),
                                 addr.eq(_select(following, [base(n) for n in range(len(jobs))]))]
                with m.Else():
                    m.d.sync += busy.eq(0)
                    m.d.comb += [self.chunk.ready.eq(1), issued.eq(1), issued_block.eq(d.last)]

        # -- receiver: read data, tagged -------------------------------------
        r = handoff.o.payload
        r_enabled = [r.enabled[n] for n in range(len(jobs))]
        started = Signal()
        r_job = Signal(range(len(jobs)))
        r_row = Signal(range(rows_max + 1))
        r_beat = Signal(range(max(cfg.segments, 4) + 1))
        r_index = Signal(range(cfg.block_rows * cfg.segments + 1))
        slot = Signal()
        block_slot = Signal()
        job_now = Mux(started, r_job, r.first)
        row_now = Mux(started, r_row, 0)
        beat_now = Mux(started, r_beat, 0)
        index_now = Mux(started, r_index, 0)
        rows_less = r.rows_less[job_now]
        beats_less = r.beats_less[job_now]
        r_has_next, r_following = self._next_job(job_now, r_enabled)
        rd = self.rd_data
        take = rd.valid & handoff.o.valid
        # The tagged beat and ``loaded`` leave through registers.
        m.d.comb += rd.ready.eq(handoff.o.valid)
        m.d.sync += [
            self.beat.valid.eq(take), self.beat.job.eq(job_now), self.beat.row.eq(row_now),
            self.beat.beat.eq(beat_now), self.beat.index.eq(index_now),
            self.beat.slot.eq(slot), self.beat.block_slot.eq(block_slot),
            self.beat.data.eq(rd.payload), self.loaded.eq(0),
        ]
        with m.If(take):
            m.d.sync += [started.eq(1), r_job.eq(job_now), r_row.eq(row_now),
                         r_beat.eq(beat_now + 1), r_index.eq(index_now + 1)]
            with m.If(beat_now == beats_less):
                m.d.sync += [r_beat.eq(0), r_row.eq(row_now + 1),
                             r_index.eq(index_now + cfg.segments - beats_less)]
                with m.If(row_now == rows_less):
                    m.d.sync += [r_row.eq(0), r_index.eq(0)]
                    with m.If(r_has_next):
                        m.d.sync += r_job.eq(r_following)
                    with m.Else():
                        m.d.sync += [started.eq(0), slot.eq(~slot)]
                        m.d.comb += handoff.o.ready.eq(1)
                        m.d.sync += self.loaded.eq(1)
                        with m.If(r.last):
                            m.d.sync += block_slot.eq(~block_slot)
        return m


def accumulator_fields(config):
    """The descriptor fields the :class:`Accumulator` reads."""
    return ("first", "last", "accumulate", "kblocks", "tiles") + ("m_len",) * (config.dataflow == "ws")


class Accumulator(wiring.Component):
    """Adds the array's result rows into the accumulator buffer.

    Per chunk, ``tiles`` tiles of ``kblocks`` result streams each (rows
    ``0..rows-1`` in OS, ``0..m_len-1`` in WS, counted: ``c.payload.last``
    is not read) are added, saturating to
    ``acc_width``, into tile ``j``'s lanes of the block slot's rows; the
    first chunk of a block starts from 0, or from the old C rows (``old``,
    the loader's buffer) when it accumulates. Each buffer has one write
    port, so it maps to block RAM. With ``config.compact`` there is no old
    C buffer and no ``old`` port: the loader writes old C into the block's
    rows of the accumulator buffer itself (a second write port: for small
    FPGAs, whose block buffers are flip-flops), and the first chunk reads
    it there. A block
    starts only while at most one other is waiting for the writer; its last
    sum pulses ``committed``; ``released`` frees a slot.

    bf16 (``config.bf16``): the rows are binary32 sums, added with the
    PEs' rounded binary32 add (:meth:`~bertforge.rtl.arith.Bf16Arith.add`)
    instead of saturating; a block that does not accumulate starts from -0
    (so its first sum is the array's as it is). The add is combinational in
    stage 2, as the integer add is and as the PE's own add is (a path as
    long as the array's), so the bf16 accumulator keeps the integer one's
    latency: 2 cycles, no extra cycles.

    Parameters
    ----------
    config : GemmConfig
    c_signature : stream.Signature
        The array's result stream (``data`` of ``cols`` sums, ``last``).
    """

    def __init__(self, config, layout, c_signature):
        self.config = config
        P, Mt, aw = config.panel, config.block_rows, config.acc_width
        super().__init__({
            "chunk": In(stream.Signature(layout)),
            "c": In(c_signature),
            "rd": In(ReadPort.Signature(addr_width=(2 * Mt - 1).bit_length(), shape=unsigned(P * aw))),
            **({} if config.compact else {"old": In(ReadPort.Signature(
                addr_width=(2 * Mt - 1).bit_length(), shape=unsigned(P * aw)))}),
            "wr": In(WritePort.Signature(addr_width=(2 * Mt - 1).bit_length(),
                                         shape=unsigned(P * aw), granularity=aw)),
            "committed": Out(1),
            "released": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        C, Mt, P, aw = cfg.cols, cfg.block_rows, cfg.panel, cfg.acc_width
        d = self.chunk.payload
        row = Signal(range(Mt + 1), name="acc_row")
        kb = Signal(range(cfg.max_kblocks + 1), name="acc_kb")
        j = Signal(range(cfg.group + 1), name="acc_j")
        slot = Signal()
        c = self.c
        block_done = Signal()
        waiting = outstanding(m, "blocks_waiting", block_done, self.released)
        ok = self.chunk.valid & (waiting <= 1)
        m.d.comb += c.ready.eq(ok)
        take = c.valid & ok
        addr = Signal(range(2 * Mt))
        m.d.comb += addr.eq(slot * Mt + row)
        if not cfg.compact:
            m.d.comb += [self.rd.addr.eq(addr), self.old.addr.eq(addr)]
        # Stage 1 (the cycle after the handshake): the buffer row arrives
        # (the old C row on a block's first chunk that accumulates).
        # The last row is counted, not read off ``c.payload.last``: the array's
        # output queue is block RAM on a large array, and its clock-to-data
        # (5.6 ns on an ECP5) left no time for the bookkeeping below.
        last_row = row == (d.m_len if cfg.dataflow == "ws" else Mt) - 1
        last_of_chunk = last_row & (kb == d.kblocks - 1) & (j == d.tiles - 1)
        s1 = stage(m, {"addr": addr, "j": j, "row": c.payload.data,
                       "init": d.first & ~d.accumulate & (kb == 0),
                       "old": d.first & d.accumulate & (kb == 0)}, "acc1",
                   flags={"valid": take, "end": take & last_of_chunk & d.last})
        if cfg.compact:     # a combinational read, in stage 1 (see StagedEngine)
            m.d.comb += self.rd.addr.eq(s1["addr"])
        with m.If(take):
            m.d.sync += row.eq(row + 1)
            with m.If(last_row):
                m.d.sync += [row.eq(0), kb.eq(kb + 1)]
                with m.If(kb == d.kblocks - 1):
                    m.d.sync += [kb.eq(0), j.eq(j + 1)]
                    with m.If(j == d.tiles - 1):
                        m.d.sync += j.eq(0)
                        m.d.comb += self.chunk.ready.eq(1)
                        with m.If(d.last):
                            m.d.sync += slot.eq(~slot)
                            m.d.comb += block_done.eq(1)
        # Stage 2: add and write. A row written now and read by stage 1 is
        # forwarded (a read issued as it is written sees it: transparent).
        # Whether to forward is compared a cycle ahead, between stage 1 and
        # the row entering it, and registered: it selects every lane's
        # bits, so it leaves a flip-flop rather than an address compare.
        s2 = stage(m, {"addr": s1["addr"], "j": s1["j"], "row": s1["row"]}, "acc2",
                   flags={"valid": s1["valid"], "end": s1["end"],
                          "forward": s1["valid"] & (s1["addr"] == addr) & (s1["j"] == j)})
        prior = Signal(C * aw, name="acc2_prior")
        sums = []
        for q in range(C):
            if cfg.bf16:
                sums.append(Bf16Arith.add(m, prior[q * aw:(q + 1) * aw], s2["row"][q]))
                continue
            total = Signal(signed(aw + 1), name=f"acc_sum{q}")
            m.d.comb += total.eq(prior[q * aw:(q + 1) * aw].as_signed() + s2["row"][q])
            sums.append(clamp(total, aw))
        row_read = self.rd.data if cfg.compact else Mux(s1["old"], self.old.data, self.rd.data)
        read = row_read.word_select(s1["j"], C * aw)
        start = Cat(*[Const(FP32_NEG_ZERO, 32)] * C) if cfg.bf16 else 0
        m.d.sync += prior.eq(Mux(s1["init"], start, Mux(s2["forward"], Cat(*sums), read)))
        m.d.comb += [self.wr.addr.eq(s2["addr"]), self.wr.data.eq(Cat(*(sums * cfg.group))),
                     self.committed.eq(s2["end"])]
        for p in range(P):
            m.d.comb += self.wr.en[p].eq(s2["valid"] & (s2["j"] == p // C))
        return m


class Requantizer(wiring.Component):
    """``lanes`` pipelined requantizers: ``y = clamp((x * mult + 2**(shift-1))
    >> shift)`` to int8, or to int16 with ``wide``
    (:func:`bertforge.rtl.fixed.requantize`; ``x`` signed 32-bit, ``mult``
    unsigned 32-bit, ``shift`` 0..63; ``wide`` for all lanes),
    :data:`LATENCY` cycles after the inputs.

    No combinational 32 x 32 multiply: the operands are registered, then
    the product is four registered 16 x 16 unsigned products (one DSP
    block each on iCE40 and ECP5: :data:`DSPS_PER_LANE`; ``cell="ecp5"``
    instantiates ``MULT18X18D`` blocks whose own input and output registers
    are those two stages), registered again in the fabric, summed in two
    registered steps; then the rounding add, the shift by whole bytes, the
    shift by the rest of ``shift``, and the saturation, each registered. A pure
    pipeline: it takes inputs every cycle and has no valid or ready (the
    caller delays its own flags by ``LATENCY``).

    ``compact=True`` (for small FPGAs): the same product, then no 67-bit
    rounding add (``(p + 2**(s-1)) >> s = (p >> s) + p[s-1]``) and no
    67-bit shifters: the shift by whole bytes keeps a 33-bit window and
    whether the rest is sign (beyond it, every output saturates), the
    shift by the rest adds the rounding bit; ``y`` is 32 bits, and with
    ``full`` (for all lanes) it is the 32-bit result unclamped (the caller
    passes int32 values with ``mult = 1``, ``shift = 0``). Same
    ``LATENCY``."""

    #: Cycles from the inputs to ``y``.
    LATENCY = 9
    #: 16 x 16 multipliers per lane.
    DSPS_PER_LANE = 4

    def __init__(self, lanes, *, compact=False, cell="inferred"):
        self.lanes = check_int("lanes", lanes)
        self.compact = check_bool("compact", compact)
        self.cell = check_choice("cell", cell, MULTIPLIER_CELLS)
        full = {"full": In(1)} if compact else {}
        super().__init__({
            "x": In(signed(32)).array(lanes),
            "mult": In(32).array(lanes),
            "shift": In(6).array(lanes),
            "wide": In(1),
            **full,
            "y": Out(signed(32 if compact else 16)).array(lanes),
        })

    def elaborate(self, platform):
        m = Module()
        # The saturation stage's flags (the compact one saturates a stage earlier).
        wide = delay(m, self.wide, self.LATENCY - 1 - self.compact, "q_wide")
        if self.compact:
            full = delay(m, self.full, self.LATENCY - 2, "q_full")
        for lane in range(self.lanes):
            ports = (self.x[lane], self.mult[lane], self.shift[lane])
            if self.compact:
                self._compact_lane(m, *ports, wide, full, self.y[lane], f"q{lane}")
            else:
                self._lane(m, *ports, wide, self.y[lane], f"q{lane}")
        return m

    def _product(self, m, x, mult, shift, name):
        """Stages 1-5: the signed 66-bit ``x * mult`` and ``shift``, registered."""
        reg = _lane_register(name)
        # x * mult = xu * mult - 2**32 * mult (x < 0), xu = x as unsigned.
        xu = x.as_unsigned()
        halves = {"ll": (xu[:16], mult[:16]), "lh": (xu[:16], mult[16:]),
                  "hl": (xu[16:], mult[:16]), "hh": (xu[16:], mult[16:])}
        p = {}
        for key, (a, b) in halves.items():
            if self.cell == "ecp5":     # the block's input and output registers
                p[key] = Signal(32, name=f"{name}_p{key}")
                mult18x18d(m, a, b, p[key], f"{name}_{key}")
                continue
            a_reg, b_reg = reg(16, f"{key}_a"), reg(16, f"{key}_b")
            p[key] = reg(32, f"p{key}")
            m.d.sync += [a_reg.eq(a), b_reg.eq(b), p[key].eq(a_reg * b_reg)]
        # Each product is registered once more in the fabric: the route out
        # of a multiplier placed far away (every DSP block in use at 16 x 16)
        # ends at a flip-flop, not in the adders below.
        p = {key: delay(m, product, 1, f"{name}_p{key}_d") for key, product in p.items()}
        neg = delay(m, Mux(x[31], mult, 0), 3, f"{name}_neg")
        s1 = delay(m, shift, 3, f"{name}_s1")
        low = reg(50, "low")            # the products below bit 32
        high = reg(signed(34), "high")  # and from bit 32 up
        s2 = reg(6, "s2")
        m.d.sync += [low.eq(p["ll"] + ((p["lh"] + p["hl"]) << 16)),
                     high.eq(p["hh"] - neg), s2.eq(s1)]
        product = reg(signed(66), "product")
        s3 = reg(6, "s3")
        m.d.sync += [product.eq(low + (high << 32)), s3.eq(s2)]
        return product, s3

    def _lane(self, m, x, mult, shift, wide, y, name):
        reg = _lane_register(name)
        product, s3 = self._product(m, x, mult, shift, name)
        half = Signal(64, name=f"{name}_half")       # 2**(shift-1), 0 for shift 0
        m.d.comb += half.eq((Const(1, 64) << s3)[1:65])
        rounded = reg(signed(67), "rounded")
        s4 = reg(6, "s4")
        m.d.sync += [rounded.eq(product + half), s4.eq(s3)]
        coarse = reg(signed(67), "coarse")    # shifted by the multiple of 8
        s5 = reg(3, "s5")
        m.d.sync += [coarse.eq(rounded >> Cat(Const(0, 3), s4[3:])), s5.eq(s4[:3])]
        fine = reg(signed(67), "fine")        # shifted by the rest
        m.d.sync += fine.eq(coarse >> s5)
        m.d.sync += y.eq(Mux(wide, clamp(fine, 16), clamp(fine, 8)))

    def _compact_lane(self, m, x, mult, shift, wide, full, y, name):
        reg = _lane_register(name)
        product, s3 = self._product(m, x, mult, shift, name)
        # Stage 6: p >> (8 * bytes) in a 33-bit window, whether it fits
        # there (the bits above are all sign), and the rounding bit p[s-1].
        window = reg(signed(33), "window")
        fits, sign, round_bit = reg(1, "fits"), reg(1, "sign"), reg(1, "round")
        s4 = reg(3, "s4")
        fits_at = Cat(*[(product[8 * k + 32:].all() | ~product[8 * k + 32:].any())
                        if 8 * k + 32 < len(product) else Const(1) for k in range(8)])
        m.d.sync += [window.eq((product >> Cat(Const(0, 3), s3[3:]))[:33]),
                     fits.eq(fits_at.bit_select(s3[3:], 1)), sign.eq(product[-1]),
                     round_bit.eq(Cat(Const(0, 1), product).bit_select(s3, 1)), s4.eq(s3[:3])]
        # Stage 7: shifted by the rest, rounded; a value past the window
        # becomes the 34-bit bound of its sign (which saturates either width).
        fine = reg(signed(34), "fine")
        m.d.sync += fine.eq(Mux(fits, (window >> s4) + round_bit,
                                Mux(sign, -(1 << 33), (1 << 33) - 1)))
        # Stage 8: saturated.
        clamped = reg(signed(32), "clamped")
        m.d.sync += clamped.eq(Mux(full, fine[:32].as_signed(),
                                   Mux(wide, clamp(fine, 16), clamp(fine, 8))))
        # Stage 9: the output register.
        m.d.sync += y.eq(clamped)


def _lane_register(name):
    """``reg(shape, what)``: a pipeline register ``{name}_{what}`` of a requantizer lane."""
    return lambda shape, what: register(shape, f"{name}_{what}")


def writer_fields():
    """The descriptor fields the :class:`Writer` reads."""
    return ("error", "end", "c_base", "c_stride", "m_len", "n_len", "int8", "int16",
            "multiplier", "shift", "tag", "bias", "per_channel")


class Writer(wiring.Component):
    """Writes a block's rows: ``acc + bias`` (saturating to int32) as int32,
    or requantized to int8 or int16 with the command's (multiplier, shift)
    or one per column.

    Takes one descriptor per block (its last chunk) or per bad command
    (``error``: no write, an error completion). Once the accumulator has
    ``committed`` the block, each row is read in *pieces* of ``Q =
    mem_width / 32`` columns, one per cycle: ``ceil(n_len / Q)`` per row in
    every mode. An int32 piece is one write beat; int8 and int16 pieces go
    through the :class:`Requantizer` (``Q`` lanes) and are gathered: an
    int8 row leaves as one beat (``panel <= mem_bytes``), an int16 row as a
    beat per two pieces (and its last piece).
    After the block's last read it pulses ``released``. ``done`` gets one
    completion per command, after its last write beat was taken.

    Per-channel scale words hold the multiplier in bits 0-25 and the shift
    in bits 26-31 (:data:`~bertforge.rtl.tile_scheduler.CHANNEL_MULT_BITS`).

    bf16 (``config.bf16``): ``acc + bias`` is the rounded binary32 add
    (:meth:`~bertforge.rtl.arith.Bf16Arith.add`; without a bias the add
    of -0, which changes nothing), written as float32, or with the
    descriptor's ``int16`` (the command's ``bf16_out``) rounded to bf16
    (:meth:`~bertforge.rtl.arith.Bf16Arith.round_to_bf16`) and gathered as
    int16 rows are. There is no requantizer; the pipeline keeps its length,
    so a bf16 block takes the integer writer's cycles.

    Parameters
    ----------
    config : GemmConfig
    layout : data.StructLayout
        Descriptor layout (:func:`writer_fields`).
    completion : data.StructLayout
        ``done``'s layout (``tag``, ``error``).
    """

    def __init__(self, config, layout, completion):
        self.config = config
        P, Mt, aw = config.panel, config.block_rows, config.acc_width
        slots = (2 * Mt - 1).bit_length()
        depth, width = vector_buffer(config)
        super().__init__({
            "chunk": In(stream.Signature(layout)),
            "acc_rd": In(ReadPort.Signature(addr_width=slots, shape=unsigned(P * aw))),
            "bias_rd": read_port(depth, unsigned(width)),
            "scale_rd": read_port(depth, unsigned(width)),
            "committed": In(1),
            "released": Out(1),
            "wr_req": Out(stream.Signature(write_request_layout(config))),
            "done": Out(stream.Signature(completion)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        aw, MB, Mt, P = cfg.acc_width, cfg.mem_bytes, cfg.block_rows, cfg.panel
        Q = MB // 4
        mb_bits = MB.bit_length() - 1
        pieces_max = -(-P // Q)
        d = self.chunk.payload
        entry_layout = data.StructLayout({
            "addr": unsigned(cfg.addr_width), "data": unsigned(cfg.mem_width),
            "bytes": range(MB + 1), "cmd_end": 1, "error": 1, "tag": unsigned(8)})
        latency = 2 + Requantizer.LATENCY      # read, add bias, requantize
        depth = latency + 6     # a beat a cycle: the pipeline, plus 2 in the queue
        out = m.submodules.write_beats = Queue(
            shape=unsigned(cfg.mem_width) if cfg.compact else entry_layout, depth=depth)
        head_fields = ("addr", "bytes", "cmd_end", "error", "tag")
        if cfg.compact:
            # The write beats' address, size and flags wait in a queue of
            # their own from stage 1 on (block RAM), not in a register per
            # pipeline stage; ``write_beats`` holds only the data.
            entries = m.submodules.write_entries = Queue(shape=project(entry_layout, head_fields),
                                                         depth=depth)

        # -- issue: one piece per cycle ---------------------------------------
        row = Signal(range(Mt + 1))
        piece = Signal(range(max(pieces_max, 4) + 1))
        row_addr = Signal(cfg.addr_width)
        started = Signal()
        slot = Signal()
        block_read = Signal()
        ready_blocks = outstanding(m, "blocks_ready", self.committed, block_read)
        inflight = Signal(range(latency + 2))
        total = d.n_len << 2                          # int32 bytes per row
        pieces = (total + MB - 1) >> mb_bits          # = ceil(n_len / Q)
        # Room for one more piece, registered (no path from the queue's
        # output to the stages that take the writer's tokens).
        room = Signal()
        go = self.chunk.valid & room & (d.error | (ready_blocks != 0))
        m.d.sync += room.eq(out.level + inflight + go < depth - 1)
        base = Mux(started, row_addr, d.c_base)
        # The last piece of a row, the last row of the block: registers once
        # a block has started (no descriptor arithmetic before the tokens).
        one_piece = d.n_len <= Q
        r_last_piece, r_last_row = Signal(), Signal()
        last_piece = Mux(started, r_last_piece, one_piece)
        last_row = Mux(started, r_last_row, d.m_len == 1)
        with m.If(go):
            m.d.sync += [r_last_piece.eq(Mux(last_piece, one_piece, piece + 2 == pieces)),
                         r_last_row.eq(Mux(last_piece, row + 2 == d.m_len, last_row))]
        # The bias and scales: the block's word, or (compact) the piece's.
        vector_addr = slot * pieces_max + piece if cfg.compact else slot
        acc_addr = slot * Mt + row
        if cfg.compact:     # a combinational read, in stage 1 (see StagedEngine)
            acc_addr = delay(m, acc_addr, 1, "wr_acc_addr")
        m.d.comb += [self.acc_rd.addr.eq(acc_addr), self.bias_rd.addr.eq(vector_addr),
                     self.scale_rd.addr.eq(vector_addr)]
        with m.If(go):
            m.d.sync += [started.eq(1), row_addr.eq(base), piece.eq(piece + 1)]
            with m.If(d.error):
                m.d.sync += [piece.eq(0), started.eq(0)]
                m.d.comb += self.chunk.ready.eq(1)
            with m.Elif(last_piece):
                m.d.sync += [piece.eq(0), row.eq(row + 1), row_addr.eq(base + d.c_stride)]
                with m.If(last_row):
                    m.d.sync += [row.eq(0), started.eq(0), slot.eq(~slot)]
                    m.d.comb += [self.chunk.ready.eq(1), block_read.eq(1), self.released.eq(1)]

        # Everything known at issue, registered (stage 1, with the buffer
        # reads); ``side`` then travels along the pipeline unchanged.
        side = Signal(data.StructLayout({"entry": entry_layout, "int8": 1, "int16": 1, "emit": 1,
                                         "at": range(max(pieces_max, 4) + 1), "valid": 1}))
        at = side.at
        bias_on, per_channel = Signal(), Signal()
        mult, shift = Signal(32), Signal(6)
        m.d.sync += side.valid.eq(go)
        # The write beat's offset in the row: a beat per piece (int32), per
        # two pieces (int16), per row (int8).
        offset = Mux(d.int16, (piece >> 1) << mb_bits, piece << mb_bits)
        with m.If(go):
            m.d.sync += [
                side.entry.addr.eq(Mux(d.int8, base, base + offset)),
                side.entry.bytes.eq(Mux(d.int8, d.n_len,
                                        Mux(last_piece, Mux(d.int16, d.n_len << 1, total) - offset,
                                            MB))),
                side.entry.cmd_end.eq(d.error | (d.end & last_piece & last_row)),
                side.entry.error.eq(d.error), side.entry.tag.eq(d.tag),
                side.int8.eq(d.int8), side.int16.eq(d.int16),
                side.emit.eq(d.error | last_piece | ~(d.int8 | d.int16) | (d.int16 & piece[0])),
                at.eq(piece),
                bias_on.eq(d.bias), per_channel.eq(d.per_channel),
                mult.eq(d.multiplier), shift.eq(d.shift),
            ]

        if cfg.compact:     # in the same order as their data, which follows
            m.d.comb += [*[getattr(entries.i.payload, name).eq(getattr(side.entry, name))
                           for name in head_fields],
                         entries.i.valid.eq(side.valid & side.emit)]

        def lanes(word, width, count=None):
            """The piece's ``Q`` lanes of ``word``: those at ``at`` of a
            word of ``count`` lanes, or (``count`` None) all of it, the
            piece's own word."""
            chosen = word
            if count is not None:
                padded = Cat(word, Const(0, width * (pieces_max * Q - count)))
                chosen = padded.word_select(at, width * Q)
            return [chosen[width * q:width * (q + 1)] for q in range(Q)]

        # Stage 2: the piece's lanes, registered.
        acc = [Signal(signed(aw), name=f"wr_acc{q}", reset_less=True) for q in range(Q)]
        bias = [Signal(signed(32), name=f"wr_bias{q}", reset_less=True) for q in range(Q)]
        words = [Signal(32, name=f"wr_scale{q}", reset_less=True) for q in range(Q)]
        no_bias = Const(FP32_NEG_ZERO, 32) if cfg.bf16 else 0
        vector_lanes = None if cfg.compact else P      # compact: a piece's own word
        for q, (a, b, s) in enumerate(zip(lanes(self.acc_rd.data, aw, P),
                                          lanes(self.bias_rd.data, 32, vector_lanes),
                                          lanes(self.scale_rd.data, 32, vector_lanes))):
            m.d.sync += [acc[q].eq(a.as_signed()),
                         bias[q].eq(Mux(bias_on, b.as_signed(), no_bias)), words[q].eq(s)]
        pc2 = delay(m, per_channel, 1, "wr_pc")
        mult2, shift2 = delay(m, mult, 1, "wr_mult"), delay(m, shift, 1, "wr_shift")

        # Stage 3: acc + bias (int32; bf16: binary32) and the piece's
        # scales, registered.
        values = [Signal(signed(32), name=f"wr_value{q}", reset_less=True) for q in range(Q)]
        if cfg.bf16:
            m.d.sync += [value.eq(Bf16Arith.add(m, acc[q], bias[q])) for q, value in enumerate(values)]
        else:
            requant = m.submodules.requantizer = Requantizer(Q, compact=cfg.compact,
                                                             cell=cfg.multiplier_cell)
            if cfg.compact:     # int32 values pass through it: multiplier 1, shift 0
                narrow2 = delay(m, side.int8 | side.int16, 1, "wr_narrow")
            for q, value in enumerate(values):
                lane_mult = Mux(pc2, words[q][:CHANNEL_MULT_BITS], mult2)
                lane_shift = Mux(pc2, words[q][CHANNEL_MULT_BITS:], shift2)
                if cfg.compact:
                    lane_mult, lane_shift = Mux(narrow2, lane_mult, 1), Mux(narrow2, lane_shift, 0)
                m.d.sync += [
                    value.eq(clamp(acc[q] + bias[q], 32)),
                    requant.mult[q].eq(lane_mult),
                    requant.shift[q].eq(lane_shift),
                ]
                m.d.comb += requant.x[q].eq(value)
            m.d.comb += requant.wide.eq(delay(m, side.int16, 2, "wr_wide"))
            if cfg.compact:
                m.d.comb += requant.full.eq(~delay(m, narrow2, 1, "wr_narrow3"))

        # Requantized (bf16: rounded): the pieces' int8 or int16 values
        # gather into a beat (int8: piece ``at`` at byte ``Q * at``; int16:
        # at ``2Q * (at % 2)``).
        if cfg.compact:     # only what the gathering needs travels along
            kept = ("int8", "int16", "emit", "at", "valid")
            track = Signal(project(side.shape(), kept))
            m.d.comb += [getattr(track, name).eq(getattr(side, name)) for name in kept]
            final = delay(m, track, 2 + Requantizer.LATENCY, "wr_side", reset_less=False)
        else:
            final = delay(m, side, 2 + Requantizer.LATENCY, "wr_side", reset_less=False)
        if cfg.compact and not cfg.bf16:      # int32 through the requantizer
            plain = Cat(*requant.y)
        else:
            plain = delay(m, Cat(*values), Requantizer.LATENCY, "wr_int32")
        if cfg.bf16:
            narrow = {1: Const(0, 8 * Q),
                      2: Cat(*[Bf16Arith.round_to_bf16(plain[32 * q:32 * (q + 1)])
                               for q in range(Q)])}
        else:
            narrow = {1: Cat(*[y[:8] for y in requant.y]),
                      2: Cat(*[y[:16] for y in requant.y]) if cfg.compact else Cat(*requant.y)}
        gathered = Signal(8 * min(MB, 2 * Q * pieces_max))
        merged = Signal.like(gathered)
        for byte in range(len(gathered) // 8):
            old = gathered[8 * byte:8 * (byte + 1)]
            new = {size: narrow[size].word_select(byte % (size * Q), 8) for size in (1, 2)}
            as8 = Mux(final.at == byte // Q, new[1], old) if byte < Q * pieces_max else old
            as16 = Mux(final.at[0] == byte // (2 * Q), new[2], old)
            m.d.comb += merged[8 * byte:8 * (byte + 1)].eq(Mux(final.int16, as16, as8))
        with m.If(final.valid):
            m.d.sync += gathered.eq(merged)
        beat_data = Mux(final.int8 | final.int16, merged, plain)
        if cfg.compact:
            m.d.comb += [out.i.payload.eq(beat_data), out.i.valid.eq(final.valid & final.emit)]
        else:
            entry = Signal(entry_layout)
            m.d.comb += [
                entry.eq(final.entry),
                entry.data.eq(beat_data),
                out.i.payload.eq(entry), out.i.valid.eq(final.valid & final.emit),
            ]
        m.d.sync += inflight.eq(inflight + go - final.valid)

        # -- output: write beats; a completion after a command's last beat ----
        if cfg.compact:
            head, head_data = entries.o.payload, out.o.payload
            beat_valid = out.o.valid & entries.o.valid
        else:
            head = out.o.payload
            head_data, beat_valid = head.data, out.o.valid
        done = m.submodules.done_queue = Queue(shape=self.done.payload.shape(),
                                               depth=cfg.stage_queue)
        hold = head.cmd_end & ~done.i.ready
        wr = self.wr_req
        m.d.comb += [
            wr.payload.addr.eq(head.addr), wr.payload.data.eq(head_data),
            wr.payload.bytes.eq(head.bytes),
            wr.valid.eq(beat_valid & ~head.error & ~hold),
            done.i.payload.tag.eq(head.tag), done.i.payload.error.eq(head.error),
        ]
        consumed = beat_valid & ~hold & (head.error | wr.ready)
        m.d.comb += [out.o.ready.eq(consumed), done.i.valid.eq(consumed & head.cmd_end)]
        if cfg.compact:
            m.d.comb += entries.o.ready.eq(consumed)
        wiring.connect(m, done.o, wiring.flipped(self.done))
        return m


class StagedEngine(wiring.Component):
    """A GEMM engine built from the stages: scheduler, :class:`Loader`,
    feeders, array, :class:`Accumulator`, :class:`Writer`.

    A subclass provides the parts that differ: ``command_layout`` (the
    ``cmd`` stream), :meth:`schedule` (commands -> a stream of chunk
    descriptors), ``jobs`` (the loader's), :meth:`operand_buffers` (its
    memories and how tagged beats fill them) and :meth:`feed` (its feeders,
    connected to the buffers, the loader's tokens and the array).

    Ports: ``cmd``, ``done`` (one completion per command, in order),
    ``rd_req`` / ``rd_data`` (memory reads: data in request order, each beat
    the next ``mem_width // 8`` bytes), ``wr_req`` (memory writes). Memory may
    take any time and may stall any stream.
    """

    def __init__(self, config, command_layout, completion_layout):
        self.config = config
        super().__init__(engine_members(config, command_layout, completion_layout))

    def block_jobs(self):
        """Old C (the first chunk of an accumulating block), bias, scales."""
        MB = self.config.mem_bytes
        mb_bits = MB.bit_length() - 1

        def words(d):
            return (d.n_len * 4 + MB - 1) >> mb_bits

        return [
            Job("c_old", when=lambda d: d.first & d.accumulate, base=lambda d: d.c_base,
                stride=lambda d: d.c_stride, rows=lambda d: d.m_len, beats=words, block=True),
            Job("bias", when=lambda d: d.first & d.bias, base=lambda d: d.bias_base,
                stride=lambda d: 0, rows=lambda d: 1, beats=words, block=True),
            Job("scale", when=lambda d: d.first & d.per_channel, base=lambda d: d.scale_base,
                stride=lambda d: 0, rows=lambda d: 1, beats=words, block=True),
        ]

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        Mt, P, aw = cfg.block_rows, cfg.panel, cfg.acc_width
        Q = cfg.mem_bytes // 4
        chunk = self.schedule(m)
        layout = chunk.payload.shape()
        array = m.submodules.array = self.array()
        jobs = self.block_jobs() + self.operand_jobs()
        feeders = self.feeder_fields()

        # Stage queues, filled by the fan-out of the descriptors.
        loader_fields = sorted({name for name in layout.members} - {"error", "end", "tag",
                                                                   "multiplier", "shift", "int8", "int16",
                                                                   "tiles", "kblocks"})
        loader = m.submodules.loader = Loader(cfg, project(layout, loader_fields), jobs,
                                              feeders=len(feeders))
        accumulator = m.submodules.accumulator = Accumulator(
            cfg, project(layout, accumulator_fields(cfg)), array.signature.members["c"].signature)
        writer = m.submodules.writer = Writer(cfg, project(layout, writer_fields()),
                                              self.done.payload.shape())
        heads = {}
        targets = []
        for name, fields, needed in (
                [("loader", loader_fields, ~chunk.payload.error)]
                + [(f"feed_{n}", f, ~chunk.payload.error) for n, f in feeders.items()]
                + [("accumulator", accumulator_fields(cfg), ~chunk.payload.error),
                   ("writer", writer_fields(), chunk.payload.last | chunk.payload.error)]):
            queue = m.submodules[f"{name}_queue"] = Queue(shape=project(layout, fields),
                                                          depth=cfg.stage_queue)
            targets.append((queue.i, needed))
            heads[name] = queue.o
        fan_out(m, chunk, targets)
        wiring.connect(m, heads["loader"], loader.chunk)
        wiring.connect(m, heads["accumulator"], accumulator.chunk)
        wiring.connect(m, heads["writer"], writer.chunk)

        # Memory.
        wiring.connect(m, wiring.flipped(self.rd_req), loader.rd_req)
        wiring.connect(m, wiring.flipped(self.rd_data), loader.rd_data)
        wiring.connect(m, writer.wr_req, wiring.flipped(self.wr_req))
        wiring.connect(m, writer.done, wiring.flipped(self.done))

        # Block buffers: accumulator, old C (compact: in the accumulator
        # buffer), bias, scales (two blocks each).
        beat = loader.beat
        acc_mem = m.submodules.acc_buf = Memory(shape=unsigned(P * aw), depth=2 * Mt, init=[])
        if not cfg.compact:
            old_mem = m.submodules.old_buf = Memory(shape=unsigned(P * aw), depth=2 * Mt, init=[])
        vector_depth, vector_width = vector_buffer(cfg)
        bias_mem = m.submodules.bias_buf = Memory(shape=unsigned(vector_width), depth=vector_depth,
                                                  init=[])
        scale_mem = m.submodules.scale_buf = Memory(shape=unsigned(vector_width),
                                                    depth=vector_depth, init=[])
        lanes32 = [beat.data[32 * q:32 * (q + 1)] for q in range(Q)]
        c_old = (acc_mem if cfg.compact else old_mem).write_port(granularity=aw)
        m.d.comb += [
            c_old.addr.eq(beat.block_slot * Mt + beat.row),
            c_old.data.eq(Cat(*[clamp(lanes32[p % Q].as_signed(), aw) for p in range(P)])),
        ]
        for number, mem in ((1, bias_mem), (2, scale_mem)):
            if cfg.compact:     # beat ``b`` of the row to address ``b`` of the slot
                port = mem.write_port()
                m.d.comb += [port.addr.eq(beat.block_slot * (vector_depth // 2) + beat.beat),
                             port.data.eq(beat.data),
                             port.en.eq(beat.valid & (beat.job == number))]
                continue
            port = mem.write_port(granularity=32)
            m.d.comb += [port.addr.eq(beat.block_slot),
                         port.data.eq(Cat(*[lanes32[p % Q] for p in range(P)]))]
            with m.If(beat.valid & (beat.job == number)):
                for p in range(P):
                    m.d.comb += port.en[p].eq(beat.beat == p // Q)
        with m.If(beat.valid & (beat.job == 0)):
            for p in range(P):
                m.d.comb += c_old.en[p].eq(beat.beat == p // Q)
        acc_wr = acc_mem.write_port(granularity=aw)
        if cfg.compact:
            # Flip-flops on a small FPGA: read combinationally, the readers
            # give the address a cycle later (as a read port's register
            # would) and register only the lanes they use. The accumulator
            # then sees a row written the cycle before, as the transparent
            # port does; nothing writes the writer's rows while it reads.
            for reader in (accumulator.rd, writer.acc_rd):
                port = acc_mem.read_port(domain="comb")
                m.d.comb += [port.addr.eq(reader.addr), reader.data.eq(port.data)]
        else:
            wiring.connect(m, accumulator.rd, acc_mem.read_port(transparent_for=(acc_wr,)))
        wiring.connect(m, accumulator.wr, acc_wr)
        if not cfg.compact:
            wiring.connect(m, accumulator.old, old_mem.read_port())
            wiring.connect(m, writer.acc_rd, acc_mem.read_port())
        wiring.connect(m, writer.bias_rd, bias_mem.read_port())
        wiring.connect(m, writer.scale_rd, scale_mem.read_port())

        # Operands: buffers, feeders, array.
        first_operand = len(self.block_jobs())
        buffers = self.operand_buffers(m, beat, first_operand)
        freed = self.feed(m, array, buffers, heads, loader.loaded)
        m.d.comb += loader.freed.eq(Cat(*freed))
        wiring.connect(m, array.c, accumulator.c)

        # Tokens between the accumulator, the writer and the loader
        # (``released`` through a register: it fans out to both).
        released = delay(m, writer.released, 1, "released", reset_less=False)
        m.d.comb += [writer.committed.eq(accumulator.committed),
                     accumulator.released.eq(released), loader.released.eq(released)]
        return m
