"""PE arithmetic: one small class per number format.

A processing element asks its arithmetic object for the operand, product and
accumulator shapes, for a product and for one accumulation step. A new number
format is one new class with the same members (``operand_shape``,
``product_shape``, ``acc_shape``, ``multiply_stages``,
``registered_product`` and ``accumulate``):

- :class:`SaturatingIntArith`: signed integers, saturating sums;
- :class:`Bf16Arith`: bfloat16 operands, IEEE binary32 sums.
"""

from amaranth.hdl import C, Cat, ClockSignal, Instance, Mux, Signal, signed, unsigned
from amaranth.lib import data

from .stream import clamp, delay, register, tree

__all__ = ["SaturatingIntArith", "exact_sum_width", "Bf16Arith", "MULTIPLIER_CELLS", "FP32_NAN",
           "FP32_NEG_ZERO", "BF16_NEG_ZERO"]

#: How a DSP multiply is built: ``"inferred"`` (``*``, synthesis picks the
#: cell) or ``"ecp5"`` (an ECP5 ``MULT18X18D`` instance with its own input and
#: output registers, which yosys does not pack from fabric registers).
MULTIPLIER_CELLS = ("inferred", "ecp5")


def mult18x18d(m, a, b, product, name):
    """``product`` = ``a * b`` two cycles later, in an ECP5 ``MULT18X18D``
    with registered inputs and output (signed 18 x 18 -> 36 bits; ``a`` and
    ``b`` are sign-extended, ``product`` takes the low bits)."""
    a18 = Signal(signed(18), name=f"{name}_mul_a")
    b18 = Signal(signed(18), name=f"{name}_mul_b")
    p36 = Signal(36, name=f"{name}_mul_p")
    m.d.comb += [a18.eq(a), b18.eq(b), product.eq(p36[:len(product)])]
    registers = {}
    for reg in ("INPUTA", "INPUTB", "OUTPUT"):
        registers.update({f"p_REG_{reg}_CLK": "CLK0", f"p_REG_{reg}_CE": "CE0",
                          f"p_REG_{reg}_RST": "RST0"})
    m.submodules[f"{name}_mult"] = Instance(
        "MULT18X18D", **registers, p_GSR="DISABLED", p_RESETMODE="SYNC",
        i_CLK0=ClockSignal(), i_CE0=1, i_RST0=0, i_SIGNEDA=1, i_SIGNEDB=1,
        i_SOURCEA=0, i_SOURCEB=0,
        **{f"i_A{k}": a18[k] for k in range(18)},
        **{f"i_B{k}": b18[k] for k in range(18)},
        **{f"i_C{k}": 0 for k in range(18)},
        **{f"o_P{k}": p36[k] for k in range(36)})


def exact_sum_width(width, terms):
    """Bits of a signed sum of ``terms`` products of two signed ``width``-bit
    numbers: the largest, ``terms * 2**(2*width - 2)`` (every product
    ``(-2**(width-1))**2``), needs them; the most negative needs no more."""
    return (terms << (2 * width - 2)).bit_length() + 1


class SaturatingIntArith:
    """Signed integer operands, exact products, saturating accumulation.

    ``multiply(a, b)`` is exact (a DSP ``*``, or with ``logic_multiplier`` a
    sum of partial products that synthesis keeps out of DSP blocks).
    ``accumulate(m, acc, p)`` is ``clamp(acc + p)`` to ``signed(acc_width)``, the
    overflow rule the golden model (:func:`bertforge.sim.systolic_golden.saturating_matmul`)
    reproduces step by step.

    ``terms``: no sum has more than this many products (the caller's
    promise). If such sums fit in ``acc_width`` bits (:func:`exact_sum_width`),
    they cannot overflow: ``acc_shape`` is then just as wide as they need
    and ``accumulate`` adds without saturating (the same results, without
    the saturation's logic and the unused bits' adder and registers).
    """

    def __init__(self, width, acc_width, *, logic_multiplier=False, multiply_stages=1,
                 cell="inferred", terms=None):
        self.width = width
        self.acc_width = acc_width
        self.logic_multiplier = logic_multiplier
        self.multiply_stages = multiply_stages
        self.cell = cell
        self.operand_shape = signed(width)
        self.product_shape = signed(2 * width)
        exact = None if terms is None else exact_sum_width(width, terms)
        #: Whether sums cannot overflow (``terms`` products fit): no saturation.
        self.exact = exact is not None and exact <= acc_width
        self.acc_shape = signed(exact if self.exact else acc_width)

    def multiply(self, a, b):
        """``a * b``; with ``logic_multiplier`` as a sum of partial products,
        which synthesis keeps in logic instead of a DSP block."""
        if not self.logic_multiplier:
            return a * b
        # a balanced adder tree: log2(width) adders deep
        return tree(self._partial_products(a, b))[:2 * self.width].as_signed()

    def _partial_products(self, a, b):
        top = self.width - 1
        return [Mux(b[i], a, 0) << i for i in range(top)] + [-(Mux(b[top], a, 0) << top)]

    def registered_product(self, m, a, b, name):
        """``a * b`` in a new signal ``<name>_product``, ``multiply_stages``
        cycles after ``a`` and ``b`` (added to module ``m``).

        1 stage: a product register. 2 stages: the operands are registered
        too, as DSP blocks' input and output registers are (``cell="ecp5"``
        instantiates them in a ``MULT18X18D``); a logic multiplier instead
        registers the first level of its adder tree. 3 stages: as 2, plus a
        fabric register after the multiplier, so that the route from a DSP
        block to the PE's adder has a cycle of its own."""
        stages = self.multiply_stages
        product = Signal(self.product_shape, name=f"{name}_product", reset_less=True)
        out = product
        if stages == 3:
            out = Signal(self.product_shape, name=f"{name}_mul_out", reset_less=True)
            m.d.sync += product.eq(out)
        if stages == 1:
            m.d.sync += out.eq(self.multiply(a, b))
        elif self.logic_multiplier:
            terms = self._partial_products(a, b)
            halfway = []      # the tree's first level, registered
            for n in range(0, len(terms), 2):
                reg = register(signed(2 * self.width), f"{name}_pp{n // 2}")
                m.d.sync += reg.eq(tree(terms[n:n + 2]))
                halfway.append(reg)
            m.d.sync += out.eq(tree(halfway)[:2 * self.width].as_signed())
        elif self.cell == "ecp5":
            mult18x18d(m, a, b, out, name)
        else:
            a_reg = Signal.like(a, name=f"{name}_mul_a", reset_less=True)
            b_reg = Signal.like(b, name=f"{name}_mul_b", reset_less=True)
            m.d.sync += [a_reg.eq(a), b_reg.eq(b), out.eq(a_reg * b_reg)]
        return product

    def accumulate(self, m, acc, product):
        """``clamp(acc + product)``, with the sum's signal added to module
        ``m``; just ``acc + product`` when sums are :attr:`exact`."""
        if self.exact:
            return (acc + product)[:self.acc_shape.width].as_signed()
        total = Signal(signed(self.acc_width + 1))
        m.d.comb += total.eq(acc + product)
        return clamp(total, self.acc_width)


#: The one NaN a :class:`Bf16Arith` sum produces (binary32 quiet NaN, sign 0).
FP32_NAN = 0x7FC0_0000
#: binary32 -0: ``x + (-0)`` is ``x`` for every sum (the identity an empty
#: sum starts from where the sign of a zero must be kept).
FP32_NEG_ZERO = 0x8000_0000
#: bf16 -0: a padding weight whose products (with a +0 activation) are -0,
#: so that they leave a partial sum unchanged.
BF16_NEG_ZERO = 0x8000


def _wire(m, value, shape=1):
    """``value`` in a new combinational signal of module ``m``, so that an
    expression used twice is built once (Verilog expressions are not shared)."""
    wire = Signal(shape)
    m.d.comb += wire.eq(value)
    return wire


def _leading_zeros(m, value):
    """``(zero, count)``: whether ``value`` (a power-of-two width, at least
    2) is 0, and otherwise its leading zeros, as a tree of 2:1 multiplexers
    ``log2(width)`` deep."""
    if len(value) == 2:
        return _wire(m, ~value[1] & ~value[0]), ~value[1]
    half = len(value) // 2
    zero_hi, count_hi = _leading_zeros(m, value[half:])
    zero_lo, count_lo = _leading_zeros(m, value[:half])
    count = _wire(m, Mux(zero_hi, Cat(count_lo, 1), Cat(count_hi, 0)), len(count_hi) + 1)
    return _wire(m, zero_hi & zero_lo), count


class Bf16Arith:
    """bfloat16 operands, exact products, IEEE binary32 accumulation.

    Operands are bf16 bit patterns (sign, 8-bit exponent, 7-bit fraction),
    sums are binary32 bit patterns. One step is
    ``acc <- round(acc + a * b)``: the product is exact (an 8 x 8-bit
    significand product, kept with a 10-bit exponent, so it neither rounds,
    overflows nor underflows), and the sum is rounded once to binary32,
    round to nearest, ties to even.

    Special values (the golden model,
    :func:`bertforge.sim.systolic_golden.bf16_matmul`, does the same):

    - Subnormals are flushed, as the x86 BF16 instructions (``VDPBF16PS``)
      do: a subnormal operand counts as a zero of its sign (DAZ), and a sum
      whose rounded magnitude is below ``2**-126`` becomes a zero of its sign
      (FTZ; tininess after rounding). So accumulators are never subnormal
      (an accumulator bit pattern with exponent 0 counts as a zero too).
    - Overflow: a rounded sum of magnitude ``>= 2**128`` is an infinity of its
      sign (what round to nearest gives).
    - Zeros: ``x + (-x)`` is +0; ``(+0) + (-0)`` is +0 and ``(-0) + (-0)``
      is -0; a product of zeros has the sign ``sign(a) ^ sign(b)``. Sums
      start at +0.
    - Infinities and NaNs: ``inf * 0`` and ``inf + (-inf)`` are NaN, NaN in
      gives NaN out, ``inf`` plus anything finite is ``inf``. Every NaN
      result is the one quiet NaN :data:`FP32_NAN` (0x7FC00000): payloads
      and signs of NaNs are not propagated.

    Pipeline: the significand product takes ``multiply_stages`` cycles on
    the integer multiplier (a DSP block, or logic with
    ``logic_multiplier``; ``cell="ecp5"``: a ``MULT18X18D``), with the
    exponent sum and the special-value flags registered alongside; the
    accumulation is one cycle (one add per cycle is what an output
    stationary accumulator and a weight stationary partial-sum chain carry),
    combinational from the registered product: compare, align (with a
    sticky bit), add or subtract, normalize (leading-zero count), round,
    flush. So a bf16 PE has the integer PE's latency and the same cycle model;
    its clock is slower.

    :meth:`add` is the same adder for two binary32 operands (the GEMM
    engine's accumulator and bias add), :meth:`round_to_bf16` rounds a sum
    to bf16 for output.
    """

    def __init__(self, *, logic_multiplier=False, multiply_stages=1, cell="inferred"):
        self.multiply_stages = multiply_stages
        self.operand_shape = unsigned(16)
        self.acc_shape = unsigned(32)
        self.product_shape = data.StructLayout({
            "mant": unsigned(16), "exp": signed(10), "sign": 1, "zero": 1, "inf": 1, "nan": 1})
        # the significands' product on the integer multiplier: 9-bit signed
        # operands (8-bit significands, zero-extended) -> 16 bits
        self._significands = SaturatingIntArith(9, 18, logic_multiplier=logic_multiplier,
                                                multiply_stages=multiply_stages, cell=cell)

    @staticmethod
    def _unpack_bf16(x):
        exp, frac = x[7:15], x[:7]
        special = exp == 0xFF
        # (sign, exponent, significand, zero or subnormal, inf, nan)
        return x[15], exp, Cat(frac, 1), exp == 0, special & (frac == 0), special & (frac != 0)

    def registered_product(self, m, a, b, name):
        """The exact product of bf16 ``a`` and ``b`` in a new
        ``product_shape`` view ``<name>_product``, ``multiply_stages``
        cycles later: ``mant * 2**(exp - 141)`` (``mant`` in
        ``[2**14, 2**16)``), or the flags ``zero``, ``inf``, ``nan``."""
        sa, ea, ma, za, ia, na = self._unpack_bf16(a)
        sb, eb, mb, zb, ib, nb = self._unpack_bf16(b)
        nan = _wire(m, na | nb | (ia & zb) | (za & ib))
        inf = _wire(m, (ia | ib) & ~nan)
        zero = (za | zb) & ~nan & ~inf
        exp = Signal(signed(10), name=f"{name}_exp_sum")
        m.d.comb += exp.eq(ea + eb - 127)
        side = delay(m, Cat(exp, sa ^ sb, zero, inf, nan), self.multiply_stages, f"{name}_pside")
        mant = self._significands.registered_product(
            m, Cat(ma, C(0, 1)).as_signed(), Cat(mb, C(0, 1)).as_signed(), f"{name}_sig")
        product = Signal(self.product_shape, name=f"{name}_product")
        m.d.comb += [product.mant.eq(mant[:16]), product.exp.eq(side[:10]),
                     product.sign.eq(side[10]), product.zero.eq(side[11]),
                     product.inf.eq(side[12]), product.nan.eq(side[13])]
        return product

    def accumulate(self, m, acc, product):
        """``round(acc + product)`` as binary32 bits (combinational; its
        wires are added to module ``m``)."""
        p = product
        high = p.mant[15]
        p_exp, p_sig = Signal(signed(11)), Signal(24)
        m.d.comb += [p_exp.eq(p.exp + high),
                     p_sig.eq(Mux(high, Cat(C(0, 8), p.mant), Cat(C(0, 9), p.mant[:15])))]
        return _add(m, _binary32(m, acc), _Operand(p.sign, p_exp, p_sig, p.zero, p.inf, p.nan))

    @staticmethod
    def add(m, x, y):
        """``round(x + y)`` of two binary32 bit patterns, as binary32 bits:
        the adder of :meth:`accumulate` (same rounding, flushing, zeros and
        NaN) with a binary32 second operand. Combinational; its wires are
        added to module ``m``."""
        return _add(m, _binary32(m, x), _binary32(m, y))

    @staticmethod
    def round_to_bf16(word):
        """binary32 bits ``word`` rounded to bf16 bits, to nearest even (a
        finite value past the largest bf16 becomes an infinity; infinities and
        :data:`FP32_NAN` keep their pattern's top half). Combinational."""
        up = word[15] & (word[16] | (word[:15] != 0))
        return (word[16:32] + up)[:16]


class _Operand:
    """An operand of :func:`_add`: sign, biased exponent (``signed(11)``),
    24-bit significand ``1.xxx`` and the flags ``zero``, ``inf``, ``nan``."""

    def __init__(self, sign, exp, sig, zero, inf, nan):
        self.sign, self.exp, self.sig = sign, exp, sig
        self.zero, self.inf, self.nan = zero, inf, nan


def _binary32(m, word):
    """binary32 bits as an :class:`_Operand` (exponent 0: a zero of its sign)."""
    exp_field, frac = word[23:31], word[:23]
    exp, sig = Signal(signed(11)), Signal(24)
    m.d.comb += [exp.eq(exp_field), sig.eq(Cat(frac, 1))]
    return _Operand(word[31], exp, sig, _wire(m, exp_field == 0),
                    _wire(m, (exp_field == 0xFF) & (frac == 0)),
                    _wire(m, (exp_field == 0xFF) & (frac != 0)))


def _add(m, a, p):
    """``round(a + p)`` of two :class:`_Operand` values as binary32 bits, the
    rules of :class:`Bf16Arith` (combinational: compare, align with a sticky
    bit, add or subtract, normalize, round to nearest even, flush)."""
    a_sign, a_exp, a_sig, a_zero, a_inf, a_nan = a.sign, a.exp, a.sig, a.zero, a.inf, a.nan
    p_exp, p_sig = p.exp, p.sig
    # the larger magnitude is "big"; a zero is never big
    a_big = _wire(m, p.zero | (~a_zero & ((a_exp > p_exp) | ((a_exp == p_exp) & (a_sig >= p_sig)))))
    big_exp, small_exp = Signal(signed(11)), Signal(signed(11))
    big_sig, small_sig = Signal(24), Signal(24)
    sign = Signal()
    m.d.comb += [big_exp.eq(Mux(a_big, a_exp, p_exp)), small_exp.eq(Mux(a_big, p_exp, a_exp)),
                 big_sig.eq(Mux(a_big, a_sig, p_sig)),
                 small_sig.eq(Mux(Mux(a_big, p.zero, a_zero), 0, Mux(a_big, p_sig, a_sig))),
                 sign.eq(Mux(a_big, a_sign, p.sign))]
    # align: the small significand (3 guard bits) shifted right; the bits
    # shifted out are not all zero (sticky) when more than its trailing
    # zeros go, counted on the significand reversed
    distance = Signal(11)
    shift = Signal(5)
    m.d.comb += [distance.eq(big_exp - small_exp),
                 shift.eq(Mux(distance > 27, 27, distance[:5]))]
    small_none, trailing = _leading_zeros(m, Cat(C(0, 8), *reversed(list(small_sig))))
    sticky = ~small_none & (shift > trailing + 3)
    aligned = Signal(27)
    m.d.comb += aligned.eq((Cat(C(0, 3), small_sig) >> shift) | sticky)
    # add, or subtract (big >= small, so never negative), on one adder
    subtract = _wire(m, a_sign ^ p.sign)
    total = Signal(28)
    m.d.comb += total.eq(Cat(C(0, 3), big_sig) + (aligned ^ subtract.replicate(27)) + subtract)
    # normalize: a carry shifts right by one, cancellation left by the
    # leading zeros
    carry = _wire(m, total[27] & ~subtract)
    zero_total, lz = _leading_zeros(m, Cat(C(0, 5), total[:27]))
    norm = Signal(27)
    norm_exp = Signal(signed(12))
    m.d.comb += [
        norm.eq(Mux(carry, Cat(total[0] | total[1], total[2:27], 1), (total[:27] << lz)[:27])),
        norm_exp.eq(Mux(carry, big_exp + 1, big_exp - lz)),
    ]
    # round to nearest, ties to even
    round_up = _wire(m, norm[2] & (norm[1] | norm[0] | norm[3]))
    rounded = Signal(25)
    m.d.comb += rounded.eq(norm[3:27] + round_up)
    exp = Signal(signed(12))
    m.d.comb += exp.eq(norm_exp + rounded[24])
    # the result's fields: NaN, infinity (in, or overflow), zero (both
    # zeros, cancellation or flushed) or the rounded sum
    nan = _wire(m, a_nan | p.nan | (a_inf & p.inf & subtract))
    both_zero = _wire(m, a_zero & p.zero)
    cancelled = _wire(m, zero_total & ~carry)
    special = _wire(m, a_inf | p.inf | both_zero)
    inf = _wire(m, a_inf | p.inf | (~special & ~cancelled & (exp >= 0xFF)))
    zero = _wire(m, both_zero | (~special & (cancelled | (exp <= 0))))
    result = Signal(32)
    m.d.comb += [
        result[:23].eq(Mux(nan, FP32_NAN & 0x7FFFFF,
                           Mux(inf | zero | rounded[24], 0, rounded[:23]))),
        result[23:31].eq(Mux(nan | inf, 0xFF, Mux(zero, 0, exp[:8]))),
        result[31].eq(~nan & Mux(a_inf, a_sign, Mux(p.inf, p.sign,
                                 Mux(both_zero, a_sign & p.sign, ~cancelled & sign)))),
    ]
    return result
