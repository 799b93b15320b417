"""Softmax models: golden-model accuracy, its tables and formats, and the
cycle model.

The accuracy tests run the bit-exact golden model (which the Verilator tests
hold the hardware to) over many rows; the hardware's own error on its rows is
asserted in ``test_softmax_verilator.py``.
"""

import numpy as np
import pytest

from bertforge.generators.softmax_sim import extreme_softmax_rows, make_rows, random_softmax_rows
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.softmax_cycles import softmax_beats, softmax_cycles, softmax_latency
from bertforge.sim.softmax_golden import softmax_errors, softmax_float, softmax_golden

from helpers import SOFTMAX_MAX_ERR as MAX_ERR


def test_bad_row_lengths():
    config = SoftmaxConfig(l_max=8)
    with pytest.raises(ValueError, match=r"^row length must be an integer in \[1, 8\], not 9$"):
        softmax_cycles(config, [4, 9])
    with pytest.raises(ValueError, match=r"^row length must be an integer in \[1, 8\], not 0$"):
        softmax_beats(config, [0])
    with pytest.raises(ValueError, match=r"^lengths must be a non-empty list of row lengths$"):
        softmax_cycles(config, [])


def errors(config, rows):
    out = softmax_golden(config, rows["x"], rows["mask"], rows["multipliers"], rows["shifts"])
    return out, softmax_errors(config, out, rows["x"], rows["mask"], rows["scales"])


@pytest.mark.parametrize("in_width", [32, 16])
def test_accuracy_on_bert_like_rows(in_width):
    config = SoftmaxConfig(lanes=16, l_max=128, in_width=in_width)
    rng = np.random.default_rng(in_width)
    lengths = [128] * 1500 + list(rng.integers(1, 129, 500))
    rows = random_softmax_rows(config, len(lengths), lengths, rng)
    out, (max_err, mean_err) = errors(config, rows)
    assert max_err <= MAX_ERR
    # The output rounding alone is up to 0.5/256; the exp and reciprocal add little.
    assert max_err < 1.01 / 256 and mean_err < 0.2 / 256
    # Probabilities of a row sum to about 1 (each element is off by <= 1 LSB).
    valid = ~rows["mask"]
    sums = out.sum(axis=1)
    counts = valid.sum(axis=1)
    assert np.all(np.abs(sums - 256) <= np.maximum(counts, 2))


@pytest.mark.parametrize("sigma", [0.1, 1.0, 4.0, 16.0])
@pytest.mark.parametrize("scale", [1e-4, 1e-2])
def test_accuracy_over_activation_ranges(sigma, scale):
    config = SoftmaxConfig(lanes=4, l_max=384)
    rng = np.random.default_rng(int(sigma * 100))
    real = rng.normal(0, sigma, (300, 384))
    x = np.clip(np.round(real / scale), -2**31, 2**31 - 1).astype(np.int64)
    rows = make_rows(config, list(x), None, scale)
    _, (max_err, mean_err) = errors(config, rows)
    # Mean: below the output rounding (near-uniform rows of 384 sit at 0.67 LSB).
    assert max_err <= MAX_ERR and mean_err < 0.4 / 256


@pytest.mark.parametrize("config", [
    SoftmaxConfig(lanes=4, l_max=24), SoftmaxConfig(lanes=16, l_max=128),
    SoftmaxConfig(lanes=1, l_max=16, in_width=16, out_width=16, mask=False),
    SoftmaxConfig(lanes=8, l_max=4096, in_width=16)], ids=lambda c: c.name)
def test_accuracy_on_special_rows(config):
    rows = extreme_softmax_rows(config, np.random.default_rng(1))
    _, (max_err, _) = errors(config, rows)
    assert max_err <= MAX_ERR


def test_special_rows_exactly():
    config = SoftmaxConfig(lanes=4, l_max=128)
    lo, hi = -(1 << 31), (1 << 31) - 1
    one_hot = np.full(128, lo)
    one_hot[77] = hi
    keep_one = np.ones(128, dtype=bool)
    keep_one[3] = False
    rows = make_rows(config, [np.full(128, -5), np.full(128, hi), one_hot, np.full(128, lo) + np.arange(128),
                              np.arange(128), [lo], np.arange(128)],
                     [None, None, None, None, keep_one, None, np.ones(128, dtype=bool)], 1e-3)
    out, _ = errors(config, rows)
    assert (out[0] == 2).all() and (out[1] == 2).all()      # 256 / 128
    assert out[2, 77] == 255 and out[2].sum() == 255          # one huge value
    ref = softmax_float(rows["x"][3], None, 1e-3)[0]          # all very negative: shift-invariant
    assert np.abs(out[3] / 256 - ref).max() <= 0.5 / 256 + 1e-3
    assert out[4, 3] == 255 and out[4].sum() == 255           # fully masked but one
    assert out[5, 0] == 255                                   # L = 1
    assert (out[6] == 0).all()                                # fully masked


def test_int16_output_is_finer():
    config = SoftmaxConfig(lanes=4, l_max=128, out_width=16)
    rows = random_softmax_rows(config, 400, 128, np.random.default_rng(5))
    out, (max_err, _) = errors(config, rows)
    assert out.max() <= 32767 and out.min() >= 0
    assert max_err < 4 / 32768


def test_exp_tables_and_formats():
    for l_max in (1, 24, 128, 129, 4096):
        config = SoftmaxConfig(l_max=l_max)
        coarse, fine = config.exp_tables()
        p = config.table_frac
        assert coarse[0] == fine[0] == 1 << p
        assert all(a > b for a, b in zip(coarse, coarse[1:])) and all(a > b for a, b in zip(fine, fine[1:]))
        # The row max gives e = 2**exp_frac; the sum of l_max of them fits.
        assert l_max * (1 << config.exp_frac) < 1 << config.sum_width
        # floor(2**K / sum) fits recip_width bits for every possible sum.
        assert (1 << config.recip_shift) >> config.exp_frac < 1 << config.recip_width
        # Products stay inside int64 in the golden model.
        assert config.recip_width + config.exp_frac + 1 < 63


def test_cycle_model_formulas():
    config = SoftmaxConfig(lanes=16, l_max=128)
    a, b, c = config.a_to_b, config.b_to_c, config.c_to_out
    assert softmax_latency(config, 128) == 3 * 8 - 2 + a + b + c
    for n in (1, 5, 100):
        assert softmax_cycles(config, [128] * n) == n * 8 + 2 * 8 - 2 + a + b + c
    # Short rows after a long one: no bubble on the input, one beat per cycle.
    assert softmax_cycles(config, [128] + [1] * 20) == softmax_cycles(config, [128]) + 20
    # BERT-base: 12 heads x 128 rows of 128 at >= 0.95 * lanes elements per cycle.
    for lanes in (1, 4, 16):
        config = SoftmaxConfig(lanes=lanes, l_max=128)
        assert 12 * 128 * 128 / softmax_cycles(config, [128] * 12 * 128) >= 0.95 * lanes
