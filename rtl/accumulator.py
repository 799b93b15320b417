"""The engines' accumulator stage: adds the array's result rows into the
accumulator buffer (see :mod:`bertforge.rtl.engine`)."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out

from .arith import FP32_NEG_ZERO, Bf16Arith
from .engine import outstanding
from .stream import clamp, stage

__all__ = ["GROUP_MULT_BITS", "GROUP_MULTS", "CODE_SLOTS", "accumulator_fields", "Accumulator"]

#: Bits of a 4-bit weight group's integer multiplier (a group's scale is
#: the column's scale times ``multiplier / 2**GROUP_MULT_BITS``).
GROUP_MULT_BITS = 8
#: The multipliers the 16 group codes stand for: ``round(2**GROUP_MULT_BITS
#: * 2**(-(15 - c) / 4))``, a quarter octave apart, 19 .. 256 (the format of
#: ``generators/docs/lowbit.md``; ``MULT_CODES`` of
#: :mod:`bertforge.sim.lowbit_golden`).
GROUP_MULTS = tuple(round((1 << GROUP_MULT_BITS) * 2.0 ** (-(15 - c) / 4)) for c in range(16))
#: Chunks of codes the code buffer of an engine with ``weight_group`` holds
#: (the loader runs ahead of the accumulator by up to this many).
CODE_SLOTS = 4


def accumulator_fields(config):
    """The descriptor fields the :class:`Accumulator` reads."""
    ws = config.dataflow == "ws"      # (an OS chunk is one k-block)
    return (("first", "last", "accumulate") + ("kblocks",) * ws + ("tiles",) + ("m_len",) * ws
            + ("w4",) * bool(getattr(config, "weight_group", 0)))


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

    Group multipliers (``config.weight_group``): a chunk with ``w4`` is one
    group of packed 4-bit weights, and each column's sums are multiplied by
    its group multiplier (:data:`GROUP_MULTS` of its 4-bit code) before
    they are added: exact, one multiplier per column lane, in stage 2 in
    front of the add. The codes are read from ``codes`` (the code buffer,
    :data:`CODE_SLOTS` chunks: chunk ``i``'s at ``i % CODE_SLOTS``, the
    panel's column ``p`` in bits ``4p .. 4p + 3``), and ``chunk_done``
    pulses as a chunk's last row is taken (the loader then may overwrite
    its codes). Other chunks' sums are added as they are.

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
            **({"codes": In(ReadPort.Signature(addr_width=(CODE_SLOTS - 1).bit_length(),
                                               shape=unsigned(4 * P))),
                "chunk_done": Out(1)} if getattr(config, "weight_group", 0) else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        C, Mt, P, aw = cfg.cols, cfg.block_rows, cfg.panel, cfg.acc_width
        d = self.chunk.payload
        ws = cfg.dataflow == "ws"
        row = Signal(range(Mt + 1), name="acc_row")
        if ws:      # a chunk's k-blocks; an OS chunk has one (its kblocks is 1)
            kb = Signal(range(cfg.max_kblocks + 1), name="acc_kb")
            first_kb, last_kb = kb == 0, kb == d.kblocks - 1
        else:
            first_kb = last_kb = Const(1)
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
        last_row = row == (d.m_len if ws else Mt) - 1
        last_of_chunk = last_row & last_kb & (j == d.tiles - 1)
        grouped = getattr(cfg, "weight_group", 0)
        if grouped:     # the chunk's codes, read as its rows are taken
            code_slot = Signal(range(CODE_SLOTS), name="acc_code_slot")
            m.d.comb += self.codes.addr.eq(code_slot)
            with m.If(self.chunk.ready):
                m.d.sync += code_slot.eq(code_slot + 1)
            m.d.comb += self.chunk_done.eq(self.chunk.ready)
        s1 = stage(m, {"addr": addr, "j": j, "row": c.payload.data,
                       "init": d.first & ~d.accumulate & first_kb,
                       "old": d.first & d.accumulate & first_kb,
                       **({"w4": d.w4} if grouped else {})}, "acc1",
                   flags={"valid": take, "end": take & last_of_chunk & d.last})
        if cfg.compact:     # a combinational read, in stage 1 (see StagedEngine)
            m.d.comb += self.rd.addr.eq(s1["addr"])

        def tile_done():       # a tile's last row (of its last k-block) taken
            m.d.sync += j.eq(j + 1)
            with m.If(j == d.tiles - 1):
                m.d.sync += j.eq(0)
                m.d.comb += self.chunk.ready.eq(1)
                with m.If(d.last):
                    m.d.sync += slot.eq(~slot)
                    m.d.comb += block_done.eq(1)

        with m.If(take):
            m.d.sync += row.eq(row + 1)
            with m.If(last_row):
                m.d.sync += row.eq(0)
                if ws:      # (OS: no branch that never runs in the Verilog)
                    m.d.sync += kb.eq(kb + 1)
                    with m.If(last_kb):
                        m.d.sync += kb.eq(0)
                        tile_done()
                else:
                    tile_done()
        # Stage 2: add and write. A row written now and read by stage 1 is
        # forwarded (a read issued as it is written sees it: transparent).
        # Whether to forward is compared a cycle ahead, between stage 1 and
        # the row entering it, and registered: it selects every lane's
        # bits, so it leaves a flip-flop rather than an address compare.
        # Two rows in a row at one address and tile: a WS chunk of one row
        # (its k-blocks, or the next chunk), or an OS block of one row (the
        # next chunk). OS blocks of 2 rows or more take them in order and
        # then the next chunk's from row 0: consecutive rows always differ,
        # and there is no forwarding to emit.
        forwards = ws or Mt == 1
        mults = {}
        if grouped:     # each lane's multiplier: its column's code decoded, or 1
            table = Array(Const(v, GROUP_MULT_BITS + 1) for v in GROUP_MULTS)
            word = self.codes.data.word_select(s1["j"], 4 * C)
            mults["mult"] = Cat(*[Mux(s1["w4"], table[word[4 * q:4 * q + 4]], 1)[:GROUP_MULT_BITS + 1]
                                  for q in range(C)])
        forward = {"forward": s1["valid"] & (s1["addr"] == addr) & (s1["j"] == j)} if forwards else {}
        s2 = stage(m, {"addr": s1["addr"], "j": s1["j"], "row": s1["row"], **mults}, "acc2",
                   flags={"valid": s1["valid"], "end": s1["end"], **forward})
        prior = Signal(C * aw, name="acc2_prior")
        sums = []
        for q in range(C):
            if cfg.bf16:
                sums.append(Bf16Arith.add(m, prior[q * aw:(q + 1) * aw], s2["row"][q]))
                continue
            if grouped:
                b = GROUP_MULT_BITS + 1
                term = s2["row"][q] * s2["mult"][q * b:(q + 1) * b]
                total = Signal(signed(max(aw, len(term)) + 1), name=f"acc_sum{q}")
                m.d.comb += total.eq(prior[q * aw:(q + 1) * aw].as_signed() + term)
                sums.append(clamp(total, aw))
                continue
            total = Signal(signed(aw + 1), name=f"acc_sum{q}")
            m.d.comb += total.eq(prior[q * aw:(q + 1) * aw].as_signed() + s2["row"][q])
            sums.append(clamp(total, aw))
        row_read = self.rd.data if cfg.compact else Mux(s1["old"], self.old.data, self.rd.data)
        read = row_read.word_select(s1["j"], C * aw)
        start = Cat(*[Const(FP32_NEG_ZERO, 32)] * C) if cfg.bf16 else 0
        if forwards:
            read = Mux(s2["forward"], Cat(*sums), read)
        m.d.sync += prior.eq(Mux(s1["init"], start, read))
        m.d.comb += [self.wr.addr.eq(s2["addr"]), self.wr.data.eq(Cat(*(sums * cfg.group))),
                     self.committed.eq(s2["end"])]
        for p in range(P):
            m.d.comb += self.wr.en[p].eq(s2["valid"] & (s2["j"] == p // C))
        return m
