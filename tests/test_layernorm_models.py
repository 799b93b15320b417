"""LayerNorm models: the integer rsqrt reference, the golden model's accuracy
against float LayerNorm, and the cycle model."""

import math
import random

import numpy as np
import pytest

from bertforge.generators.layernorm_sim import random_layernorm_data
from bertforge.rtl.layernorm import (LN_OUT_LATENCY, LN_STATS_LATENCY, LN_Z_FRAC, LN_Z_WIDTH,
                                     LayerNormConfig, ln_acc_range, ln_z_bound)
from bertforge.rtl.rsqrt import (RSQRT_FRAC, RSQRT_MANT, RSQRT_REL_ERROR, RSQRT_SEED_BITS,
                                 RSQRT_STEP_BITS, rsqrt_reference, rsqrt_seed_table)
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.layernorm_golden import layernorm_golden, layernorm_reference_int8

from helpers import LAYERNORM_SMALL as SMALL
from helpers import LAYERNORM_WIDE as WIDE
from helpers import layernorm_bert_vectors as _bert_vectors


def test_rsqrt_reference_accuracy():
    rng = random.Random(0)
    values = list(range(1, 3000)) + [rng.getrandbits(rng.randint(1, 95)) | 1 for _ in range(5000)]
    values += [(1 << k) - 1 for k in range(1, 96)] + [1 << k for k in range(96)]
    for d in values:
        r, e = rsqrt_reference(d)
        assert abs(r * 2.0 ** -(RSQRT_FRAC + e) * math.sqrt(d) - 1) < 3e-6, d
    assert rsqrt_reference(0) == (0, 0)


def test_rsqrt_every_mantissa():
    """Every mantissa in [1, 4) (all a D > 0 gives), numpy: the seed table's
    48 intervals, each Newton value within its bits (rtl/rsqrt.py sizes the
    registers by them), and R within RSQRT_REL_ERROR of 1/sqrt at both ends
    of the interval the mantissa's truncation leaves."""
    rf, mf = RSQRT_FRAC, RSQRT_MANT
    m = np.arange(1 << mf, 4 << mf, dtype=np.int64)
    y = np.array(rsqrt_seed_table(), dtype=np.int64)[(m >> (mf - 4)) - 16]
    assert len(rsqrt_seed_table()) == 48 and int(y.max()).bit_length() == RSQRT_SEED_BITS
    for bits in RSQRT_STEP_BITS:
        y2 = (y * y + (1 << (rf - 1))) >> rf
        my = (m * y2 + (1 << (mf - 1))) >> mf
        t = (3 << rf) - my
        y = (y * t + (1 << rf)) >> (rf + 1)
        # each width is the largest value's: none is wider than needed
        assert {name: int(v.max()).bit_length() for name, v in
                (("y2", y2), ("my", my), ("t", t), ("y", y))} == bits
        assert min(y2.min(), my.min(), t.min(), y.min()) > 0
    assert y.max() == 1 << rf and y[0] == 1 << rf                 # D a power of 4
    # D in [2**22, 2**24) has e = 11 and its mantissa is D itself
    for index in np.random.default_rng(0).integers(0, m.size, 300):
        assert rsqrt_reference(int(m[index])) == (int(y[index]), 11)
    mant = m.astype(np.float64) / 2.0 ** mf
    worst = max(np.abs(y * np.sqrt(mant + k * 2.0 ** -mf) / 2.0 ** rf - 1).max() for k in (0, 1))
    assert 2e-6 < worst <= RSQRT_REL_ERROR


def test_z_bound_holds_and_is_tight():
    """ln_z_bound (no clamp on z) against the extreme of Samuelson's
    inequality, one element a off the others (|z| = sqrt(H - 1)), for every
    H to 4096 and several spreads a (D = a**2 (H - 1): mantissas across
    the rsqrt's range); the largest z within the rsqrt's error (both ways)
    and 2 LSBs of the bound, so the bound is not loose."""
    assert ln_z_bound(4096) < 1 << (LN_Z_WIDTH - 1)
    rng = np.random.default_rng(1)
    for h in range(2, 4097):
        worst = 0
        for a in [1, 2, 3, 65535] + [int(v) for v in rng.integers(1, 1 << 16, 3)]:
            d = h * a * a - a * a                     # v = [a, 0, ...]: H S2 - S1**2
            r, e = rsqrt_reference(d)
            shift = RSQRT_FRAC + e - LN_Z_FRAC
            z = ((h - 1) * a * r + (1 << (shift - 1))) >> shift
            worst = max(worst, z)
        bound = ln_z_bound(h)
        assert bound - 2 * RSQRT_REL_ERROR * bound - 2 <= worst <= bound, h


def test_output_bound_is_tight():
    """ln_acc_range (the int16 output's clamp left out): an impulse (|z| at
    its bound) with gamma and beta at their extremes reaches it within a
    few LSBs of z, both ways; tiny16.toml's unit (int16 gamma and beta
    Q3.12, shift 19) then gives +-9,152, far inside int16, while int8
    gamma and beta with int8 output (tiny.toml's) still reach its clamp."""
    wide = LayerNormConfig(lanes=4, h_max=64, param_width=16, gamma_frac=12, beta_frac=12,
                           out_width=16, out_shift=19)
    lo, hi = ln_acc_range(wide)
    impulse = np.zeros(64, np.int64)
    impulse[5] = 1000
    full = (1 << 15) - 1
    for sign in (1, -1):
        gamma, beta = np.full(64, -sign * (full + 1)), np.full(64, -full - 1)
        out = layernorm_golden(wide, sign * impulse, np.zeros(64, np.int64), gamma, beta)[5]
        assert out == -9152 == (lo + (1 << 18)) >> 19
        gamma, beta = np.full(64, sign * full), np.full(64, full)
        out = layernorm_golden(wide, sign * impulse, np.zeros(64, np.int64), gamma, beta)[5]
        assert 9150 <= out <= (hi + (1 << 18)) >> 19 == 9152
    narrow = LayerNormConfig(lanes=4, h_max=64, in_width=8)
    top = layernorm_golden(narrow, impulse // 10, np.zeros(64, np.int64), np.full(64, 127),
                           np.full(64, 127))
    assert top[5] == 127 and (ln_acc_range(narrow)[1] + (1 << 15)) >> 16 == 381


def test_golden_within_one_lsb_of_float_over_variance_range():
    """Variance log-uniform over [1e-2, 1e4] (real units), BERT-like means
    and outliers: at most 1 int8 LSB from the float reference."""
    config = LayerNormConfig(h_max=768)
    xs, rs, gamma, beta = _bert_vectors(config, 160, 768, 2)
    errors = np.concatenate([np.abs(layernorm_golden(config, x, r, gamma, beta)
                                    - layernorm_reference_int8(config, x, r, gamma, beta))
                             for x, r in zip(xs, rs)])
    assert errors.max() <= 1
    assert errors.mean() < 0.05
    for lo, hi in ((1e-2, 1.2e-2), (0.9e4, 1e4)):          # both ends of the range
        xs, rs, gamma, beta = random_layernorm_data(config, 8, 768, np.random.default_rng(3),
                                                    var_range=(lo, hi))
        for x, r in zip(xs, rs):
            ref = layernorm_reference_int8(config, x, r, gamma, beta)
            assert np.abs(layernorm_golden(config, x, r, gamma, beta) - ref).max() <= 1


def test_golden_one_fixed_input_scale_over_variance_range():
    """int32 inputs with one LSB (2**-10, an accumulator scale) for every
    vector, variance 1e-2 to 1e4 real units: within 1 LSB."""
    config = LayerNormConfig(h_max=768, in_width=32)
    rng = np.random.default_rng(12)
    gamma = np.clip(np.round(rng.normal(1, 0.3, 768) * 64), -128, 127)
    beta = np.clip(np.round(rng.normal(0, 1, 768) * 16), -128, 127)
    for var in np.logspace(-2, 4, 25):
        real = rng.normal(rng.uniform(-2, 2) * np.sqrt(var), np.sqrt(var), (2, 768))
        x, r = np.round(real * 2 ** 10).astype(np.int64)
        ref = layernorm_reference_int8(config, x, r, gamma, beta)
        assert np.abs(layernorm_golden(config, x, r, gamma, beta) - ref).max() <= 1


def test_golden_extremes_and_constant_vectors():
    rng = np.random.default_rng(4)
    config = LayerNormConfig(h_max=768)
    gamma = rng.integers(-128, 128, 768)
    beta = rng.integers(-128, 128, 768)
    lo, hi = -32768, 32767
    for value in (lo, hi, 0, 1234):                          # variance 0 gives beta
        x = np.full(768, value)
        assert np.array_equal(layernorm_golden(config, x, x, gamma, beta), beta)
    cases = [np.where(np.arange(768) % 2, hi, lo), np.where(np.arange(768) == 5, hi, lo),
             np.full(768, hi) - (np.arange(768) == 0), rng.integers(lo, hi + 1, 768)]
    for x in cases:
        for r in (x, np.zeros(768, np.int64)):
            got = layernorm_golden(config, x, r, gamma, beta)
            ref = layernorm_reference_int8(config, x, r, gamma, beta)
            assert np.abs(got - ref).max() <= 1
    one = LayerNormConfig(h_max=768, add_residual=False)
    assert layernorm_golden(one, [77], None, [64], [-9])[0] == -9        # H = 1
    extremes = [np.full(48, -(1 << 31)), np.where(np.arange(48) % 3, (1 << 31) - 1, -(1 << 31))]
    g16 = rng.integers(-32768, 32768, 48)
    b16 = rng.integers(-32768, 32768, 48)
    for x in extremes:
        ref = layernorm_reference_int8(WIDE, x, None, g16, b16)
        assert np.abs(layernorm_golden(WIDE, x, None, g16, b16) - ref).max() <= 1


def test_cycle_model():
    # One vector: n beats in, the statistics latency, n beats out.
    assert layernorm_cycles(SMALL, [64]) == 16 + LN_STATS_LATENCY + LN_OUT_LATENCY + 15
    # Non-decreasing lengths: the inputs back to back, then the last vector's output.
    assert layernorm_cycles(SMALL, [8, 64, 64]) == 34 + LN_STATS_LATENCY + LN_OUT_LATENCY + 15
    # A short vector after a long one waits for the long one's output.
    assert layernorm_cycles(SMALL, [64, 4]) == 32 + LN_STATS_LATENCY + LN_OUT_LATENCY
    with pytest.raises(ValueError, match=r"^vector length 6 is not a multiple of lanes=4"):
        layernorm_cycles(SMALL, [6])
