"""Streaming integer softmax: rows of run-time length, ``lanes`` elements per beat."""

import itertools
import math
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .fixed import Q, requantize
from .params import Config, check_bool, check_choice, check_instance, check_int
from .stream import Queue, row_layout, stage, tree
from bertforge.rtl.errors import ParameterError, ParameterTypeError

__all__ = ["SoftmaxConfig", "Softmax", "softmax_scale",
           "T_FRAC", "T_HI_BITS", "T_INT", "MULT_BITS", "SHIFT_BITS", "RECIP_GUARD"]

#: Fractional bits of ``t`` (the log2-domain distance to the row max).
T_FRAC = 12
#: Bits of ``t``'s fraction that index the coarse exp table (the rest index the fine one).
T_HI_BITS = 6
#: Bits of ``t``'s integer part (``t`` saturates at ``2**(T_FRAC + T_INT) - 1``).
T_INT = 5
#: Width of the per-row scale multiplier and shift.
MULT_BITS = 16
SHIFT_BITS = 6
#: Reciprocal precision: ``r = floor(2**K / sum)`` has at least this many bits.
RECIP_GUARD = 18
#: Quotient bits the divider resolves per pipeline stage.
DIV_BITS_PER_STAGE = 2


def _clog2(n):
    return (n - 1).bit_length()


def softmax_scale(scale):
    """``(multiplier, shift)`` for a row whose real values are ``x * scale``.

    The hardware computes ``t = (u * multiplier + 2**(shift-1)) >> shift`` with
    ``u = max - x``, so ``multiplier * 2**-shift`` is ``scale * log2(e) *
    2**T_FRAC``, rounded to a 16-bit multiplier in ``[2**15, 2**16)`` (relative
    error <= 2**-16) when the shift allows. ``scale`` must lie in about
    ``[2e-16, 11]``.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ParameterTypeError(f"scale must be a number, not {scale!r}")
    if not (scale > 0 and math.isfinite(scale)):
        raise ParameterError(f"scale must be a positive finite number, not {scale!r}")
    target = scale * math.log2(math.e) * (1 << T_FRAC)
    shift = MULT_BITS - 1 - math.floor(math.log2(target))
    shift = min(shift, (1 << SHIFT_BITS) - 1)
    if shift < 0:
        raise ParameterError(f"scale must be at most {((1 << MULT_BITS) - 1) / (target / scale):.4g}, "
                         f"not {scale!r}")
    multiplier = math.floor(target * 2.0 ** shift + 0.5)
    if multiplier >= 1 << MULT_BITS:
        multiplier, shift = multiplier >> 1, shift - 1
        if shift < 0:
            raise ParameterError(f"scale must be at most {((1 << MULT_BITS) - 1) / (target / scale):.4g}, "
                             f"not {scale!r}")
    if multiplier < 1 << (MULT_BITS - 8):
        raise ParameterError(f"scale must be at least {2.0 ** (MULT_BITS - 8 - 63) / (target / scale):.4g}, "
                         f"not {scale!r}")
    return multiplier, shift


@dataclass(frozen=True, kw_only=True)
class SoftmaxConfig(Config):
    """Parameters of a :class:`Softmax`.

    Parameters
    ----------
    lanes : int
        Elements per beat, 1 to 64.
    l_max : int
        Longest row, 1 to 4096 elements (rows may be shorter, set at run time).
    in_width : 32 or 16
        Signed input width: int32 GEMM accumulators or int16 values.
    out_width : 8 or 16
        Output: uint8 probabilities in U0.8 (``p * 256``, at most 255) or int16
        in Q1.15 (``p * 32768``, at most 32767).
    mask : bool
        Whether beats carry a per-element mask (an additive -infinity, BERT's
        padding mask); without it, every row fills whole beats.
    """

    lanes: int = 4
    l_max: int = 128
    in_width: int = 32
    out_width: int = 8
    mask: bool = True

    def __post_init__(self):
        check_int("lanes", self.lanes, maximum=64)
        check_int("l_max", self.l_max, maximum=4096)
        check_choice("in_width", self.in_width, (32, 16))
        check_choice("out_width", self.out_width, (8, 16))
        check_bool("mask", self.mask)

    @property
    def name(self):
        return (f"softmax_{self.lanes}x{self.l_max}_i{self.in_width}_o{self.out_width}"
                + ("" if self.mask else "_nomask"))

    # Derived number formats (golden and cycle models read these too).

    @property
    def beats_max(self):
        """Beats of the longest row: ``ceil(l_max / lanes)``."""
        return -(-self.l_max // self.lanes)

    @property
    def exp_frac(self):
        """Fractional bits of the exponentials ``e`` (the row max gives exactly
        ``2**exp_frac``): 16, more for rows longer than 128."""
        return max(16, _clog2(self.l_max) + 9)

    @property
    def table_frac(self):
        """Fractional bits of the two exp tables."""
        return self.exp_frac + 2

    @property
    def sum_width(self):
        return self.exp_frac + _clog2(self.l_max) + 1

    @property
    def recip_shift(self):
        """``K`` of the reciprocal ``r = floor(2**K / sum)``."""
        return self.exp_frac + _clog2(self.l_max) + RECIP_GUARD

    @property
    def recip_width(self):
        return _clog2(self.l_max) + RECIP_GUARD + 1

    @property
    def out_q(self):
        return Q(0, 8, signed=False) if self.out_width == 8 else Q(1, 15)

    @property
    def out_shape(self):
        return unsigned(8) if self.out_width == 8 else signed(16)

    def exp_tables(self):
        """``(coarse, fine)``: ``round(2**P * 2**(-i / 2**T_HI_BITS))`` and
        ``round(2**P * 2**(-j / 2**T_FRAC))`` for ``P = table_frac``."""
        p = self.table_frac
        lo_bits = T_FRAC - T_HI_BITS
        coarse = tuple(math.floor(2.0 ** (p - i / (1 << T_HI_BITS)) + 0.5) for i in range(1 << T_HI_BITS))
        fine = tuple(math.floor(2.0 ** (p - j / (1 << T_FRAC)) + 0.5) for j in range(1 << lo_bits))
        return coarse, fine

    # Pipeline structure (the cycle model reads these).

    @property
    def div_stages(self):
        return -(-self.recip_width // DIV_BITS_PER_STAGE)

    @property
    def a_to_b(self):
        """Cycles from a row's last input handshake to the first read of it by
        the exp pass (both passes idle otherwise)."""
        return 2

    @property
    def b_to_c(self):
        """Cycles from the exp pass reading a row's last beat to the output
        pass reading its first beat."""
        return 7 + 1 + self.div_stages + 2

    @property
    def c_to_out(self):
        """Cycles from the output pass reading a beat to its output handshake."""
        return 2

    @property
    def x_depth(self):
        return 2 * self.beats_max + self.a_to_b + 4

    @property
    def meta_depth(self):
        return self.beats_max + self.a_to_b + 4

    @property
    def e_depth(self):
        return 2 * self.beats_max + self.b_to_c + 4

    @property
    def recip_depth(self):
        return self.beats_max + self.b_to_c + 4


def _max(m, a, b, name):
    result = Signal.like(a, name=name)
    m.d.comb += result.eq(Mux(a > b, a, b))
    return result


class Softmax(wiring.Component):
    """Integer softmax of rows of up to ``l_max`` elements, ``lanes`` per beat.

    A row arrives on ``x`` as ``ceil(L / lanes)`` beats, ``last`` on the final
    one; each beat carries the row's scale as ``multiplier`` and ``shift``
    (:func:`softmax_scale`; the final beat's value is used) and, with
    ``mask``, one bit per element: 1 excludes the element (probability 0; the
    lanes past ``L`` in a row's final beat must be masked). The row's
    probabilities leave on ``y`` in the same beat structure.

    Per row, with ``m`` the max of the unmasked ``x``:

    - ``t = requantize(m - x, multiplier, shift)``: ``(m - x) * scale *
      log2(e)`` in ``UQ5.12`` (saturating);
    - ``e = 2**-t``: the fraction by the product of a 64-entry coarse and a
      64-entry fine table, rounded to ``exp_frac`` bits, then shifted right by
      the integer part of ``t`` (rounded); the max gives ``e = 2**exp_frac``;
    - one reciprocal per row, ``r = floor(2**K / sum(e))`` (pipelined
      restoring divider, 2 bits per stage);
    - ``y = requantize(e * r, 1, K - out_frac)``, saturated (1.0 -> 255).

    A fully masked row gives zeros. Error against float softmax of the
    dequantized row, uint8 output (tests assert <= 2/256): at most 1/256,
    reached only where p -> 1 saturates to 255; otherwise the output rounding
    (0.5/256) plus < 0.03/256 (t rounded to 2**-13: relative 8.5e-5; tables
    to 2**-18; e to 2**-17 of the max; r to 2**-18). Mean about 0.13/256 on
    BERT-like rows.

    Three passes overlap: row n+2 is read in while row n+1 is exponentiated
    and row n normalized, through queues sized for any mix of row lengths up
    to ``l_max`` (a longer row would fill them and stall forever; the models
    and the command line refuse it).

    Throughput: one beat (``lanes`` elements) per cycle for rows back to
    back, whatever their lengths. Latency of a lone row of ``b`` beats:
    ``3 * b - 2 + A + B + C`` cycles, with ``A = a_to_b = 2``,
    ``B = b_to_c = 10 + ceil(recip_width / 2)``, ``C = c_to_out = 2``
    (49 cycles for 128 elements on 16 lanes);
    :func:`bertforge.sim.softmax_cycles.softmax_cycles` is the exact model.

    Parameters
    ----------
    config : SoftmaxConfig
    """

    def __init__(self, config):
        self.config = check_instance("config", config, SoftmaxConfig)
        fields = {"data": data.ArrayLayout(signed(config.in_width), config.lanes)}
        if config.mask:
            fields["mask"] = unsigned(config.lanes)
        fields.update({"multiplier": unsigned(MULT_BITS), "shift": unsigned(SHIFT_BITS), "last": 1})
        out_layout = row_layout(config.out_shape, config.lanes)
        super().__init__({
            "x": In(stream.Signature(data.StructLayout(fields))),
            "y": Out(stream.Signature(out_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        lanes, width = cfg.lanes, cfg.in_width
        x_layout = data.StructLayout({
            "data": data.ArrayLayout(signed(width), lanes), "mask": unsigned(lanes), "last": 1})
        meta_layout = data.StructLayout({
            "max": signed(width), "multiplier": unsigned(MULT_BITS), "shift": unsigned(SHIFT_BITS)})
        e_shape = unsigned(cfg.exp_frac + 1)
        e_layout = row_layout(e_shape, lanes)
        xq = m.submodules.x_queue = Queue(shape=x_layout, depth=cfg.x_depth)
        mq = m.submodules.meta_queue = Queue(shape=meta_layout, depth=cfg.meta_depth)
        eq_ = m.submodules.e_queue = Queue(shape=e_layout, depth=cfg.e_depth)
        rq = m.submodules.recip_queue = Queue(shape=unsigned(cfg.recip_width), depth=cfg.recip_depth)

        # ---- Pass A: take beats, store them, track the row max.
        x = self.x
        mask = x.payload.mask if cfg.mask else Const(0, lanes)
        take = Signal()
        m.d.comb += [
            x.ready.eq(xq.i.ready & mq.i.ready),
            take.eq(x.valid & x.ready),
            xq.i.valid.eq(take),
            xq.i.payload.eq(Cat(x.payload.data, mask, x.payload.last)),
        ]
        lowest = -(1 << (width - 1))
        candidates = []
        for j in range(lanes):
            c = Signal(signed(width), name=f"cand{j}")
            m.d.comb += c.eq(Mux(mask[j], lowest, x.payload.data[j]))
            candidates.append(c)
        names = itertools.count()
        lane_max = tree(candidates, lambda a, b: _max(m, a, b, f"max{next(names)}"))
        run_max = Signal(signed(width), init=lowest)
        row_max = _max(m, run_max, lane_max, "row_max")
        with m.If(take):
            m.d.sync += run_max.eq(Mux(x.payload.last, lowest, row_max))
        m.d.comb += [
            mq.i.valid.eq(take & x.payload.last),
            mq.i.payload.eq(Cat(row_max, x.payload.multiplier, x.payload.shift)),
        ]

        # ---- Pass B: exponentials and the row sum (a stallable pipeline).
        x_head = xq.o.payload
        meta = mq.o.payload
        adv_b = Signal()
        b_pop = Signal()
        m.d.comb += [
            b_pop.eq(adv_b & xq.o.valid & mq.o.valid),
            xq.o.ready.eq(b_pop),
            mq.o.ready.eq(b_pop & x_head.last),
        ]

        def b_stage(values, flags, index):
            """Registers of stage ``index`` of pass B, loaded when ``adv_b``."""
            return stage(m, values, f"b{index}", en=adv_b, flags=flags)

        # b1: u = max - x (>= 0 for unmasked elements).
        diffs = {f"u{j}": (meta.max - x_head.data[j])[:width] for j in range(lanes)}
        s1 = b_stage({**diffs, "mask": x_head.mask, "mult": meta.multiplier, "shift": meta.shift},
                   {"valid": b_pop, "last": x_head.last}, 1)
        # b2: u * multiplier.
        s2 = b_stage({**{f"p{j}": s1[f"u{j}"] * s1["mult"] for j in range(lanes)},
                    "mask": s1["mask"], "shift": s1["shift"]},
                   {"valid": s1["valid"], "last": s1["last"]}, 2)
        # b3: t = round(p / 2**shift), saturated to UQ5.12 (the product was
        # registered in b2, so the house rule runs with multiplier 1).
        t_shape = unsigned(T_FRAC + T_INT)
        s3 = b_stage({**{f"t{j}": requantize(s2[f"p{j}"], 1, s2["shift"], t_shape) for j in range(lanes)},
                    "mask": s2["mask"]},
                   {"valid": s2["valid"], "last": s2["last"]}, 3)
        # b4: table lookups.
        coarse, fine = cfg.exp_tables()
        p_bits = cfg.table_frac + 1
        coarse_rom = Array(Const(v, p_bits) for v in coarse)
        fine_rom = Array(Const(v, p_bits) for v in fine)
        lo_bits = T_FRAC - T_HI_BITS
        values = {}
        for j in range(lanes):
            t = s3[f"t{j}"]
            values[f"hi{j}"] = coarse_rom[t[lo_bits:T_FRAC]]
            values[f"lo{j}"] = fine_rom[t[:lo_bits]]
            values[f"n{j}"] = t[T_FRAC:]
        s4 = b_stage({**values, "mask": s3["mask"]}, {"valid": s3["valid"], "last": s3["last"]}, 4)
        # b5: product of the two table entries.
        s5 = b_stage({**{f"f{j}": s4[f"hi{j}"] * s4[f"lo{j}"] for j in range(lanes)},
                    **{f"n{j}": s4[f"n{j}"] for j in range(lanes)}, "mask": s4["mask"]},
                   {"valid": s4["valid"], "last": s4["last"]}, 5)
        # b6: e = round(round(f / 2**(2P - W)) / 2**n), 0 if masked. The
        # rounding shift is written narrow: (((mant << 1) >> n) + 1) >> 1 is
        # (mant + 2**(n-1)) >> n for every n (0 included); mant <= 2**W (f <=
        # 2**2P), so it is 0 for n >= W + 2 (the golden model's "tiny") and
        # at most 2**W: e fits W + 1 bits.
        drop = 2 * cfg.table_frac - cfg.exp_frac
        values = {}
        for j in range(lanes):
            mant = Signal(e_shape, name=f"mant{j}")
            m.d.comb += mant.eq((s5[f"f{j}"] + (1 << (drop - 1)))[drop:])
            shifted = Signal(e_shape.width + 2, name=f"eshift{j}")
            m.d.comb += shifted.eq((Cat(Const(0, 1), mant) >> s5[f"n{j}"]) + 1)
            e = shifted[1:]
            if cfg.mask:        # (without a mask input the mask bits are constant 0)
                e = Mux(s5["mask"][j], 0, e)
            values[f"e{j}"] = e[:e_shape.width]
        s6 = b_stage(values, {"valid": s5["valid"], "last": s5["last"]}, 6)
        # b7: e leaves to the queue; the row sum goes to the divider.
        lane_sum = Signal((lanes << cfg.exp_frac).bit_length())     # each e <= 2**exp_frac
        m.d.comb += lane_sum.eq(sum(s6[f"e{j}"] for j in range(lanes)))
        s7 = b_stage({**{f"e{j}": s6[f"e{j}"] for j in range(lanes)}, "lane_sum": lane_sum},
                   {"valid": s6["valid"], "last": s6["last"]}, 7)
        acc = Signal(cfg.sum_width)
        row_sum = Signal(cfg.sum_width)
        credits = Signal(range(cfg.recip_depth + 1), init=cfg.recip_depth)
        push = Signal()
        m.d.comb += [
            row_sum.eq(acc + s7["lane_sum"]),
            adv_b.eq(~s7["valid"] | (eq_.i.ready & (~s7["last"] | (credits != 0)))),
            push.eq(s7["valid"] & adv_b),
            eq_.i.valid.eq(push),
            eq_.i.payload.eq(Cat(*[s7[f"e{j}"] for j in range(lanes)], s7["last"])),
        ]
        with m.If(push):
            m.d.sync += acc.eq(Mux(s7["last"], 0, row_sum))
        div_valid = Signal()
        div_sum = Signal(cfg.sum_width)
        m.d.sync += div_valid.eq(push & s7["last"])
        with m.If(push & s7["last"]):
            m.d.sync += div_sum.eq(row_sum)

        # ---- Divider: r = floor(2**K / sum), free running, one row per cycle.
        recip_valid, recip = self._divider(m, div_valid, div_sum)
        m.d.comb += [rq.i.valid.eq(recip_valid), rq.i.payload.eq(recip)]

        # ---- Pass C: normalize (a stallable pipeline).
        y = self.y
        e_head = eq_.o.payload
        adv_c = Signal()
        c_pop = Signal()
        m.d.comb += [
            adv_c.eq(~y.valid | y.ready),
            c_pop.eq(adv_c & eq_.o.valid & rq.o.valid),
            eq_.o.ready.eq(c_pop),
            rq.o.ready.eq(c_pop & e_head.last),
        ]
        m.d.sync += credits.eq(credits - (push & s7["last"]) + (c_pop & e_head.last))
        products = [Signal(e_shape.width + cfg.recip_width, name=f"c1_p{j}", reset_less=True)
                    for j in range(lanes)]
        c1_valid, c1_last = Signal(), Signal()
        out_shift = cfg.recip_shift - cfg.out_q.frac_bits
        with m.If(adv_c):
            m.d.sync += [products[j].eq(e_head.data[j] * rq.o.payload) for j in range(lanes)]
            m.d.sync += [c1_valid.eq(c_pop), c1_last.eq(e_head.last)]
            m.d.sync += [y.payload.data[j].eq(requantize(products[j], 1, out_shift, cfg.out_shape))
                         for j in range(lanes)]
            m.d.sync += [y.valid.eq(c1_valid), y.payload.last.eq(c1_last)]
        return m

    def _divider(self, m, valid_in, sum_in):
        """Restoring division of ``2**K`` by ``sum_in``, ``DIV_BITS_PER_STAGE``
        quotient bits per registered stage. Returns ``(valid, quotient)``."""
        cfg = self.config
        # A row's sum is 0 (every element masked) or at least 2**exp_frac
        # (its max has e = 2**exp_frac), so the remainder, below the
        # divisor, fits the sum's width. (A sum of 0 gives a quotient of all
        # ones whatever the remainder: ge is always true.)
        rem_width = cfg.sum_width
        # 2**K >> recip_width = 2**(exp_frac - 1) < sum: the quotient fits.
        rem = 1 << (cfg.exp_frac - 1)
        quotient = Const(0, 0)
        valid, divisor = valid_in, sum_in
        bit = cfg.recip_width
        for k in range(cfg.div_stages):
            for _ in range(min(DIV_BITS_PER_STAGE, bit)):
                bit -= 1
                if isinstance(rem, int):        # the first step: a constant, no wire
                    doubled = Const(rem << 1, rem_width + 1)
                else:
                    doubled = Signal(rem_width + 1, name=f"div{k}_dbl{bit}")
                    m.d.comb += doubled.eq(rem << 1)
                ge = Signal(name=f"div{k}_ge{bit}")
                nxt = Signal(rem_width, name=f"div{k}_rem{bit}")
                m.d.comb += [ge.eq(doubled >= divisor),
                             nxt.eq(Mux(ge, (doubled - divisor)[:rem_width], doubled[:rem_width]))]
                rem, quotient = nxt, Cat(ge, quotient)
            r_rem = Signal(rem_width, name=f"div{k}_r", reset_less=True)
            r_q = Signal(len(quotient), name=f"div{k}_q", reset_less=True)
            r_d = Signal(cfg.sum_width, name=f"div{k}_d", reset_less=True)
            r_v = Signal(name=f"div{k}_valid")
            m.d.sync += [r_rem.eq(rem), r_q.eq(quotient), r_d.eq(divisor), r_v.eq(valid)]
            rem, quotient, divisor, valid = r_rem, r_q, r_d, r_v
        return valid, quotient
