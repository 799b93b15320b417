"""GELU unit: elementwise ``x * Phi(x)``, table with linear interpolation."""

import math
from dataclasses import dataclass

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .fixed import Q, requantize
from .params import Config, check_bool, check_choice, check_instance, check_int, check_scale
from .stream import register, row_layout
from .tile_scheduler import CHANNEL_MULT_BITS
from bertforge.rtl.errors import ParameterError

__all__ = ["GeluConfig", "Gelu", "GELU_X", "GELU_Y", "GELU_SEGMENT_BITS", "GELU_SEGMENTS",
           "GELU_LATENCY", "gelu_tables"]

#: Internal input format: x after the input scale (range [-128, 128)).
GELU_X = Q(8, 10)
#: Internal output format of GELU(x) before the output scale.
GELU_Y = Q(8, 14)
#: Fraction bits of ``|x|`` inside one table segment (segments of 1/8).
GELU_SEGMENT_BITS = 7
#: Table segments over ``|x|`` in [0, 4); beyond 4 the correction is 0.
GELU_SEGMENTS = 32
#: Register stages from input handshake to output register.
GELU_LATENCY = 6


def _correction(t):
    """``h(t) = t * Phi(-t) = relu(t) - gelu(t)`` for ``t >= 0`` (real)."""
    return t * 0.5 * math.erfc(t / math.sqrt(2.0))


def gelu_tables():
    """``(base, slope)``: per segment ``i`` of ``|x|``, ``base[i]`` is
    ``h(i/8)`` in :data:`GELU_Y` raw units and ``slope[i] = base[i+1] -
    base[i]``; ``GELU(x) = relu(x) - h(|x|)`` with ``h(t) = t Phi(-t)``."""
    step = 2.0 ** (GELU_SEGMENT_BITS - GELU_X.frac_bits)
    knots = [int(math.floor(_correction(i * step) * (1 << GELU_Y.frac_bits) + 0.5))
             for i in range(GELU_SEGMENTS + 1)]
    return knots[:-1], [knots[i + 1] - knots[i] for i in range(GELU_SEGMENTS)]


@dataclass(frozen=True, kw_only=True)
class GeluConfig(Config):
    """Parameters of a :class:`Gelu`.

    Parameters
    ----------
    lanes : int
        Elements per beat (1 to 64).
    in_width : 8, 16 or 32
        Signed input width.
    out_width : 8 or 16
        Signed output width.
    in_mult, in_shift : int
        Input scale: ``x = requantize(raw, in_mult, in_shift)`` in
        :data:`GELU_X` (Q8.10), i.e. one input LSB is
        ``in_mult * 2**-(in_shift + 10)`` in real units.
    out_mult, out_shift : int
        Output scale: ``out = requantize(y, out_mult, out_shift)`` from
        ``y`` in :data:`GELU_Y` (Q8.14), i.e. one output LSB is
        ``2**(out_shift - 14) / out_mult``.
    channel_scales : bool
        One output scale per channel instead (``out_mult``/``out_shift``
        unused): element ``j`` of a row (a row ends with ``last``) is
        ``requantize(y, mult[j], shift[j])``, from the 32-bit scale words
        of the GEMM engine's per-channel requantization (multiplier in the
        low :data:`~bertforge.rtl.tile_scheduler.CHANNEL_MULT_BITS` bits,
        shift above) loaded on the ``scales`` stream. A low-bit encoder's
        GELU writes the next GEMM's int8 operand, smoothed per channel.
    channels_max : int
        Longest row with ``channel_scales`` (then a multiple of ``lanes``;
        at most 4096): the scale memory holds ``channels_max / lanes`` beats.

    The defaults take int8 with LSB 1/16 (range [-8, 8)) and give int8 with
    LSB 1/16.
    """

    lanes: int = 1
    in_width: int = 8
    out_width: int = 8
    in_mult: int = 64
    in_shift: int = 0
    out_mult: int = 1
    out_shift: int = 10
    channel_scales: bool = False
    channels_max: int = 4096

    LATE_FIELDS = ("channel_scales", "channels_max")

    def __post_init__(self):
        check_int("lanes", self.lanes, maximum=64)
        check_choice("in_width", self.in_width, (8, 16, 32))
        check_choice("out_width", self.out_width, (8, 16))
        check_scale("in", self.in_mult, self.in_shift)
        check_scale("out", self.out_mult, self.out_shift)
        check_bool("channel_scales", self.channel_scales)
        check_int("channels_max", self.channels_max, maximum=4096)
        if self.channel_scales and self.channels_max % self.lanes:
            raise ParameterError(f"channels_max must be a multiple of lanes ({self.lanes}), "
                                 f"not {self.channels_max}")

    @property
    def name(self):
        return (f"gelu_l{self.lanes}_i{self.in_width}_o{self.out_width}"
                + (f"_c{self.channels_max}" if self.channel_scales else ""))

    @property
    def in_scale(self):
        """Real value of one input LSB."""
        return self.in_mult * 2.0 ** -(self.in_shift + GELU_X.frac_bits)

    @property
    def out_scale(self):
        """Real value of one output LSB."""
        return 2.0 ** (self.out_shift - GELU_Y.frac_bits) / self.out_mult


class Gelu(wiring.Component):
    """Elementwise GELU over ``lanes`` elements per beat.

    Each element: ``x = requantize(raw, in_mult, in_shift)`` (Q8.10,
    saturating), ``y = relu(x) - h(|x|)`` in Q8.14 where ``h(t) = t Phi(-t)``
    is read from a 32-segment table over [0, 4) with linear interpolation
    (``h = base[i] + round(slope[i] * f / 128)``, ``f`` the 7 fraction bits
    of ``|x|`` inside segment ``i``; ``h = 0`` for ``|x| >= 4``), then
    ``out = requantize(y, out_mult, out_shift)``.

    Error bound (before the output rounding): ``|y - GELU(x)| <= 0.0018``
    for every ``x`` (interpolation error ``max|h''| / 8 * (1/8)**2 =
    0.0016``, table and product rounding ``3 * 2**-15``, ``h(4) = 1.3e-4``
    dropped); the output adds at most half an output LSB, and the input
    rounding to Q8.10 at most ``1.13 * 2**-11``.

    With ``channel_scales`` the output scale is per channel: the
    ``scales`` stream (``words``: lanes x 32-bit scale words, ``last``)
    loads channels 0, 1, ... in order (before the rows that use them), and
    element ``j`` of each row takes word ``j``.

    ``seek`` (constructor argument, with ``channel_scales``): two more
    inputs, ``seek`` and ``seek_channel``; an input beat taken while
    ``seek`` is high uses the words of beat ``seek_channel`` (channel
    ``seek_channel * lanes`` on) instead of the next in order, and the
    order continues after it. The low-bit encoder top runs GELU on the GEMM
    engine's output, which comes a block of columns at a time.

    ``last`` passes through with its beat. Throughput: one beat per cycle
    (a stall-all pipeline: every stage moves when the output register is
    empty or being read). Latency: :data:`GELU_LATENCY` (6) cycles from
    input to output handshake with a ready consumer, so ``N`` beats back to
    back take ``N + 6`` cycles (first input to last output handshake).

    Parameters
    ----------
    config : GeluConfig
    seek : bool
        The ``seek`` and ``seek_channel`` inputs (``channel_scales`` only).
    """

    def __init__(self, config, *, seek=False):
        self.config = check_instance("config", config, GeluConfig)
        if seek and not config.channel_scales:
            raise ParameterError("seek needs channel_scales")
        self.seek_ports = seek
        ports = {
            "x": In(stream.Signature(row_layout(signed(config.in_width), config.lanes))),
            "y": Out(stream.Signature(row_layout(signed(config.out_width), config.lanes))),
        }
        if config.channel_scales:
            ports["scales"] = In(stream.Signature(data.StructLayout({
                "words": data.ArrayLayout(unsigned(32), config.lanes), "last": 1})))
        if seek:
            ports["seek"] = In(1)
            ports["seek_channel"] = In(range(config.channels_max // config.lanes))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        seg_bits = GELU_SEGMENT_BITS
        idx_bits = (GELU_SEGMENTS - 1).bit_length()
        limit = GELU_SEGMENTS << seg_bits          # |x| >= 4.0 in Q8.10 raw units
        base_table, slope_table = gelu_tables()
        y_shift = GELU_Y.frac_bits - GELU_X.frac_bits

        # Stall-all pipeline: stage k's valid bit; all stages move on ``advance``.
        valid = [Signal(name=f"valid{k}") for k in range(1, GELU_LATENCY + 1)]
        last = [Signal(name=f"last{k}") for k in range(1, GELU_LATENCY + 1)]
        advance = Signal()
        m.d.comb += [
            advance.eq(~valid[-1] | self.y.ready),
            self.x.ready.eq(advance),
            self.y.valid.eq(valid[-1]),
            self.y.payload.last.eq(last[-1]),
        ]
        with m.If(advance):
            m.d.sync += [valid[0].eq(self.x.valid), last[0].eq(self.x.payload.last)]
            for k in range(1, GELU_LATENCY):
                m.d.sync += [valid[k].eq(valid[k - 1]), last[k].eq(last[k - 1])]

        # Ranges, from the tables and the scales (intermediates sized to
        # them; requantize leaves out a clamp they cannot reach): h over
        # every segment and fraction, x over every input, y = relu(x) << 4 - h.
        h_values = [b + ((k * f + (1 << (seg_bits - 1))) >> seg_bits)
                    for b, k in zip(base_table, slope_table) for f in range(1 << seg_bits)]
        h_lo, h_hi = min(h_values + [0]), max(h_values + [0])
        in_range = (-(1 << (cfg.in_width - 1)) * cfg.in_mult, ((1 << (cfg.in_width - 1)) - 1) * cfg.in_mult)
        # x over every input (the input requantization is monotonic)
        x_lo, x_hi = (min(max((v + ((1 << cfg.in_shift) >> 1)) >> cfg.in_shift, GELU_X.min_raw),
                          GELU_X.max_raw) for v in in_range)
        mag_bits = max(max(-x_lo, x_hi).bit_length(), seg_bits + idx_bits + 1)
        y_lo, y_hi = -h_hi, (max(x_hi, 0) << y_shift) - h_lo
        mult_hi = (1 << CHANNEL_MULT_BITS) - 1 if cfg.channel_scales else cfg.out_mult
        out_corners = [y * k for y in (y_lo, y_hi) for k in (0 if cfg.channel_scales else mult_hi, mult_hi)]
        out_range = (min(out_corners), max(out_corners))

        if cfg.channel_scales:
            words = self._scale_words(m, advance)
        for lane in range(cfg.lanes):
            raw = self.x.payload.data[lane]
            product = register(signed(cfg.in_width + cfg.in_mult.bit_length() + 1),
                               f"l{lane}_in_product")
            x = register(range(min(x_lo, -1), max(x_hi, 1) + 1), f"l{lane}_x")
            mag = Signal(unsigned(mag_bits), name=f"l{lane}_mag")
            base = register(range(min(base_table), max(base_table) + 1), f"l{lane}_base")
            slope = register(range(min(slope_table), max(slope_table) + 1), f"l{lane}_slope")
            frac = register(unsigned(seg_bits), f"l{lane}_frac")
            beyond = register(1, f"l{lane}_beyond")
            relu = register(range(max(x_hi, 1) + 1), f"l{lane}_relu")      # max(x, 0)
            h = Signal(range(h_lo, h_hi + 1), name=f"l{lane}_h")
            y = register(range(y_lo, y_hi + 1), f"l{lane}_y")
            out_mult, out_shift = cfg.out_mult, cfg.out_shift
            if cfg.channel_scales:      # this beat's words (stage 4) and shift (stage 5)
                out_mult, out_shift = words[lane][0][:CHANNEL_MULT_BITS], words[lane][1]
            out_product = register(range(out_range[0], out_range[1] + 1), f"l{lane}_out_product")
            out = register(signed(cfg.out_width), f"l{lane}_out")

            rounded = slope * frac + (1 << (seg_bits - 1))
            correction = rounded[seg_bits:]      # >> seg_bits, without yosys's padding
            if rounded.shape().signed:
                correction = correction.as_signed()
            m.d.comb += [
                mag.eq(Mux(x < 0, -x, x)),
                h.eq(base + correction),
                self.y.payload.data[lane].eq(out),
            ]
            bases = Array(Const(v, base.shape()) for v in base_table)
            slopes = Array(Const(v, slope.shape()) for v in slope_table)
            index = mag[seg_bits:seg_bits + idx_bits]
            with m.If(advance):
                m.d.sync += [
                    product.eq(raw * cfg.in_mult),
                    x.eq(requantize(product, 1, cfg.in_shift, GELU_X.shape, value_range=in_range)),
                    base.eq(bases[index]),
                    slope.eq(slopes[index]),
                    frac.eq(mag[:seg_bits]),
                    beyond.eq(mag >= limit),
                    relu.eq(Mux(x < 0, 0, x)),
                    y.eq((relu << y_shift) - Mux(beyond, 0, h)),
                    out_product.eq(y * out_mult),
                    out.eq(requantize(out_product, 1, out_shift, signed(cfg.out_width),
                                      value_range=out_range)),
                ]
        return m

    def _scale_words(self, m, advance):
        """The scale memory (written from ``scales``, read at each input
        beat's channel) and, per lane, ``(word, shift)``: the beat's word
        beside ``y`` (stage 4) and its shift beside ``out_product`` (stage
        5)."""
        cfg = self.config
        depth = cfg.channels_max // cfg.lanes
        m.submodules.scales_mem = mem = Memory(shape=unsigned(32 * cfg.lanes), depth=depth, init=[])
        write = mem.write_port()
        read = mem.read_port(domain="sync")
        load_addr = Signal(range(depth), name="scale_load_addr")
        m.d.comb += [self.scales.ready.eq(1), write.addr.eq(load_addr),
                     write.en.eq(self.scales.valid), write.data.eq(self.scales.payload.words)]
        with m.If(self.scales.valid):
            with m.If(self.scales.payload.last | (load_addr == depth - 1)):
                m.d.sync += load_addr.eq(0)
            with m.Else():
                m.d.sync += load_addr.eq(load_addr + 1)
        # The channel of the next input beat; its words leave the read port
        # beside stage 1 (both move on ``advance``).
        channel = Signal(range(depth), name="scale_channel")
        at = channel
        if self.seek_ports:
            at = Mux(self.seek, self.seek_channel, channel)
        m.d.comb += [read.addr.eq(at), read.en.eq(advance)]
        with m.If(advance & self.x.valid):
            m.d.sync += channel.eq(Mux(self.x.payload.last | (at == depth - 1), 0, at + 1))
        out = []
        for lane in range(cfg.lanes):
            word = read.data[32 * lane:32 * (lane + 1)]
            for stage in (2, 3, 4):
                nxt = register(unsigned(32), f"l{lane}_scale{stage}")
                with m.If(advance):
                    m.d.sync += nxt.eq(word)
                word = nxt
            shift = register(unsigned(32 - CHANNEL_MULT_BITS), f"l{lane}_scale_shift5")
            with m.If(advance):
                m.d.sync += shift.eq(word[CHANNEL_MULT_BITS:])
            out.append((word, shift))
        return out
