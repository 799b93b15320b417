"""The engines' loader stage: reads each chunk's rows from memory, job by
job, and tags the beats (see :mod:`bertforge.rtl.engine`)."""

from dataclasses import dataclass
from typing import Callable

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .engine import outstanding, read_request_layout
from .params import check_choice, check_int
from .stream import Queue

__all__ = ["Job", "loaded_beat_layout", "Loader", "Int4Unpack", "packed_read"]


def _select(index, values):
    """``values[index]`` for a run-time ``index``."""
    out = values[-1]
    for number in range(len(values) - 2, -1, -1):
        out = Mux(index == number, values[number], out)
    return out


def _constant(value):
    """``value``'s integer if it is a constant (fixed at elaboration), else None."""
    return value.value if isinstance(value, Const) else None


def _less(value):
    """``value - 1``, a constant when ``value`` is one."""
    fixed = _constant(value)
    return value - 1 if fixed is None else Const(fixed - 1)


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
    limits : tuple of int or None
        Per bit of ``freed``: a chunk starts only while at most this many
        chunks are in use (issued, not yet freed) by it; None: 1 each (the
        double buffers). A reader of a deeper buffer (the accumulator of an
        engine with ``weight_group``, whose code buffer holds four chunks)
        allows more.
    """

    def __init__(self, config, layout, jobs, *, feeders=1, limits=None):
        self.config = config
        self.jobs = list(jobs)
        self.feeders = feeders
        self.limits = tuple(limits) if limits is not None else (1,) * feeders
        super().__init__({
            "chunk": In(stream.Signature(layout)),
            "rd_req": Out(stream.Signature(read_request_layout(config))),
            "rd_data": In(stream.Signature(unsigned(config.mem_width))),
            "beat": Out(loaded_beat_layout(config, jobs)),
            "loaded": Out(1),
            "freed": In(feeders),
            "released": In(1),
        })

    @staticmethod
    def _first_job(enabled):
        """The first enabled job; only jobs up to the first that is always
        enabled can be it (``len(enabled)`` of them)."""
        first = Const(len(enabled) - 1, range(len(enabled)))
        for number in range(len(enabled) - 2, -1, -1):
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
        # Jobs after the first that is always enabled are never a chunk's first.
        firsts = next((n + 1 for n, e in enumerate(enabled) if _constant(e) == 1), len(jobs))
        # What the receiver needs of a chunk, worked out by the issuer: each
        # job's flag, rows - 1 and beats - 1, except those fixed at
        # elaboration (the receiver uses the constant).
        rows_shape = range(rows_max + 1)
        beats_shape = range(max(cfg.segments, 4) + 1)
        handed = {"first": range(firsts), "last": 1}
        fields = []               # (field name, value at the issuer, shape)
        for n, j in enumerate(jobs):
            for name, value, shape in ((f"enabled{n}", enabled[n], 1),
                                       (f"rows_less{n}", _less(j.rows(d)), rows_shape),
                                       (f"beats_less{n}", _less(j.beats(d)), beats_shape)):
                if _constant(value) is None:
                    handed[name] = shape
                    fields.append((name, value))
        handoff = m.submodules.handoff = Queue(shape=data.StructLayout(handed),
                                               depth=cfg.stage_queue)
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
        in_use = [outstanding(m, f"chunks_in_use{f}", issued, self.freed[f],
                              width=max(2, (self.limits[f] + 1).bit_length()))
                  for f in range(self.feeders)]
        blocks_in_use = outstanding(m, "blocks_in_use", issued_block, self.released, width=3)
        slot_free = Const(1)
        for count, limit in zip(in_use, self.limits):
            slot_free = slot_free & (count <= limit)
        needs_block = Const(0)
        for number, j in enumerate(jobs):
            if j.block:
                needs_block = needs_block | enabled[number]
        start = (~busy & self.chunk.valid & slot_free & handoff.i.ready
                 & (~needs_block | (blocks_in_use <= 1)))
        # Blocks that need no block buffer (no old C, bias or scales) go on
        # while the writer is held back (write stalls, a slow bus,
        # transposed stores), so more than three can be in use; a 2-bit
        # count wrapped there and let a later block's old C, bias or scales
        # overwrite a slot still in use. The count has 3 bits, and no block
        # ends while seven are in use, so it never wraps.
        start = start & ~(d.last & (blocks_in_use == 7))
        first = self._first_job(enabled[:firsts])
        has_next, following = self._next_job(job, enabled)

        def rows_of(number):
            return _select(number, [j.rows(d) for j in jobs])

        last_row = Signal()       # ``row`` is the job's last, in a register
        req = self.rd_req
        m.d.comb += [
            handoff.i.payload.first.eq(first), handoff.i.payload.last.eq(d.last),
            handoff.i.valid.eq(start),
            *[handoff.i.payload[name].eq(value) for name, value in fields],
            req.payload.addr.eq(addr),
            req.payload.beats.eq(_select(job, [j.beats(d) for j in jobs])),
            req.valid.eq(busy),
        ]
        with m.If(start):
            m.d.sync += [busy.eq(1), row.eq(0), job.eq(first),
                         last_row.eq(_select(first, [j.rows(d) for j in jobs[:firsts]]) == 1),
                         addr.eq(_select(first, [base(n) for n in range(firsts)]))]
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

        def received(name, value):
            return r[name] if _constant(value) is None else value

        r_enabled = [received(f"enabled{n}", enabled[n]) for n in range(len(jobs))]
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
        rows_less = _select(job_now, [received(f"rows_less{n}", _less(j.rows(d)))
                                      for n, j in enumerate(jobs)])
        beats_less = _select(job_now, [received(f"beats_less{n}", _less(j.beats(d)))
                                       for n, j in enumerate(jobs)])
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


class Int4Unpack(wiring.Component):
    """Unpacks one packed word of 4-bit weights into ``lanes`` operands of
    ``width`` bits (combinational).

    Byte ``j`` of ``i`` holds two signed 4-bit weights of operand lane
    ``j``: the even K row's in its low nibble, the odd one's in its high
    nibble (``pack_int4`` of :mod:`bertforge.sim.lowbit_golden`, applied
    along K). ``o`` is lane ``j``'s nibble of ``high`` (0: low, 1: high),
    sign-extended to ``width`` bits: the operand word of one K row, as a
    dense B buffer holds it. Bytes past ``lanes`` are unused.

    Parameters
    ----------
    lanes : int
        Operand lanes (at most ``mem_width // 8``).
    width : 8 or 16
        Operand width.
    mem_width : int
        Bits of the packed word.
    """

    def __init__(self, *, lanes, width, mem_width):
        check_int("mem_width", mem_width, minimum=8)
        check_choice("width", width, (8, 16))
        check_int("lanes", lanes, maximum=mem_width // 8)
        self.lanes, self.width, self.mem_width = lanes, width, mem_width
        super().__init__({"i": In(mem_width), "high": In(1), "o": Out(lanes * width)})

    def elaborate(self, platform):
        m = Module()
        lanes = []
        for j in range(self.lanes):
            nibble = Mux(self.high, self.i[8 * j + 4:8 * j + 8], self.i[8 * j:8 * j + 4])
            lanes.append(Cat(nibble, *[nibble[3]] * (self.width - 4)))     # sign-extended
        m.d.comb += self.o.eq(Cat(*lanes))
        return m


def packed_read(m, name, config, port, mem, packed=None):
    """Connects a feeder's read ``port`` of a dense B buffer (word ``k`` of
    a slot: K row ``k``) to ``mem``, a B buffer of packed 4-bit words (word
    ``k // 2`` of a slot: K rows ``k`` and ``k + 1``, slots of ``k_chunk
    // 2`` words), through an :class:`Int4Unpack`. Same read latency.

    ``packed`` (a signal, for an engine with ``weight_group``): the chunk
    being read is packed; ``mem`` has dense slots of ``k_chunk`` words (a
    power of two), a packed chunk's in the first half of its slot, and a
    chunk that is not packed is read as it is."""
    if packed is not None:
        return _mixed_read(m, name, config, port, mem, packed)
    rp = mem.read_port()
    unpack = m.submodules[f"{name}_unpack"] = Int4Unpack(
        lanes=config.lanes, width=config.width, mem_width=config.mem_width)
    high = Signal(name=f"{name}_high")     # the odd row: follows the read
    with m.If(port.en):
        m.d.sync += high.eq(port.addr[0])
    m.d.comb += [rp.addr.eq(port.addr >> 1), rp.en.eq(port.en),
                 unpack.i.eq(rp.data), unpack.high.eq(high), port.data.eq(unpack.o)]


def _mixed_read(m, name, config, port, mem, packed):
    """:func:`packed_read` of a B buffer holding packed or dense chunks."""
    rp = mem.read_port()
    unpack = m.submodules[f"{name}_unpack"] = Int4Unpack(
        lanes=config.lanes, width=config.width, mem_width=config.mem_width)
    kb = config.k_chunk.bit_length() - 1            # port.addr = slot * k_chunk + k
    high = Signal(name=f"{name}_high")
    was_packed = Signal(name=f"{name}_packed")
    with m.If(port.en):
        m.d.sync += [high.eq(port.addr[0]), was_packed.eq(packed)]
    m.d.comb += [rp.addr.eq(Mux(packed, Cat(port.addr[1:kb], Const(0, 1), port.addr[kb:]),
                                port.addr)),
                 rp.en.eq(port.en), unpack.i.eq(rp.data), unpack.high.eq(high),
                 port.data.eq(Mux(was_packed, unpack.o, rp.data))]
