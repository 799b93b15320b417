"""PE arithmetic: one small class per number format.

A processing element asks its arithmetic object for the operand, product and
accumulator shapes, for a product and for one accumulation step. A new number
format is one new class with the same four members.
"""

from amaranth.hdl import ClockSignal, Instance, Mux, Signal, signed

from .stream import clamp, register, tree

__all__ = ["SaturatingIntArith", "MULTIPLIER_CELLS"]

#: How a DSP multiply is built: ``"inferred"`` (``*``, synthesis picks the
#: cell) or ``"ecp5"`` (an ECP5 ``MULT18X18D`` instance with its own input and
#: output registers, which yosys does not pack from fabric registers).
MULTIPLIER_CELLS = ("inferred", "ecp5")


class SaturatingIntArith:
    """Signed integer operands, exact products, saturating accumulation.

    ``multiply(a, b)`` is exact (a DSP ``*``, or with ``logic_multiplier`` a
    sum of partial products that synthesis keeps out of DSP blocks).
    ``accumulate(m, acc, p)`` is ``clamp(acc + p)`` to ``signed(acc_width)``, the
    overflow rule the golden model (:func:`bertforge.sim.systolic_golden.saturating_matmul`)
    reproduces step by step.
    """

    def __init__(self, width, acc_width, *, logic_multiplier=False, multiply_stages=1,
                 cell="inferred"):
        self.width = width
        self.acc_width = acc_width
        self.logic_multiplier = logic_multiplier
        self.multiply_stages = multiply_stages
        self.cell = cell
        self.operand_shape = signed(width)
        self.product_shape = signed(2 * width)
        self.acc_shape = signed(acc_width)

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
            self._mult18x18d(m, a, b, out, name)
        else:
            a_reg = Signal.like(a, name=f"{name}_mul_a", reset_less=True)
            b_reg = Signal.like(b, name=f"{name}_mul_b", reset_less=True)
            m.d.sync += [a_reg.eq(a), b_reg.eq(b), out.eq(a_reg * b_reg)]
        return product

    def _mult18x18d(self, m, a, b, product, name):
        """``product`` = ``a * b`` two cycles later, in an ECP5 ``MULT18X18D``
        with registered inputs and output (signed 18 x 18 -> 36 bits)."""
        a18 = Signal(signed(18), name=f"{name}_mul_a")
        b18 = Signal(signed(18), name=f"{name}_mul_b")
        p36 = Signal(36, name=f"{name}_mul_p")
        m.d.comb += [a18.eq(a), b18.eq(b), product.eq(p36[:2 * self.width])]
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

    def accumulate(self, m, acc, product):
        """``clamp(acc + product)``; adds the sum's signal to module ``m``."""
        total = Signal(signed(self.acc_width + 1))
        m.d.comb += total.eq(acc + product)
        return clamp(total, self.acc_width)
