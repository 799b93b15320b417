"""``rtl.fixed.requantize`` in amaranth.sim against the golden rule
(``sim.fixed_golden.requantize``) on every input of small shapes: the
narrow rounding of a run-time shift (every shift, 0 included) and the
clamps it leaves out where the operands' ranges cannot reach them."""

import itertools

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from bertforge.rtl.fixed import requantize
from bertforge.sim import fixed_golden


def _run(value_shape, mult, shift, out_shape, value_range=None, result_range=None):
    """Every (value, multiplier, shift) of the shapes: (got, want) pairs."""
    m = Module()
    value = Signal(value_shape)
    multiplier = mult if isinstance(mult, int) else Signal(mult)
    amount = shift if isinstance(shift, int) else Signal(shift)
    out = Signal(out_shape)
    m.d.comb += out.eq(requantize(value, multiplier, amount, out_shape, value_range=value_range,
                                  result_range=result_range))

    def values(operand):
        if isinstance(operand, int):
            return [operand]
        shape = operand.shape()
        lo = -(1 << (shape.width - 1)) if shape.signed else 0
        return range(lo, lo + (1 << shape.width))

    lo, hi = value_range or (values(value)[0], values(value)[-1])
    pairs = []

    async def bench(ctx):
        for v, k, s in itertools.product(range(lo, hi + 1), values(multiplier), values(amount)):
            ctx.set(value, v)
            if not isinstance(multiplier, int):
                ctx.set(multiplier, k)
            if not isinstance(amount, int):
                ctx.set(amount, s)
            want = fixed_golden.requantize(v, k, s, out_shape.width, out_shape.signed)
            pairs.append((ctx.get(out), int(want)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return pairs, rtlil.convert(m, ports=[value, out] + [x for x in (multiplier, amount)
                                                         if not isinstance(x, int)])


@pytest.mark.parametrize("value_shape, mult, shift, out_shape", [
    (signed(6), unsigned(2), unsigned(3), signed(3)),      # both clamps, every shift
    (signed(6), 3, unsigned(3), signed(4)),
    (unsigned(6), unsigned(2), unsigned(3), unsigned(4)),  # never negative: no low clamp
    (unsigned(6), 1, unsigned(3), signed(3)),
    (signed(6), unsigned(2), 2, signed(4)),                # a constant shift
    (unsigned(5), 1, 2, unsigned(3)),                      # no clamp at all: 31 rounds to 8 > 7
    (unsigned(5), 1, 3, unsigned(3)),                      # 31 rounds to 4: no clamp
    (signed(4), 1, 5, signed(2)),                          # a shift past the value's width
    (signed(4), 1, 0, signed(6)),                          # a narrow value, extended
    (unsigned(4), 1, 1, signed(6)),
    (signed(6), -3, unsigned(3), signed(4)),               # a negative constant multiplier
])
def test_requantize_matches_the_golden_rule_on_every_input(value_shape, mult, shift, out_shape):
    pairs, _ = _run(value_shape, mult, shift, out_shape)
    assert pairs and all(got == want for got, want in pairs)


def test_requantize_leaves_out_the_clamps_the_ranges_exclude():
    """The run-time shift is no wider than the product (no ``1 << shift``
    of 2**6 bits), and a clamp appears only when a value can reach it."""
    _, both = _run(signed(6), unsigned(2), unsigned(3), signed(3))
    _, high = _run(unsigned(6), unsigned(2), unsigned(3), unsigned(4))
    _, none = _run(unsigned(5), 1, 3, unsigned(3))
    # a caller's bound (0..20 of 6 bits): at most 20 at shift 0, inside 5 bits
    pairs, bounded = _run(unsigned(6), 1, unsigned(3), unsigned(5), value_range=(0, 20))
    assert all(got == want for got, want in pairs)
    # a caller's bound on the result itself (LayerNorm's z): 0..6 in 3 bits,
    # the result's low bits wherever the bound holds
    pairs, result = _run(unsigned(5), 1, unsigned(3), unsigned(3), result_range=(0, 6))
    assert all(got == want for got, want in pairs if want <= 6)
    assert any(got != want for got, want in pairs)          # and only there
    compares = [{cell for cell in ("$lt", "$gt") if f"cell {cell} " in text}
                for text in (both, high, none, bounded, result)]
    assert compares == [{"$lt", "$gt"}, {"$gt"}, set(), set(), set()]
    # the shift amount drives right shifts only (the old form had 1 << shift)
    cells = [block.split()[0] for block in both.split("cell ")[1:] if "\\amount" in block.split("end")[0]]
    assert cells and set(cells) <= {"$shr", "$sshr"}
