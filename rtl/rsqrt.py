"""Integer reciprocal square root: table seed + two Newton steps, pipelined.

For an integer ``D > 0`` let ``e = (bit_length(D) - 1) // 2`` so that
``4**e <= D < 4**(e+1)``, and ``m = floor(D * 2**MF / 4**e)`` the mantissa
in Q2.MF (``m / 2**MF`` in [1, 4)). Then ``1/sqrt(D) ~ R * 2**-(RF + e)``
with ``R ~ 2**RF / sqrt(m / 2**MF)`` in Q.RF:

- seed: ``y0 = SEED[(m >> (MF - 4)) - 16]`` (1/sqrt of the middle of each
  of the 48 intervals of width 1/16 in [1, 4); relative error <= 1.6%);
- two Newton steps ``y <- y (3 - m y**2) / 2``, each rounded as
  ``y2 = (y*y + 2**(RF-1)) >> RF``, ``my = (m*y2 + 2**(MF-1)) >> MF``,
  ``y = (y * (3*2**RF - my) + 2**RF) >> (RF+1)``.

Relative error of ``R`` after two steps: at most 2.16e-6 over every
``D > 0`` (:data:`RSQRT_REL_ERROR`; quadratic convergence from 1.6% gives
2e-7, the rest is rounding and the mantissa's truncation). ``D = 0`` gives
``e = 0``, ``R = 0``.

:func:`rsqrt_reference` is the integer definition (plain Python), shared by
the RTL's table and the golden model.
"""

import math

from amaranth.hdl import Array, Cat, Const, Mux, Signal, unsigned
from bertforge.rtl.errors import ParameterError
from .stream import register

__all__ = ["RSQRT_FRAC", "RSQRT_MANT", "RSQRT_STAGES", "RSQRT_SEED_BITS", "RSQRT_STEP_BITS",
           "RSQRT_REL_ERROR", "rsqrt_seed_table", "rsqrt_reference", "RsqrtPipeline"]

#: Fraction bits of the result ``R`` (Q.20, value in (0.5, 1]).
RSQRT_FRAC = 20
#: Fraction bits of the mantissa ``m`` (Q2.22).
RSQRT_MANT = 22
#: Register stages of :class:`RsqrtPipeline`: normalize, seed, 2 x 3 Newton.
RSQRT_STAGES = 8
#: Bits of the seed and of each Newton step's values (unsigned), from their
#: ranges over every mantissa in [1, 4) (``2**MF`` to ``4 * 2**MF - 1``:
#: all a ``D > 0`` can give), checked exhaustively by
#: tests/test_layernorm_models.py: seeds 526,348 to 1,032,566; step 1
#: ``y2 <= 1,016,800``, ``my <= 1,080,350``, ``t = 3*2**RF - my <=
#: 2,128,928``, ``y <= 1,048,211``; step 2 ``y2 <= 1,047,846``, ``my <=
#: 1,048,581``, ``t <= 2,097,882``, ``R <= 2**20`` (``R = 2**20`` exactly
#: when ``D`` is a power of 4). ``D = 0`` gives ``y = y2 = my = 0`` and
#: ``t = 3*2**RF`` (22 bits).
RSQRT_SEED_BITS = 20
RSQRT_STEP_BITS = ({"y2": 20, "my": 21, "t": 22, "y": 20},
                   {"y2": 20, "my": 21, "t": 22, "y": 21})
#: A bound on ``|R * 2**-(RF + e) * sqrt(D) - 1|`` over every ``D > 0``:
#: the worst over every mantissa, at both ends of the interval the
#: mantissa's truncation leaves (``D * 2**MF / 4**e`` in ``[m, m + 1)``),
#: is 2.1543e-6 (checked exhaustively by tests/test_layernorm_models.py).
RSQRT_REL_ERROR = 2.2e-6


def rsqrt_seed_table():
    """48 seeds in Q.RF for the top 6 bits of ``m``, 16 to 63 (the only
    values a ``D > 0`` gives), at ``index - 16``."""
    table = []
    for index in range(16, 64):
        # round(2**RF / sqrt((index + 0.5) / 16)) = round(sqrt(2**(2RF) * 32 / (2 index + 1)))
        twice = math.isqrt((1 << (2 * RSQRT_FRAC + 7)) // (2 * index + 1))
        table.append((twice + 1) >> 1)
    return table


def rsqrt_reference(d):
    """``(R, e)`` for the integer ``d >= 0``, bit-exact with the RTL."""
    if d < 0:
        raise ParameterError(f"d must be non-negative, not {d}")
    rf, mf = RSQRT_FRAC, RSQRT_MANT
    e = max(d.bit_length() - 1, 0) >> 1
    m = (d << mf) >> (2 * e)
    y = rsqrt_seed_table()[(m >> (mf - 4)) - 16] if d else 0
    for _ in range(2):
        y2 = (y * y + (1 << (rf - 1))) >> rf
        my = (m * y2 + (1 << (mf - 1))) >> mf
        y = (y * ((3 << rf) - my) + (1 << rf)) >> (rf + 1)
    return y, e


class RsqrtPipeline:
    """The pipelined ``(R, e)`` of :func:`rsqrt_reference` for an unsigned
    ``d`` of ``d_width`` bits; a new ``d`` every cycle, result
    :data:`RSQRT_STAGES` cycles later. Not an ``Elaboratable``: ``add_to(m)``
    adds its registers (named ``rsqrt_*``, free-running, no reset) to ``m``.

    Attributes: ``d`` (input), ``r`` (``unsigned(RF + 2)``), ``e``.
    """

    def __init__(self, d_width):
        self.d_width = d_width
        self.d = Signal(unsigned(d_width), name="rsqrt_d")
        self.e_width = max((d_width - 1) >> 1, 1).bit_length()     # e <= (d_width - 1) // 2
        self.r = Signal(unsigned(RSQRT_STEP_BITS[-1]["y"]), name="rsqrt_r")
        self.e = Signal(unsigned(self.e_width), name="rsqrt_e")

    def add_to(self, m):
        rf, mf = RSQRT_FRAC, RSQRT_MANT
        width = self.d_width

        # Stage 1: normalize (bit length -> e, mantissa m in Q2.MF).
        length = Signal(range(width + 1), name="rsqrt_length")
        for bit in range(width):
            with m.If(self.d[bit]):
                m.d.comb += length.eq(bit + 1)
        e_now = Signal(unsigned(self.e_width), name="rsqrt_e_now")
        m.d.comb += e_now.eq(Mux(length == 0, 0, (length - 1) >> 1))
        mant = register(unsigned(mf + 2), "rsqrt_m1")
        e = register(unsigned(self.e_width), "rsqrt_e1")
        m.d.sync += [mant.eq(Cat(Const(0, mf), self.d).bit_select(e_now << 1, mf + 2)), e.eq(e_now)]

        # Stage 2: seed (D = 0, the mantissa's top bits 0: y0 = 0).
        seeds = Array(Const(v, unsigned(RSQRT_SEED_BITS)) for v in rsqrt_seed_table())
        y = register(unsigned(RSQRT_SEED_BITS), "rsqrt_y0")
        mant2 = register(unsigned(mf + 2), "rsqrt_m2")
        e2 = register(unsigned(self.e_width), "rsqrt_e2")
        seed = seeds[(mant[mf - 4:mf + 2] - 16)[:6]]
        m.d.sync += [y.eq(Mux(mant[mf:mf + 2] == 0, 0, seed)), mant2.eq(mant), e2.eq(e)]
        mant, e = mant2, e2

        # Stages 3-8: two Newton steps of three registered products each.
        for step, bits in enumerate(RSQRT_STEP_BITS):
            y2 = register(unsigned(bits["y2"]), f"rsqrt_n{step}_y2")
            ya = register(unsigned(len(y)), f"rsqrt_n{step}_ya")
            ma = register(unsigned(mf + 2), f"rsqrt_n{step}_ma")
            ea = register(unsigned(self.e_width), f"rsqrt_n{step}_ea")
            m.d.sync += [y2.eq((y * y + (1 << (rf - 1)))[rf:]), ya.eq(y), ma.eq(mant), ea.eq(e)]
            my = register(unsigned(bits["my"]), f"rsqrt_n{step}_my")
            yb = register(unsigned(len(y)), f"rsqrt_n{step}_yb")
            mb = register(unsigned(mf + 2), f"rsqrt_n{step}_mb")
            eb = register(unsigned(self.e_width), f"rsqrt_n{step}_eb")
            m.d.sync += [my.eq((ma * y2 + (1 << (mf - 1)))[mf:]), yb.eq(ya), mb.eq(ma), eb.eq(ea)]
            yc = register(unsigned(bits["y"]), f"rsqrt_n{step}_yc")
            mc = register(unsigned(mf + 2), f"rsqrt_n{step}_mc")
            ec = register(unsigned(self.e_width), f"rsqrt_n{step}_ec")
            t = Signal(unsigned(bits["t"]), name=f"rsqrt_n{step}_t")
            m.d.comb += t.eq((3 << rf) - my)
            m.d.sync += [yc.eq((yb * t + (1 << rf))[rf + 1:]), mc.eq(mb), ec.eq(eb)]
            y, mant, e = yc, mc, ec
        m.d.comb += [self.r.eq(y), self.e.eq(e)]

