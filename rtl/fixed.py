"""Number formats shared by rtl, golden and cycle models.

``Q(int_bits, frac_bits)`` names a fixed-point format; for signed formats
``int_bits`` counts the sign bit, so ``Q(1, 15)`` is the usual Q1.15 (16
bits, range [-1, 1)). A raw integer ``r`` stands for ``r / 2**frac_bits``.

``requantize`` is the one rescaling rule of every block that narrows a wide
integer (the GEMM engine's int32 -> int8 output, softmax input scale, butterfly
stages): ``clamp((x * multiplier + 2**(shift-1)) >> shift)``, i.e. multiply,
round to nearest with ties toward +infinity, saturate. Its numpy twin is
:func:`bertforge.sim.fixed_golden.requantize`.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Mux, Shape, Value, signed, unsigned

from .params import check_int
from bertforge.rtl.errors import ParameterError

__all__ = ["Q", "requantize"]


@dataclass(frozen=True)
class Q:
    """A fixed-point format: ``int_bits`` (sign included when ``signed``) +
    ``frac_bits``."""

    int_bits: int
    frac_bits: int
    signed: bool = True

    def __post_init__(self):
        check_int("int_bits", self.int_bits, minimum=0)
        check_int("frac_bits", self.frac_bits, minimum=0)
        if self.width < 1:
            raise ParameterError("a Q format needs at least 1 bit")

    @property
    def width(self):
        return self.int_bits + self.frac_bits

    @property
    def shape(self):
        return signed(self.width) if self.signed else unsigned(self.width)

    @property
    def min_raw(self):
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def max_raw(self):
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1

    @property
    def scale(self):
        """Real value of one LSB."""
        return 2.0 ** -self.frac_bits

    def __str__(self):
        return f"{'' if self.signed else 'U'}Q{self.int_bits}.{self.frac_bits}"


def _range(operand):
    """``(lo, hi)`` of an int or of an Amaranth value's shape."""
    if isinstance(operand, int):
        return operand, operand
    shape = Value.cast(operand).shape()
    if shape.signed:
        return -(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1
    return 0, (1 << shape.width) - 1


def _drop_low(value, bits):
    """``value >> bits`` for a constant ``bits``, as a slice (yosys writes a
    constant shift at the operand's width, padded with constant bits)."""
    value = Value.cast(value)
    if bits == 0 or bits >= len(value):
        return value >> bits
    high = value[bits:]
    return high.as_signed() if value.shape().signed else high


def requantize(value, multiplier, shift, out_shape, *, value_range=None, result_range=None):
    """Expression for ``clamp((value * multiplier + round) >> shift)`` in
    ``out_shape`` (a signed or unsigned shape), with ``round = 2**(shift-1)``
    (0 when ``shift`` is 0). ``multiplier`` and ``shift`` may be run-time
    values (``shift`` unsigned) or ints.

    A run-time shift rounds as ``(((p << 1) >> shift) + 1) >> 1``, equal to
    ``(p + 2**(shift-1)) >> shift`` for every shift (0 included) and no
    wider than ``p`` plus two bits (the form with ``1 << shift`` is as wide
    as the largest shift allows: 114 bits for a 48-bit product and a 6-bit
    shift).

    A clamp is emitted only where the result can leave ``out_shape``: from
    the range of ``value`` (its shape's, or ``value_range = (lo, hi)`` when
    the caller has a tighter bound), of ``multiplier`` (an int, or its
    shape's) and of ``shift`` (a run-time shift may be 0), decided at
    elaboration; the rounded result lies between the product's extremes
    rounded at the smallest shift (rounding to nearest moves a value toward
    0, never past it). ``result_range = (lo, hi)`` is the caller's bound on
    the rounded result itself, where the value's range does not show it (a
    run-time shift that grows with the value).

    Purely combinational: callers register the result (and may register the
    product first) to meet timing.
    """
    product = value if isinstance(multiplier, int) and multiplier == 1 else value * multiplier
    value_lo, value_hi = _range(value) if value_range is None else value_range
    mult_lo, mult_hi = _range(multiplier)
    corners = [a * b for a in (value_lo, value_hi) for b in (mult_lo, mult_hi)]
    low_shift = shift if isinstance(shift, int) else 0
    if isinstance(shift, int):
        shifted = _drop_low((product + ((1 << shift) >> 1)) if shift else product, shift)
    else:
        shifted = _drop_low(((product << 1) >> shift) + 1, 1)
    result_lo, result_hi = ((c + ((1 << low_shift) >> 1)) >> low_shift
                            for c in (min(corners), max(corners)))
    if result_range is not None:
        result_lo, result_hi = max(result_lo, result_range[0]), min(result_hi, result_range[1])
    out_shape = Shape.cast(out_shape)
    lo = -(1 << (out_shape.width - 1)) if out_shape.signed else 0
    hi = (1 << (out_shape.width - 1)) - 1 if out_shape.signed else (1 << out_shape.width) - 1
    shifted = Value.cast(shifted)
    width = out_shape.width
    pad = width - len(shifted)
    if pad > 0:         # a narrow value in a wide result: extend it
        result = Cat(shifted, (shifted[-1] if shifted.shape().signed else Const(0, 1)).replicate(pad))
    else:               # in range, the value is its low bits: the muxes are `width` bits wide
        result = shifted[:width]
    if result_lo < lo:
        result = Mux(shifted < lo, Const(lo & ((1 << width) - 1), width), result)
    if result_hi > hi:
        result = Mux(shifted > hi, Const(hi, width), result)
    return result
