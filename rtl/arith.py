"""PE arithmetic: one small class per number format.

A processing element asks its arithmetic object for the operand, product and
accumulator shapes, for a product and for one accumulation step. A new number
format is one new class with the same four members.
"""

from amaranth.hdl import Mux, Signal, signed

__all__ = ["SaturatingIntArith", "saturate"]


def saturate(value, width):
    """``value`` (a signal of at most ``width + 1`` bits, signed) clamped to
    ``signed(width)``.

    Overflow shows as the two top bits differing; the sign bit then picks the
    bound.
    """
    top, sign = value[width], value[width - 1]
    bound = Mux(top, -(1 << (width - 1)), (1 << (width - 1)) - 1)
    return Mux(top ^ sign, bound, value[:width])[:width].as_signed()


class SaturatingIntArith:
    """Signed integer operands, exact products, saturating accumulation.

    ``multiply(a, b)`` is exact (a DSP ``*``, or with ``logic_multiplier`` a
    sum of partial products that synthesis keeps out of DSP blocks).
    ``accumulate(m, acc, p)`` is ``clamp(acc + p)`` to ``signed(acc_width)``, the
    overflow rule the golden model (:func:`bertforge.sim.systolic_golden.saturating_matmul`)
    reproduces step by step.
    """

    def __init__(self, width, acc_width, *, logic_multiplier=False):
        self.width = width
        self.acc_width = acc_width
        self.logic_multiplier = logic_multiplier
        self.operand_shape = signed(width)
        self.product_shape = signed(2 * width)
        self.acc_shape = signed(acc_width)

    def multiply(self, a, b):
        """``a * b``; with ``logic_multiplier`` as a sum of partial products,
        which synthesis keeps in logic instead of a DSP block."""
        if not self.logic_multiplier:
            return a * b
        top = self.width - 1
        terms = [Mux(b[i], a, 0) << i for i in range(top)] + [-(Mux(b[top], a, 0) << top)]
        while len(terms) > 1:  # a balanced adder tree: log2(width) adders deep
            pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
            terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
        return terms[0][:2 * self.width].as_signed()

    def accumulate(self, m, acc, product):
        """``clamp(acc + product)``; adds the sum's signal to module ``m``."""
        total = Signal(signed(self.acc_width + 1))
        m.d.comb += total.eq(acc + product)
        return saturate(total, self.acc_width)
