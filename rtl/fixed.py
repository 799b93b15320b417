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

from amaranth.hdl import Const, Mux, Shape, signed, unsigned

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


def requantize(value, multiplier, shift, out_shape):
    """Expression for ``clamp((value * multiplier + round) >> shift)`` in
    ``out_shape`` (a signed or unsigned shape), with ``round = 2**(shift-1)``
    (0 when ``shift`` is 0). ``multiplier`` and ``shift`` may be run-time
    values (``shift`` unsigned) or ints.

    Purely combinational: callers register the result (and may register the
    product first) to meet timing.
    """
    product = value * multiplier
    if isinstance(shift, int):
        rounding = (1 << shift) >> 1
    else:
        rounding = (Const(1, len(product) + 1) << shift) >> 1
    shifted = (product + rounding) >> shift
    out_shape = Shape.cast(out_shape)
    lo = -(1 << (out_shape.width - 1)) if out_shape.signed else 0
    hi = (1 << (out_shape.width - 1)) - 1 if out_shape.signed else (1 << out_shape.width) - 1
    return Mux(shifted > hi, hi, Mux(shifted < lo, lo, shifted))[:out_shape.width]
