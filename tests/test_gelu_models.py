"""GELU models: scale ratios, the golden model's error against float GELU,
and the cycle model."""

import numpy as np
import pytest

from bertforge.rtl.gelu import GeluConfig
from bertforge.sim.gelu_cycles import gelu_cycles
from bertforge.sim.fixed_golden import ratio_to_mult_shift
from bertforge.sim.gelu_golden import gelu_float, gelu_golden, gelu_internal

from helpers import GELU_DEFAULT as DEFAULT
from helpers import GELU_WIDE as WIDE


def test_ratio_to_mult_shift():
    assert ratio_to_mult_shift(64.0) == (64, 0)
    assert ratio_to_mult_shift(2.0 ** -10) == (1, 10)
    mult, shift = ratio_to_mult_shift(0.037)
    assert mult < 1 << 16 and abs(mult / 2 ** shift / 0.037 - 1) < 2 ** -15
    with pytest.raises(ValueError, match=r"^scale ratio must be a positive finite number, not 0\.0$"):
        ratio_to_mult_shift(0.0)


def test_golden_error_bound_every_q8_10_input():
    """Before the output rounding the table is within 0.0018 of GELU for
    every Q8.10 input in [-8, 8] (and the saturated tails)."""
    config = GeluConfig(in_width=32, in_mult=1)
    raw = np.arange(-130 * 1024, 130 * 1024)
    x, y = gelu_internal(config, raw)
    err = np.abs(y / 2 ** 14 - gelu_float(x / 1024))
    assert err.max() <= 0.0018
    assert np.array_equal(x, np.clip(raw, -(1 << 17), (1 << 17) - 1))


def test_golden_end_to_end_error():
    """int16 output: within 0.02 of float GELU over [-8, 8]; int8 output
    (LSB 1/16): within 0.0018 + half an LSB."""
    raw = np.arange(-8 * 1024, 8 * 1024 + 1)
    err = np.abs(gelu_golden(WIDE, raw) * WIDE.out_scale - gelu_float(raw * WIDE.in_scale))
    assert err.max() <= 0.02 and err.max() <= 0.0018 + WIDE.out_scale / 2
    raw8 = np.arange(-128, 128)
    err8 = np.abs(gelu_golden(DEFAULT, raw8) * DEFAULT.out_scale - gelu_float(raw8 / 16))
    assert err8.max() <= 0.0018 + DEFAULT.out_scale / 2


def test_cycle_model():
    assert gelu_cycles(DEFAULT, 1) == 7
    assert gelu_cycles(DEFAULT, 100) == 106
    with pytest.raises(ValueError):
        gelu_cycles(DEFAULT, 0)
