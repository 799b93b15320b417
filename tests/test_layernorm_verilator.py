"""The emitted LayerNorm Verilog in Verilator against the golden and cycle
models, without and with stalls."""

import math

import numpy as np
import pytest

from bertforge.generators.layernorm_sim import random_layernorm_data, simulate_layernorm
from bertforge.rtl.layernorm import LN_OUT_LATENCY, LN_STATS_LATENCY, LayerNormConfig
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.coverage import uncovered
from bertforge.sim.layernorm_golden import layernorm_golden

from helpers import LAYERNORM_SMALL as SMALL
from helpers import LAYERNORM_WIDE as WIDE
from helpers import layernorm_bert_vectors as _bert_vectors


def _small_data(seed):
    """Mixed lengths (4 to h_max) of realistic vectors plus extremes."""
    rng = np.random.default_rng(seed)
    xs, rs = [], []
    for length in (64, 4, 16, 64, 60, 8, 4, 4, 32):
        x, r, _, _ = random_layernorm_data(SMALL, 1, length, rng)
        xs += x
        rs += r
    lo, hi = -32768, 32767
    idx = np.arange(64)
    # (x + r = -65,536 throughout: the largest S2, H*S2 and S1**2, 2**44)
    xs += [np.full(64, hi), np.where(idx % 2, hi, lo), np.where(idx == 7, hi, 0), np.full(4, lo),
           np.array([-1, 1, 0, -1]), np.full(64, lo)]
    rs += [np.full(64, hi), np.where(idx % 3, lo, hi), np.zeros(64, np.int64), np.full(4, lo),
           np.array([1, -1, 1, 0]), np.full(64, lo)]
    # Impulses (+-1 at each position of 4 and 8): the smallest variances,
    # where the statistics' low bits and the shift's low bits reach the
    # output (H * S2 - S1**2 < 64: the normalization shift is 6 to 8 bits).
    for length in (4, 8):
        for position in range(length):
            for sign in (1, -1):
                xs.append(np.where(np.arange(length) == position, sign, 0))
                rs.append(np.zeros(length, np.int64))
    _, _, gamma, beta = random_layernorm_data(SMALL, 1, 64, rng)
    gamma[:5] = [-128, 127, 0, -1, 1]
    beta[:5] = [127, -128, 5, 0, -1]
    gamma[9:11] = [-128, -3]          # negative gamma on lanes 1 and 2 (its sign bit)
    return xs, rs, gamma, beta


#: Vectors on a rounding boundary of the output for one low bit of the
#: datapath, found by a search over random vectors with the golden model and
#: a model of the change (mutation testing, docs/verification-coverage.md):
#: bit 8 of lane 3's normalization input and bit 5 of R (both: the first),
#: bit 12 of lane 3's product ``num * R``, and bit 10 of the mantissa in the
#: first Newton step (R one unit off; 1 random vector in 120,000 does it).
#: After the narrowing (issue 40): bit 1 of R (R off by 2) while bit 4 of
#: S1 is clear, D's bit 22 while its bit 35 is set, and bit 9 of lane 1's
#: product ``num * R`` (D < 2**10).
#: With the gamma and beta of ``_small_data(5)``.
BOUNDARY_VECTORS = [np.array([-1, 1, 0, 0, -1, 0, -1, 1]), np.array([0, 1, -2, -3, 2, 0, 0, 2]),
                    np.array([29144, -5597, 560, 294]),
                    np.array([-68, -91, 75, 8, -75, 96, 16, -88, -10, -19, -49, -105]),
                    np.array([34610, -31735, 2094, 11672, 27482, -12395, 5520, -5310, -9934, 13750,
                              -25588, 5624]),
                    np.array([0, 3, -3, -2])]


def _corner_vectors(rng):
    """Vectors whose statistics' low bits reach the output: ``D = H*S2 -
    S1**2`` a power of 4 (``R = 2**20`` exactly: its top bit), a large
    offset with a spread of +-2 (``H*S2`` and ``S1**2`` agree in their top
    30 bits; S2's accumulator passes 2**35), tiny spreads (``D < 2**16``:
    the product's low bits reach z), and :data:`BOUNDARY_VECTORS`."""
    vs = [np.array([1, -1, 1, -1]) << k for k in range(15)]
    vs += [np.array([1, -1, 1, -1, -1, 1, -1, 1]) << k for k in (0, 7, 14)]
    for _ in range(12):
        offset = int(rng.choice([-1, 1])) * int(rng.integers(40000, 65000))
        vs.append(offset + rng.integers(-2, 3, 4 * int(rng.integers(3, 17))))
    for _ in range(100):
        spread = int(rng.integers(1, 4))
        vs.append(rng.integers(-spread, spread + 1, 4 * int(rng.integers(1, 17))))
    return vs + BOUNDARY_VECTORS


def _extreme_vectors(config):
    """One vector of one beat per interval of the reciprocal square root's
    seed table (rtl/rsqrt.py: ``[a, -a, 0, ...]``, ``D = 2 * lanes * a**2``
    in ``[i, i + 1) * 2**18``, i = 16..63), then a +1 and a -1 impulse at
    each lane of the longest vector (``|z| = sqrt(H - 1)``: with gamma near
    its top the output saturates both ways on every lane)."""
    lanes = config.lanes
    vs = []
    for index in range(16, 64):
        a = math.isqrt((index << 18) // (2 * lanes)) + 1
        vs.append(np.array([a, -a] + [0] * (lanes - 2)))
    for lane in range(lanes):
        for sign in (1, -1):
            vs.append(sign * (np.arange(config.h_max) == lane).astype(np.int64))
    return vs


def _check_saturating(config, xs, rs, seed):
    """``xs`` (and ``rs``) with gamma at its top and beta 0, bit-exact; the
    impulses of :func:`_extreme_vectors` (vectors 48 on) reach both output
    limits on every lane."""
    gamma = np.full(config.h_max, (1 << (config.param_width - 1)) - 1)
    beta = np.zeros(config.h_max, np.int64)
    result = simulate_layernorm(config, xs, rs, gamma, beta, seed=seed)
    assert result["passed"] and result["match"]
    for k, (x, y) in enumerate(zip(xs, result["outputs"])):
        assert np.array_equal(y, layernorm_golden(config, x, rs[k] if rs else None, gamma, beta))
    impulses = np.stack([y[:config.lanes] for y in result["outputs"][48:48 + 2 * config.lanes]])
    top = (1 << (config.out_width - 1))
    assert (impulses.max(axis=0) == top - 1).all() and (impulses.min(axis=0) == -top).all()


def test_verilator_small_clean_then_stalls():
    xs, rs, gamma, beta = _small_data(5)
    clean = simulate_layernorm(SMALL, xs, rs, gamma, beta, seed=5)
    assert clean["passed"] and clean["match"]
    assert clean["cycles"] == clean["model_cycles"] == layernorm_cycles(SMALL, [len(x) for x in xs])
    for x, r, y in zip(xs, rs, clean["outputs"]):
        assert np.array_equal(y, layernorm_golden(SMALL, x, r, gamma, beta))
    assert clean["max_abs_err"] <= 1
    assert np.array_equal(clean["outputs"][9], beta)        # constant vector -> beta
    stalled = simulate_layernorm(SMALL, xs, rs, gamma, beta, seed=6, x_gap=0.3, y_stall=0.5)
    assert stalled["passed"] and stalled["match"] and stalled["cycles"] > stalled["model_cycles"]
    short = [np.arange(4) * k for k in range(40)]              # 40 one-beat vectors back to back
    burst = simulate_layernorm(SMALL, short, [np.zeros(4, np.int64)] * 40, gamma, beta, seed=7)
    assert burst["match"] and burst["cycles"] == burst["model_cycles"]
    assert burst["cycles"] == 40 + LN_STATS_LATENCY + LN_OUT_LATENCY
    # the output stalled long enough to fill the buffer and statistics queues
    full = simulate_layernorm(SMALL, xs, rs, gamma, beta, seed=8, x_gap=0.2, y_stall=0.9)
    assert full["passed"] and full["match"]
    assert uncovered([clean, stalled, burst, full], WAIVED) == []
    # x + r = v over the whole int17 range: r = v // 2, x = v - r
    vs = _corner_vectors(np.random.default_rng(9))
    cr = [v // 2 for v in vs]
    cx = [v - r for v, r in zip(vs, cr)]
    corners = simulate_layernorm(SMALL, cx, cr, gamma, beta, seed=9)
    assert corners["passed"] and corners["match"] and corners["max_abs_err"] <= 1
    for x, r, y in zip(cx, cr, corners["outputs"]):
        assert np.array_equal(y, layernorm_golden(SMALL, x, r, gamma, beta))
    # the seed intervals, saturation on every lane, and x + r alternating
    # between -65,536 and 65,534: the largest D (bit 43)
    ex = _extreme_vectors(SMALL) + [np.where(np.arange(64) % 2, 32767, -32768)]
    er = [np.zeros(len(x), np.int64) for x in ex[:-1]] + [ex[-1]]
    _check_saturating(SMALL, ex, er, seed=10)


#: Functional cover points no run can hit, and why: LayerNorm takes an x and
#: an r beat together (x.ready = r.ready = both valid and room: ready depends
#: on valid, as stream rules allow), so ready without valid never shows.
WAIVED = {"layernorm.x.idle:True", "layernorm.r.idle:True"}


def test_verilator_int32_no_residual_stalls():
    rng = np.random.default_rng(8)
    xs, _, gamma, beta = random_layernorm_data(WIDE, 5, 48, rng)
    xs += [np.full(48, -(1 << 31)), np.where(np.arange(48) % 2, (1 << 31) - 1, -(1 << 31)),
           np.full(3, (1 << 31) - 1), rng.integers(-(1 << 31), 1 << 31, 24)]
    gamma[:2] = [-32768, 32767]
    result = simulate_layernorm(WIDE, xs, None, gamma, beta, seed=9, x_gap=0.2, y_stall=0.3)
    assert result["passed"] and result["match"] and result["max_abs_err"] <= 1
    for x, y in zip(xs, result["outputs"]):
        assert np.array_equal(y, layernorm_golden(WIDE, x, None, gamma, beta))
    # 54 vectors in one run: the statistics queue's pointers (23 deep) wrap
    _check_saturating(WIDE, _extreme_vectors(WIDE), None, seed=10)


@pytest.mark.slow
def test_verilator_bert_base_16_lanes():
    """128 vectors of 768 at 16 lanes: >= 0.95 * lanes elements per cycle."""
    config = LayerNormConfig(lanes=16, h_max=768)
    xs, rs, gamma, beta = _bert_vectors(config, 128, 768, 11)
    result = simulate_layernorm(config, xs, rs, gamma, beta, seed=11)
    assert result["match"] and result["cycles"] == result["model_cycles"]
    assert result["elements_per_cycle"] >= 0.95 * 16 and result["max_abs_err"] <= 1
