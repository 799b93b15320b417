"""The serial GEMM engine: the smallest engine, for the smallest FPGAs.

It runs the commands of :class:`~bertforge.rtl.gemm.GemmEngine` (same
:func:`~bertforge.rtl.tile_scheduler.command_layout`, same results:
:func:`~bertforge.sim.gemm_golden.gemm_golden`) on the same output
stationary :class:`~bertforge.rtl.systolic.SystolicArray`, but one step at
a time, with no operand buffers and no stage queues::

    commands -> scheduler --one chunk--> sequencer --a column of A, a row of B--> array
                                             |  ^                                   |
                              memory reads / writes                       result rows
                                             |  +------ accumulator registers <-----+
                                             +--> bias, SerialRequantizer --> C

For each chunk the sequencer reads, for every k, one element of A per
array row and one row of B (a read request each), and hands the array one
beat; it adds the tile's result rows into the accumulator registers
(``rows x cols`` sums of ``acc_width`` bits). At the block's last chunk it
writes every output element on its own: acc, plus the bias read from
memory, requantized (one :class:`SerialRequantizer`, shared by all
elements) with the command's or the column's (multiplier, shift), which is
read from memory too. The scheduler's registered descriptor is held
while the sequencer works on it, so nothing is stored twice.

What it costs is time: a k step takes ``m_len + 1`` memory reads (one per
valid row of A, one for B's row, which is one beat since ``mem_width >=
cols * width``) and each output element a few more plus, when
requantized, :attr:`SerialRequantizer.LATENCY` cycles;
:func:`bertforge.sim.gemm_cycles.serial_cycles` counts them exactly for a
memory of fixed latency. On a board behind a UART that is still far faster
than the link that fills its memory.
"""

from dataclasses import replace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .engine import engine_members
from .gemm import GemmConfig, GemmEngine, schedule
from .params import check_instance
from .stream import clamp
from .systolic import SystolicArray
from .tile_scheduler import CHANNEL_MULT_BITS, command_layout, completion_layout
from bertforge.rtl.errors import ParameterError

__all__ = ["SerialRequantizer", "SerialGemmEngine", "gemm_engine"]


class SerialRequantizer(wiring.Component):
    """``clamp((x * multiplier + 2**(shift-1)) >> shift)`` to int16, or
    int8 with ``int8`` (:func:`bertforge.sim.fixed_golden.requantize`), bit
    by bit: no multiplier block, no barrel shifter.

    ``start`` (a pulse) takes ``x`` (int32), ``multiplier`` (32-bit
    unsigned), ``shift`` (0 to 63) and ``int8``; ``busy`` is high from the
    next cycle for :attr:`LATENCY` cycles, after which ``y`` holds the
    result until the next ``start``. 32 shift-and-add steps form the exact
    64-bit product (a 33-bit adder), then 63 cycles shift it right
    ``shift`` times, keeping the last bit shifted out, which rounds; two
    more round and saturate.
    """

    #: Cycles ``busy`` stays high after ``start``.
    LATENCY = 32 + 63 + 2

    def __init__(self):
        super().__init__({
            "start": In(1), "x": In(signed(32)), "multiplier": In(32), "shift": In(6),
            "int8": In(1), "busy": Out(1), "y": Out(signed(16)),
        })

    def elaborate(self, platform):
        m = Module()
        product = Signal(signed(64))    # x * multiplier, then shifted right
        x = Signal(signed(32))
        bits = Signal(32)               # multiplier bits still to add, LSB first
        shift = Signal(6)
        int8 = Signal()
        rounding = Signal()             # the last bit shifted out
        rounded = Signal(signed(17))    # floor + rounding, before saturation
        count = Signal(range(self.LATENCY))
        with m.If(self.start):
            m.d.sync += [product.eq(0), x.eq(self.x), bits.eq(self.multiplier),
                         shift.eq(self.shift), int8.eq(self.int8), rounding.eq(0), count.eq(0),
                         self.busy.eq(1)]
        with m.Elif(self.busy):
            m.d.sync += count.eq(count + 1)
            with m.If(count < 32):      # (product + bit * x * 2**32) >> 1
                top = product[32:].as_signed() + Mux(bits[0], x, 0)
                m.d.sync += [product.eq(Cat(product[1:32], top)), bits.eq(bits >> 1)]
            with m.Elif(count - 32 < shift):
                m.d.sync += [product.eq(product >> 1), rounding.eq(product[0])]
            with m.If(count == self.LATENCY - 2):
                # floor(p / 2**shift) + rounding, saturated: the rounding bit
                # counts only when the floor fits (else it is a bound already).
                top = product[15:]
                fits = top.all() | ~top.any()
                m.d.sync += rounded.eq(clamp(product, 16) + (rounding & fits))
            with m.If(count == self.LATENCY - 1):
                y16 = clamp(rounded, 16)
                m.d.sync += [self.y.eq(Mux(int8, clamp(y16, 8), y16)), self.busy.eq(0)]
        return m


class SerialGemmEngine(wiring.Component):
    """Runs GEMM commands on a :class:`SystolicArray`, one step at a time
    (see the module docstring).

    Ports as :class:`~bertforge.rtl.gemm.GemmEngine`'s: ``cmd``, ``done``
    (one completion per command, in order), ``rd_req`` / ``rd_data``
    (memory reads), ``wr_req`` (memory writes). Memory may take any time and
    may stall any stream; at most one read or write is outstanding.

    Parameters
    ----------
    config : GemmConfig
        With ``serial=True``.
    max_dsp : int or None
        At most this many PEs use DSP blocks (the requantizer uses none).
    """

    def __init__(self, config, *, max_dsp=None):
        check_instance("config", config, GemmConfig)
        if not config.serial:
            raise ParameterError("SerialGemmEngine needs a config with serial=True")
        self.config = config
        self.systolic = replace(config.systolic, max_dsp=max_dsp)
        super().__init__(engine_members(config, command_layout(config), completion_layout(config)))

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        R, C, W, aw = cfg.rows, cfg.cols, cfg.width, cfg.acc_width
        esize_bits = W // 16            # log2 of bytes per operand
        chunk = schedule(m, cfg, self.cmd)
        d = chunk.payload
        # A tile is a chunk, at most k_chunk beats: exact, narrow sums.
        array = m.submodules.array = SystolicArray(self.systolic, sum_terms=cfg.k_chunk)
        requant = m.submodules.requantizer = SerialRequantizer()
        rd, data, wr = self.rd_req, self.rd_data, self.wr_req

        # The accumulator: one sum per array PE, read combinationally.
        acc = m.submodules.acc = Memory(shape=signed(aw), depth=R * C, init=[])
        acc_rd = acc.read_port(domain="comb")
        acc_wr = acc.write_port()

        r = Signal(range(R))
        c = Signal(range(C))
        index = Signal(range(R * C))    # r * C + c: the accumulator address
        k = Signal.like(d.k_len)
        row_base = Signal(cfg.addr_width)   # of A row r at k, or of C row r
        a_k = Signal(cfg.addr_width)        # of A[0, k]
        b_k = Signal(cfg.addr_width)        # of B[k, 0]
        a_col = Signal(R * W)               # A[:, k], row 0 lowest
        b_row = Signal(C * W)               # B[k, :], column 0 lowest (one beat:
                                            # mem_width >= cols * width)
        fresh = Signal()                    # the block's sums start from 0
        value = Signal(signed(32))          # the output element being written
        inside = (r < d.m_len) & (c < d.n_len)
        out_bits = Mux(d.int8, 0, Mux(d.int16, 1, 2))      # log2 of C's bytes
        narrow = d.int8 | d.int16

        # One beat a read: ``valid``, not the constant 1, which Verilator
        # would never assign (it skips an ``always @*`` of constants).
        m.d.comb += [acc_rd.addr.eq(index), acc_wr.addr.eq(index), rd.payload.beats.eq(rd.valid),
                     wr.payload.bytes.eq(1 << out_bits), wr.payload.data.eq(value.as_unsigned()),
                     wr.payload.addr.eq(row_base + (c << out_bits)),
                     array.a.payload.data.eq(a_col), array.b.payload.eq(b_row),
                     array.a.payload.last.eq(k + 1 == d.k_len),
                     self.done.payload.tag.eq(d.tag), self.done.payload.error.eq(d.error),
                     requant.x.eq(value), requant.int8.eq(d.int8)]

        def walk(then, *, when=None, otherwise=None):
            """The next (r, c) of the block (C rows ``c_stride`` apart), or
            after the last state ``then`` (with ``when``: if ``when``, else
            state ``otherwise``)."""
            with m.If(index == R * C - 1):
                if when is None:
                    m.next = then
                else:
                    with m.If(when):
                        m.next = then
                    with m.Else():
                        m.next = otherwise
            with m.Else():
                m.d.sync += index.eq(index + 1)
                with m.If(c == C - 1):
                    m.d.sync += [c.eq(0), r.eq(r + 1), row_base.eq(row_base + d.c_stride)]
                with m.Else():
                    m.d.sync += c.eq(c + 1)

        def start_walk():
            m.d.sync += [r.eq(0), c.eq(0), index.eq(0), row_base.eq(d.c_base)]

        def next_row():
            """The next A row of this k, or B after the last."""
            with m.If(r == R - 1):
                m.next = "B"
            with m.Else():
                m.d.sync += [r.eq(r + 1), row_base.eq(row_base + d.a_stride)]
                m.next = "A_READ"

        def read(addr, then):
            """Request one beat at ``addr``, then state ``then``."""
            m.d.comb += [rd.valid.eq(1), rd.payload.addr.eq(addr)]
            with m.If(rd.ready):
                m.next = then

        with m.FSM():
            with m.State("IDLE"):
                with m.If(chunk.valid):
                    start_walk()
                    m.d.sync += [fresh.eq(d.first & ~d.accumulate), k.eq(0),
                                 a_k.eq(d.a_base), b_k.eq(d.b_base)]
                    with m.If(d.error):
                        m.next = "DONE"
                    with m.Elif(d.first & d.accumulate):
                        m.next = "OLD"
                    with m.Else():
                        m.next = "A"

            # Old C into the accumulator (a block's first chunk, accumulate).
            with m.State("OLD"):
                with m.If(inside):
                    read(row_base + (c << 2), "OLD_DATA")
                with m.Else():
                    walk("A")
            with m.State("OLD_DATA"):
                m.d.comb += data.ready.eq(1)
                with m.If(data.valid):
                    m.d.comb += [acc_wr.en.eq(1),
                                 acc_wr.data.eq(clamp(data.payload[:32].as_signed(), aw))]
                    m.next = "OLD"
                    walk("A")

            # A[:, k], one read per row (rows past m_len are 0), then B[k, :].
            with m.State("A"):
                m.d.sync += [r.eq(0), row_base.eq(a_k)]
                m.next = "A_READ"
            with m.State("A_READ"):
                with m.If(r < d.m_len):
                    read(row_base, "A_DATA")
                with m.Else():
                    m.d.sync += a_col.eq(Cat(a_col[W:], Const(0, W)))
                    next_row()
            with m.State("A_DATA"):
                m.d.comb += data.ready.eq(1)
                with m.If(data.valid):
                    m.d.sync += a_col.eq(Cat(a_col[W:], data.payload[:W]))
                    next_row()
            with m.State("B"):
                read(b_k, "B_DATA")
            with m.State("B_DATA"):
                m.d.comb += data.ready.eq(1)
                with m.If(data.valid):
                    m.d.sync += b_row.eq(data.payload[:C * W])
                    m.next = "PUSH"
            with m.State("PUSH"):
                m.d.comb += [array.a.valid.eq(1), array.b.valid.eq(1)]
                with m.If(array.a.ready):
                    m.d.sync += [k.eq(k + 1), a_k.eq(a_k + (1 << esize_bits)),
                                 b_k.eq(b_k + d.b_stride)]
                    with m.If(array.a.payload.last):
                        start_walk()
                        m.next = "SUM"
                    with m.Else():
                        m.next = "A"

            # The tile's result rows into the accumulator, a sum a cycle.
            with m.State("SUM"):
                with m.If(array.c.valid):
                    part = array.c.payload.data[c]
                    m.d.comb += [acc_wr.en.eq(1),
                                 acc_wr.data.eq(clamp(Mux(fresh, 0, acc_rd.data) + part, aw)),
                                 array.c.ready.eq(c == C - 1)]
                    with m.If(index == R * C - 1):
                        start_walk()
                        m.d.sync += fresh.eq(0)
                    walk("OUT", when=d.last, otherwise="NEXT")

            # The block's outputs, one element at a time.
            with m.State("OUT"):
                m.d.sync += value.eq(acc_rd.data)
                with m.If(~inside):
                    walk("DONE", when=d.end, otherwise="NEXT")
                with m.Elif(d.bias):
                    m.next = "BIAS"
                with m.Else():
                    m.next = "SCALE"
            with m.State("BIAS"):
                read(d.bias_base + (c << 2), "BIAS_DATA")
            with m.State("BIAS_DATA"):
                m.d.comb += data.ready.eq(1)
                with m.If(data.valid):
                    m.d.sync += value.eq(clamp(value + data.payload[:32].as_signed(), 32))
                    m.next = "SCALE"
            with m.State("SCALE"):
                with m.If(narrow & d.per_channel):
                    read(d.scale_base + (c << 2), "SCALE_DATA")
                with m.Elif(narrow):
                    m.d.comb += [requant.start.eq(1), requant.multiplier.eq(d.multiplier),
                                 requant.shift.eq(d.shift)]
                    m.next = "REQUANT"
                with m.Else():
                    m.next = "WRITE"
            with m.State("SCALE_DATA"):
                m.d.comb += data.ready.eq(1)
                with m.If(data.valid):
                    word = data.payload[:32]
                    m.d.comb += [requant.start.eq(1),
                                 requant.multiplier.eq(word[:CHANNEL_MULT_BITS]),
                                 requant.shift.eq(word[CHANNEL_MULT_BITS:])]
                    m.next = "REQUANT"
            with m.State("REQUANT"):
                with m.If(~requant.busy):
                    m.d.sync += value.eq(requant.y)
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += wr.valid.eq(1)
                with m.If(wr.ready):
                    m.next = "OUT"
                    walk("DONE", when=d.end, otherwise="NEXT")

            with m.State("DONE"):
                m.d.comb += self.done.valid.eq(1)
                with m.If(self.done.ready):
                    m.next = "NEXT"
            with m.State("NEXT"):
                m.d.comb += chunk.ready.eq(1)
                m.next = "IDLE"
        return m


def gemm_engine(config, *, max_dsp=None):
    """The engine of ``config``: a :class:`SerialGemmEngine` if
    ``config.serial``, else a :class:`~bertforge.rtl.gemm.GemmEngine`, with
    its memory streams (on AXI: :func:`~bertforge.rtl.axi_top.with_bus`)."""
    return (SerialGemmEngine if config.serial else GemmEngine)(config, max_dsp=max_dsp)
