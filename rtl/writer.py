"""The engines' writer stage: adds the bias, requantizes and writes a
block's rows (see :mod:`bertforge.rtl.engine`)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out

from .arith import FP32_NEG_ZERO, Bf16Arith
from .engine import outstanding, project, read_port, vector_buffer, write_request_layout
from .requantizer import Requantizer
from .stream import Queue, clamp, delay
from .tile_scheduler import CHANNEL_MULT_BITS

__all__ = ["writer_fields", "Writer"]


def writer_fields(config=None):
    """The descriptor fields the :class:`Writer` reads (with
    ``config.transpose_c`` also ``transpose_c``)."""
    fields = ("error", "end", "c_base", "c_stride", "m_len", "n_len", "int8", "int16",
              "multiplier", "shift", "tag", "bias", "per_channel")
    return fields + ("transpose_c",) if config is not None and config.transpose_c else fields


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

    Transposed (``config.transpose_c`` and the descriptor's
    ``transpose_c``): the beats are formed as above, then each is written
    one element a cycle, ``c_stride`` bytes apart, continuing along the row
    (a column of C in memory): ``n_len`` write cycles per row.

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
    done_always_ready : bool
        The consumer of ``done`` never stalls it (holds ``ready`` at 1): no
        completion queue; ``done`` is valid in the cycle the command's last
        beat is taken. Otherwise the completion waits in a queue of
        ``config.stage_queue`` (2 cycles when empty), and a command's last
        beat waits while that queue is full.
    """

    def __init__(self, config, layout, completion, *, done_always_ready=False):
        self.config = config
        self.done_always_ready = done_always_ready
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

    #: Cycles from a piece's issue to its gathering: the buffer read, the
    #: bias add, the requantizer.
    LATENCY = 2 + Requantizer.LATENCY

    def _sizes(self):
        """``(Q, pieces_max)``: 32-bit lanes per piece (per memory beat), pieces per row at most."""
        Q = self.config.mem_bytes // 4
        return Q, -(-self.config.panel // Q)

    def _entry_layout(self):
        """A write beat: its address, size, data and flags (transposed
        stores: ``transpose``, ``row_start`` (the row's first beat; its
        ``addr`` is the row's first element, a later beat's continues), the
        element ``stride`` and ``osize``, log2 of the element's bytes)."""
        cfg = self.config
        transposed = {"transpose": 1, "row_start": 1, "stride": unsigned(cfg.addr_width),
                      "osize": unsigned(2)} if cfg.transpose_c else {}
        return data.StructLayout({
            "addr": unsigned(cfg.addr_width), "data": unsigned(cfg.mem_width),
            "bytes": range(cfg.mem_bytes + 1), "cmd_end": 1, "error": 1, "tag": unsigned(8),
            **transposed})

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        depth = self.LATENCY + 6     # a beat a cycle: the pipeline, plus 2 in the queue
        if cfg.compact:
            out, entries = self._compact_queues(m, depth)
        else:
            out = m.submodules.write_beats = Queue(shape=self._entry_layout(), depth=depth)
            entries = None
        go, side, inflight, per_piece = self._issue(m, out, depth)
        if cfg.compact:     # in the same order as their data, which follows
            m.d.comb += [*[getattr(entries.i.payload, name).eq(getattr(side.entry, name))
                           for name in self._head_fields()],
                         entries.i.valid.eq(side.valid & side.emit)]
        acc, bias, words, pc2, mult2, shift2 = self._piece_lanes(m, side, *per_piece)
        # Stage 3: acc + bias (int32; bf16: binary32) and the piece's
        # scales, registered; then requantized (bf16: rounded), and the
        # pieces' int8 or int16 values gathered into a beat.
        if cfg.bf16:
            final, plain, narrow = self._bf16_values(m, side, acc, bias)
        else:
            final, plain, narrow = self._requantized_values(m, side, acc, bias, words,
                                                            pc2, mult2, shift2)
        beat_data = self._gather(m, final, plain, narrow)
        if cfg.compact:
            m.d.comb += [out.i.payload.eq(beat_data), out.i.valid.eq(final.valid & final.emit)]
        else:
            entry = Signal(self._entry_layout())
            m.d.comb += [
                *[getattr(entry, name).eq(getattr(final.entry, name))
                  for name in self._head_fields()],
                entry.data.eq(beat_data),
                out.i.payload.eq(entry), out.i.valid.eq(final.valid & final.emit),
            ]
        m.d.sync += inflight.eq(inflight + go - final.valid)

        self._write(m, out, entries)
        return m

    #: The write beat's fields that the compact writer queues apart from its data.
    HEAD_FIELDS = ("addr", "bytes", "cmd_end", "error", "tag")
    #: ... and those of transposed stores.
    TRANSPOSE_FIELDS = ("transpose", "row_start", "stride", "osize")

    def _head_fields(self):
        return self.HEAD_FIELDS + (self.TRANSPOSE_FIELDS if self.config.transpose_c else ())

    def _compact_queues(self, m, depth):
        """The compact writer's two queues: ``write_beats`` holds only the
        data; the write beats' address, size and flags wait in a queue of
        their own from stage 1 on (block RAM), not in a register per
        pipeline stage."""
        out = m.submodules.write_beats = Queue(shape=unsigned(self.config.mem_width), depth=depth)
        entries = m.submodules.write_entries = Queue(
            shape=project(self._entry_layout(), self._head_fields()), depth=depth)
        return out, entries

    def _issue(self, m, out, depth):
        """Stages 0 and 1: one piece per cycle, the buffer reads, and
        everything known at issue registered in ``side``, which then travels
        along the pipeline unchanged. Returns ``(go, side, inflight,
        (bias_on, per_channel, mult, shift))``."""
        cfg = self.config
        MB, Mt = cfg.mem_bytes, cfg.block_rows
        Q, pieces_max = self._sizes()
        mb_bits = MB.bit_length() - 1
        d = self.chunk.payload
        row = Signal(range(Mt + 1))
        piece = Signal(range(max(pieces_max, 4) + 1))
        row_addr = Signal(cfg.addr_width)
        started = Signal()
        slot = Signal()
        block_read = Signal()
        ready_blocks = outstanding(m, "blocks_ready", self.committed, block_read)
        inflight = Signal(range(self.LATENCY + 2))
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
        next_row = base + d.c_stride
        if cfg.transpose_c:     # the next row is the next element of C's columns
            osize = Mux(d.int8, 0, Mux(d.int16, 1, 2))
            next_row = Mux(d.transpose_c, base + (Const(1, 3) << osize), next_row)
        with m.If(go):
            m.d.sync += [started.eq(1), row_addr.eq(base), piece.eq(piece + 1)]
            with m.If(d.error):
                m.d.sync += [piece.eq(0), started.eq(0)]
                m.d.comb += self.chunk.ready.eq(1)
            with m.Elif(last_piece):
                m.d.sync += [piece.eq(0), row.eq(row + 1), row_addr.eq(next_row)]
                with m.If(last_row):
                    m.d.sync += [row.eq(0), started.eq(0), slot.eq(~slot)]
                    m.d.comb += [self.chunk.ready.eq(1), block_read.eq(1), self.released.eq(1)]

        # Everything known at issue, registered (stage 1, with the buffer
        # reads); ``side`` then travels along the pipeline unchanged. Its
        # entry has no ``data``: the beat's data joins it at the end.
        head = project(self._entry_layout(), self._head_fields())
        side = Signal(data.StructLayout({"entry": head, "int8": 1, "int16": 1,
                                         "emit": 1, "at": range(max(pieces_max, 4) + 1),
                                         "valid": 1}))
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
            if cfg.transpose_c:     # a beat per row's start, the others continue it
                m.d.sync += [
                    side.entry.addr.eq(Mux(d.transpose_c | d.int8, base, base + offset)),
                    side.entry.transpose.eq(d.transpose_c & ~d.error),
                    side.entry.row_start.eq(d.int8 | (offset == 0)),
                    side.entry.stride.eq(d.c_stride), side.entry.osize.eq(osize),
                ]
        return go, side, inflight, (bias_on, per_channel, mult, shift)

    def _piece_lanes(self, m, side, bias_on, per_channel, mult, shift):
        """Stage 2: the piece's ``Q`` lanes of the accumulator row, the bias
        and the scale words, registered (a bias of 0, bf16: -0, without
        ``bias_on``), and the command's scale delayed along. Returns
        ``(acc, bias, words, per_channel, mult, shift)``."""
        cfg = self.config
        aw, P = cfg.acc_width, cfg.panel
        Q, pieces_max = self._sizes()
        at = side.at

        def lanes(word, width, count=None):
            """The piece's ``Q`` lanes of ``word``: those at ``at`` of a
            word of ``count`` lanes, or (``count`` None) all of it, the
            piece's own word."""
            chosen = word
            if count is not None:
                padded = Cat(word, Const(0, width * (pieces_max * Q - count)))
                chosen = padded.word_select(at, width * Q)
            return [chosen[width * q:width * (q + 1)] for q in range(Q)]

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
        return acc, bias, words, pc2, mult2, shift2

    def _final(self, m, side):
        """``side`` at the gathering (compact: only what the gathering needs
        travels along)."""
        if self.config.compact:
            kept = ("int8", "int16", "emit", "at", "valid")
            track = Signal(project(side.shape(), kept))
            m.d.comb += [getattr(track, name).eq(getattr(side, name)) for name in kept]
            return delay(m, track, self.LATENCY, "wr_side", reset_less=False)
        return delay(m, side, self.LATENCY, "wr_side", reset_less=False)

    def _bf16_values(self, m, side, acc, bias):
        """bf16: ``acc + bias`` the rounded binary32 add, and no
        requantizer (the pipeline keeps its length). Returns ``(final,
        plain, narrow)``: the float32 values, and rounded to bf16."""
        Q, _ = self._sizes()
        values = [Signal(signed(32), name=f"wr_value{q}", reset_less=True) for q in range(Q)]
        m.d.sync += [value.eq(Bf16Arith.add(m, acc[q], bias[q])) for q, value in enumerate(values)]
        final = self._final(m, side)
        plain = delay(m, Cat(*values), Requantizer.LATENCY, "wr_int32")
        narrow = {1: Const(0, 8 * Q),
                  2: Cat(*[Bf16Arith.round_to_bf16(plain[32 * q:32 * (q + 1)])
                           for q in range(Q)])}
        return final, plain, narrow

    def _requantized_values(self, m, side, acc, bias, words, pc2, mult2, shift2):
        """Integer: ``acc + bias`` saturated to int32, requantized with the
        command's or the column's scale (compact: int32 values pass through
        the requantizer too, multiplier 1, shift 0). Returns ``(final,
        plain, narrow)``: the int32 values, and the int8 and int16 ones."""
        cfg = self.config
        Q, _ = self._sizes()
        values = [Signal(signed(32), name=f"wr_value{q}", reset_less=True) for q in range(Q)]
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
        final = self._final(m, side)
        if cfg.compact:      # int32 through the requantizer
            plain = Cat(*requant.y)
        else:
            plain = delay(m, Cat(*values), Requantizer.LATENCY, "wr_int32")
        narrow = {1: Cat(*[y[:8] for y in requant.y]),
                  2: Cat(*[y[:16] for y in requant.y]) if cfg.compact else Cat(*requant.y)}
        return final, plain, narrow

    def _gather(self, m, final, plain, narrow):
        """The pieces' int8 or int16 values (``narrow[1]``, ``narrow[2]``)
        gather into a beat (int8: piece ``at`` at byte ``Q * at``; int16:
        at ``2Q * (at % 2)``). Returns the beat's data: gathered, or the
        piece's int32 values ``plain``."""
        Q, pieces_max = self._sizes()
        gathered = Signal(8 * min(self.config.mem_bytes, 2 * Q * pieces_max))
        merged = Signal.like(gathered)
        for byte in range(len(gathered) // 8):
            old = gathered[8 * byte:8 * (byte + 1)]
            new = {size: narrow[size].word_select(byte % (size * Q), 8) for size in (1, 2)}
            as8 = Mux(final.at == byte // Q, new[1], old) if byte < Q * pieces_max else old
            as16 = Mux(final.at[0] == byte // (2 * Q), new[2], old)
            m.d.comb += merged[8 * byte:8 * (byte + 1)].eq(Mux(final.int16, as16, as8))
        with m.If(final.valid):
            m.d.sync += gathered.eq(merged)
        return Mux(final.int8 | final.int16, merged, plain)

    def _write(self, m, out, entries=None):
        """Write beats from the ``out`` queue (compact: with their address,
        size and flags from ``entries``); a completion after a command's
        last beat."""
        if entries is not None:
            head, head_data = entries.o.payload, out.o.payload
            beat_valid = out.o.valid & entries.o.valid
        else:
            head = out.o.payload
            head_data, beat_valid = head.data, out.o.valid
        # ``unheld(x)``: ``x`` while no completion is held (built anew at
        # each use, so the queued writer's netlist is the one it always was).
        if self.done_always_ready:      # nothing holds a completion: no queue
            done = self.done

            def unheld(value):
                return value
        else:   # a command's last beat waits for room in the completion queue
            queue = m.submodules.done_queue = Queue(shape=self.done.payload.shape(),
                                                    depth=self.config.stage_queue)
            done, hold = queue.i, head.cmd_end & ~queue.i.ready

            def unheld(value):
                return value & ~hold
        wr = self.wr_req
        m.d.comb += [
            wr.payload.addr.eq(head.addr), wr.payload.data.eq(head_data),
            wr.payload.bytes.eq(head.bytes),
            wr.valid.eq(unheld(beat_valid & ~head.error)),
            done.payload.tag.eq(head.tag), done.payload.error.eq(head.error),
        ]
        written = wr.ready
        if self.config.transpose_c:     # the beat's last element written
            written = wr.ready & self._write_elements(m, head, head_data, unheld(beat_valid))
        consumed = unheld(beat_valid) & (head.error | written)
        m.d.comb += [out.o.ready.eq(consumed), done.valid.eq(consumed & head.cmd_end)]
        if entries is not None:
            m.d.comb += entries.o.ready.eq(consumed)
        if not self.done_always_ready:
            wiring.connect(m, queue.o, wiring.flipped(self.done))

    def _write_elements(self, m, head, head_data, going):
        """Transposed beats: one element a write, ``stride`` bytes apart
        (overriding the write request's address, data and size). Returns
        "this write is the beat's last"."""
        cfg = self.config
        wr = self.wr_req
        done = Signal(range(cfg.mem_bytes + 1), name="wr_elem_done")   # bytes of the beat written
        addr = Signal(cfg.addr_width, name="wr_elem_addr")             # the next element's
        rest = Signal(cfg.mem_width, name="wr_elem_rest")              # the beat from it on
        first = done == 0
        data_now = Mux(first, head_data, rest)
        addr_now = Mux(first & head.row_start, head.addr, addr)
        size = Mux(head.osize == 0, 1, Mux(head.osize == 1, 2, 4))
        last = done + size >= head.bytes
        with m.If(head.transpose):
            m.d.comb += [wr.payload.addr.eq(addr_now), wr.payload.data.eq(data_now),
                         wr.payload.bytes.eq(size)]
        with m.If(going & head.transpose & wr.ready):
            m.d.sync += [done.eq(Mux(last, 0, done + size)), addr.eq(addr_now + head.stride),
                         rest.eq(Mux(head.osize == 0, data_now >> 8,
                                     Mux(head.osize == 1, data_now >> 16, data_now >> 32)))]
        return ~head.transpose | last
