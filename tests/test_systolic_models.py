"""Golden and cycle models of the systolic array, and the saturating
arithmetic checked in amaranth.sim against the golden rule."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from bertforge.rtl.arith import SaturatingIntArith
from bertforge.rtl.systolic import QUEUE_LATENCY, SystolicConfig
from bertforge.sim.systolic_cycles import systolic_cycles, systolic_tile_period
from bertforge.sim.systolic_golden import saturating_matmul, systolic_golden


def test_golden_is_plain_matmul_without_overflow():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (5, 300))
    b = rng.integers(-128, 128, (300, 7))
    assert np.array_equal(saturating_matmul(a, b, 32), a @ b)


def test_golden_saturates_each_step_in_order():
    # 16-bit accumulator: 16384 + 16384 saturates to 32767, then -16384 brings it down.
    a = np.array([[-128, -128, -128]])
    b = np.array([[-128], [-128], [128 - 256]])  # products 16384, 16384, 16384
    assert saturating_matmul(a, b, 16)[0, 0] == 32767
    b = np.array([[-128], [-128], [127]])       # products 16384, 16384, -16256
    assert saturating_matmul(a, b, 16)[0, 0] == 32767 - 16256
    b = np.array([[127], [127], [127]])         # products -16256 x 3 saturate low
    assert saturating_matmul(a, b, 16)[0, 0] == -32768


def test_golden_int16_extremes_saturate_at_32_bits():
    a = np.full((2, 4), -32768)
    b = np.full((4, 3), -32768)
    assert np.all(saturating_matmul(a, b, 32) == 2**31 - 1)
    assert np.all(systolic_golden(SystolicConfig(width=16, acc_width=48), a, b) == 4 * 2**30)


def test_golden_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"^cannot multiply shapes \(2, 3\) and \(4, 5\)$"):
        saturating_matmul(np.zeros((2, 3)), np.zeros((4, 5)), 32)


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_cycle_model_streams_tiles_without_bubbles(dataflow):
    config = SystolicConfig(rows=16, cols=16, dataflow=dataflow)
    one = systolic_cycles(config, [768])
    sixteen = systolic_cycles(config, [768] * 16)
    assert sixteen - one == 15 * 768
    assert 16 * 768 / sixteen >= 0.97


def test_cycle_model_short_tiles_take_rows_cycles():
    config = SystolicConfig(rows=8, cols=4)
    assert systolic_tile_period(config, 3) == 8
    assert systolic_cycles(config, [3, 3]) - systolic_cycles(config, [3]) == 8
    ws1 = SystolicConfig(rows=1, cols=3, dataflow="ws")
    assert systolic_tile_period(ws1, 1) == 2


def test_cycle_model_formulas():
    os_config = SystolicConfig(rows=3, cols=5)
    assert systolic_cycles(os_config, [7, 2]) == 7 + 3 + 3 + 5 + 2 + QUEUE_LATENCY
    ws_config = SystolicConfig(rows=3, cols=5, dataflow="ws")
    assert systolic_cycles(ws_config, [7, 2]) == 3 + 7 + 2 + 3 + 5 + 1 + QUEUE_LATENCY
    with pytest.raises(ValueError):
        systolic_cycles(os_config, [])
    with pytest.raises(ValueError):
        systolic_cycles(os_config, [0])


@pytest.mark.parametrize("width, acc_width", [(8, 16), (16, 32)])
def test_saturating_accumulate_matches_golden_rule(width, acc_width):
    arith = SaturatingIntArith(width, acc_width)
    m = Module()
    acc = Signal(arith.acc_shape)
    product = Signal(arith.product_shape)
    out = Signal(arith.acc_shape)
    m.d.comb += out.eq(arith.accumulate(m, acc, product))
    rng = np.random.default_rng(width)
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    plo, phi = -(1 << (2 * width - 1)), (1 << (2 * width - 1)) - 1
    cases = [(hi, phi), (lo, plo), (hi, plo), (lo, phi), (0, 0), (hi - 5, 5), (hi - 5, 6)]
    cases += [(int(rng.integers(lo, hi + 1)), int(rng.integers(plo, phi + 1))) for _ in range(300)]

    async def bench(ctx):
        for a, p in cases:
            ctx.set(acc, a)
            ctx.set(product, p)
            assert ctx.get(out) == min(max(a + p, lo), hi), (a, p)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("width", [8, 16])
def test_logic_multiplier_is_exact(width):
    arith = SaturatingIntArith(width, 2 * width, logic_multiplier=True)
    m = Module()
    a, b = Signal(arith.operand_shape), Signal(arith.operand_shape)
    out = Signal(arith.product_shape)
    m.d.comb += out.eq(arith.multiply(a, b))
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    rng = np.random.default_rng(width)
    cases = [(lo, lo), (lo, hi), (hi, hi), (0, lo), (-1, -1), (1, lo)]
    cases += [tuple(int(x) for x in rng.integers(lo, hi + 1, 2)) for _ in range(300)]

    async def bench(ctx):
        for x, y in cases:
            ctx.set(a, x)
            ctx.set(b, y)
            assert ctx.get(out) == x * y, (x, y)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
