"""cocotb tests of the emitted Softmax Verilog in Verilator.

Per design, one simulation runs its scenarios one after another: mixed rows
back to back (random BERT-like rows of every length class, a long row
followed by a burst of 1-beat rows and back) and the special rows, each once
without stalls (bit-exact against the golden model and cycle-exact against
the cycle model) and once with random input gaps and output backpressure
(bit-exact, nothing lost or duplicated: the testbench drains and counts),
then many short rows, and the special rows after a reset of the block while
it was full (with the output stalled, it must have taken exactly the beats
its queues and credits allow).

Under ``slow`` (``pytest -m slow tests/test_softmax_verilator.py``): BERT-base
rows at 16 lanes in Verilator, and ECP5 synthesis of a small design.
"""

import numpy as np
import pytest

from bertforge.generators.emit import emit_verilog
from bertforge.generators.bench import ecp5_stats
from bertforge.generators.softmax_sim import (extreme_softmax_rows, make_rows,
                                              random_softmax_rows, simulate_softmax)
from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.sim.coverage import uncovered
from bertforge.sim.softmax_cycles import softmax_beats, softmax_latency
from bertforge.sim.softmax_golden import softmax_golden

from helpers import SOFTMAX_MAX_ERR as MAX_ERR

DESIGNS = [
    # int32 in, uint8 out, mask, 4 lanes, rows of 1..24 (partial beats).
    SoftmaxConfig(lanes=4, l_max=24, in_width=32, out_width=8, mask=True),
    # int16 in, int16 out, no mask, 1 lane.
    SoftmaxConfig(lanes=1, l_max=16, in_width=16, out_width=16, mask=False),
]


def mixed_rows(config, rng):
    """Random rows whose lengths stress the queues: every length class, a
    long row then a burst of shortest rows, then long rows again."""
    step = 1 if config.mask else config.lanes
    shortest, longest = step, config.l_max - config.l_max % step
    lengths = list(range(step, config.l_max + 1, step))
    rng.shuffle(lengths)
    lengths += [longest] + [shortest] * (config.beats_max + 3) + [longest, longest, shortest, longest]
    lengths += [int(n) - int(n) % step or step for n in rng.integers(1, config.l_max + 1, 10)]
    return random_softmax_rows(config, len(lengths), lengths, rng)


def dense_rows(config, rng, count=1200):
    """Many short rows for the datapath's rarely reached bits (mutation
    testing, docs/verification-coverage.md): half BERT-like rows of random
    length; int32 designs: a quarter *wide* (tiny scales, spreads past
    2**22 and 2**24 that still give visible probabilities: the upper bits of
    ``u`` and of ``u * multiplier``), a quarter *flat* (8 or more elements
    near the max: row sums of 2**19 to 2**20.6, the divider's upper bits);
    an int16 design: all BERT-like."""
    lo, hi = -(1 << (config.in_width - 1)), (1 << (config.in_width - 1)) - 1
    step = 1 if config.mask else config.lanes
    rows, xs, scales = [], [], []
    for index in range(count):
        kind = index % 4 if config.in_width == 32 else 0
        if kind < 2:
            rows.append(int(rng.integers(1, config.l_max // step + 1)) * step)
            continue
        if kind == 2:     # wide
            length, scale = int(rng.integers(2, config.l_max + 1)), 10.0 ** rng.uniform(-7.2, -6.2)
            real = -rng.uniform(0.0, 2.5, length)
        else:             # flat
            length, scale = int(rng.integers(8, config.l_max + 1)), 10.0 ** rng.uniform(-4, -2)
            real = rng.normal(0.0, rng.uniform(0.01, 0.4), length)
        xs.append(np.clip(np.round(real / scale), lo, hi).astype(np.int64))
        scales.append(scale)
    bert = random_softmax_rows(config, len(rows), rows, rng)
    if not xs:
        return bert
    extra = make_rows(config, xs, None, scales)
    width = max(bert["x"].shape[1], extra["x"].shape[1])
    pad = lambda a, fill: np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)
    return {"x": np.concatenate([pad(bert["x"], 0), pad(extra["x"], 0)]),
            "mask": np.concatenate([pad(bert["mask"], True), pad(extra["mask"], True)]),
            **{key: np.concatenate([bert[key], extra[key]])
               for key in ("lengths", "multipliers", "shifts", "scales")}}


def fill_rows(config, rng):
    """Rows that fill the block with its output stalled: ``recip_depth + 2``
    rows of one beat (as many as hold a reciprocal), then rows of
    ``beats_max`` beats."""
    step = 1 if config.mask else config.lanes
    longest = config.l_max - config.l_max % step
    lengths = [step] * (config.recip_depth + 2) + [longest] * (config.x_depth // config.beats_max + 3)
    return random_softmax_rows(config, len(lengths), lengths, rng)


def stalled_capacity(config):
    """Beats the block takes of :func:`fill_rows` with its output stalled
    from the start: 2 rows in the output pass (its product and output
    registers), ``recip_depth`` one-beat rows in the e queue (no more rows
    have a reciprocal slot: credits), the next row's beats but its last in
    the e queue and the last held in pass B's final stage (only a last beat
    waits for a credit), pass B's six other stages, and ``x_depth`` beats
    in the x queue."""
    return 2 + config.recip_depth + config.beats_max + 6 + config.x_depth


@pytest.mark.parametrize("config", DESIGNS, ids=lambda c: c.name)
def test_softmax_rows_in_verilator(config, tmp_path):
    rng = np.random.default_rng(7)
    mixed = mixed_rows(config, rng)
    # every operand extreme (functional coverage): 0, -1, +1 in a longest row
    mixed["x"][int(np.argmax(mixed["lengths"])), :3] = [0, -1, 1]
    extremes = extreme_softmax_rows(config, rng)
    scenarios = [
        {"rows": mixed},
        {"rows": extremes},
        {"rows": mixed, "x_gap": 0.3, "y_stall": 0.4},
        {"rows": extremes, "x_gap": 0.5, "y_stall": 0.2},
        # the output stalled long enough to fill every queue and refuse input
        {"rows": mixed, "x_gap": 0.05, "y_stall": 0.9},
        {"rows": dense_rows(config, rng)},
        # a run cut short: the output stalled until the block is full and
        # refuses input, then a reset; the next rows must be exact (in data
        # and cycles), so no queue may keep beats across the reset
        {"rows": extremes, "reset_after": {"rows": fill_rows(config, rng), "cycles": 400}},
    ]
    passed, results = simulate_softmax(config, scenarios, seed=3, workdir=tmp_path)
    assert passed
    for scenario, result in zip(scenarios, results):
        rows = scenario["rows"]
        expected = softmax_golden(config, rows["x"], rows["mask"], rows["multipliers"], rows["shifts"])
        assert result["mismatches"] == 0
        assert np.array_equal(result["outputs"], expected)
        assert result["max_abs_err"] <= MAX_ERR
        if not result["stalls"]:
            assert result["cycles"] == result["model_cycles"]
        else:
            assert result["cycles"] > result["model_cycles"]
    # One beat per cycle: at most one longest row's latency more than the beats.
    beats = softmax_beats(config, [int(n) for n in mixed["lengths"]])
    assert results[-1]["beats_before_reset"] == stalled_capacity(config)
    assert results[0]["cycles"] <= sum(beats) + softmax_latency(config, config.l_max)
    assert uncovered(results) == []


#: ``t`` of a row (``u`` exactly, with multiplier 2**15 and shift 15) whose
#: sum, 1,323,008, has bit 18 set and a reciprocal 415,534 whose last bit
#: decides one output: an error in the divider's last stage, or in the
#: reciprocal's LSB, changes that output (found by a search over random
#: rows with the golden model; mutation testing, docs/verification-coverage.md).
BOUNDARY_T = np.array([0, 826, 1522, 1633, 681, 2919, 1851, 2339, 610, 14, 2912, 546, 2344, 61, 666,
                       1081, 254, 885, 1360, 230, 109, 1489, 1697, 85])

#: Another such row: sum 82,073, whose reciprocal 6,698,376 comes out one
#: lower (6,698,375) if the remainder after the divider's 16th quotient bit
#: is off by 2 (one of 14 in 20,000 sums), and whose element e = 13,946 then
#: crosses a rounding boundary (44 -> 43): found by going through the sums
#: with a model of the divider (mutation testing, seed 2).
BOUNDARY_T2 = np.array([0, 9144, 19090])

#: A third: sum 90,624, whose reciprocal 6,066,337 comes out one higher
#: (6,066,338) if bit 2 of the remainder after quotient bit 10 is flipped
#: (17,289 of the 4.1 M sums change by one), and whose element e = 5,133
#: then crosses a rounding boundary (14 -> 15): found as the second
#: (mutation testing of the narrowed RTL, seed 1).
BOUNDARY_T3 = np.array([0, 7027, 15050])

#: Three more, from seed 2 on the narrowed RTL (the same search; each moves
#: one output by one): bit 7 of the remainder after quotient bit 7 flipped
#: with its bit 8 when nothing is subtracted (sum 136,518, reciprocal one
#: lower, 123 -> 122); bit 19 of the subtraction at quotient bit 5 cleared
#: (sum 636,716 of nine maxima and two others, over 2**19 as the bit needs;
#: reciprocal 26 lower, 19 -> 18); bit 7 of the divisor of the last two
#: stages flipped when its bit 17 is clear (sum 100,621, one lower, 89 -> 88).
BOUNDARY_T_MORE = [np.array([0, 14477, 19]), np.array([0] * 9 + [25478, 2090]),
                   np.array([0, 31822, 3743])]


def test_special_rows_give_the_expected_probabilities(tmp_path):
    """Hardware outputs of hand-checked rows (design 0 is already built)."""
    config = DESIGNS[0]
    lo, hi = -(1 << 31), (1 << 31) - 1
    one_hot = np.full(24, lo)
    one_hot[5] = hi
    masked_but_one = np.ones(24, dtype=bool)
    masked_but_one[17] = False
    rows = make_rows(config, [np.full(24, 7), np.full(8, lo), one_hot, np.arange(24) * 1000,
                              [hi], np.zeros(24, dtype=np.int64), (1 << 20) - BOUNDARY_T,
                              (1 << 20) - BOUNDARY_T2, (1 << 20) - BOUNDARY_T3]
                     + [(1 << 20) - t for t in BOUNDARY_T_MORE] + [-np.array([0, 12, 34])],
                     [None, None, None, masked_but_one, None, np.ones(24, dtype=bool)] + [None] * 7,
                     1e-3)
    rows["multipliers"][6:], rows["shifts"][6:] = 1 << 15, 15   # t = u exactly
    # t = 256 u, shift 0: the low bits of lane 0's products at a shift
    # below 6 (seed 2 on the narrowed RTL: bit 5 of the product flipped
    # moves the first element's t by 32, and the second output 83 -> 84)
    rows["multipliers"][12], rows["shifts"][12] = 256, 0
    passed, (result,) = simulate_softmax(config, [{"rows": rows}], workdir=tmp_path)
    out = result["outputs"]
    assert passed
    assert np.array_equal(out[6:], softmax_golden(config, rows["x"][6:], rows["mask"][6:],
                                                  rows["multipliers"][6:], rows["shifts"][6:]))
    assert list(out[7, :3]) == [204, 44, 8]
    assert list(out[8, :3]) == [185, 56, 14]
    assert list(out[9, :3]) == [123, 11, 123]
    assert list(out[10, 9:11]) == [0, 19]
    assert list(out[11, :3]) == [167, 1, 89]
    assert list(out[12, :3]) == [140, 83, 32]
    assert (out[0] == 11).all()                   # 256 / 24 = 10.67
    assert (out[1, :8] == 32).all()               # 256 / 8 at the bottom of the range
    assert out[2, 5] == 255 and out[2].sum() == 255
    assert out[3, 17] == 255 and out[3].sum() == 255
    assert out[4, 0] == 255                       # L = 1
    assert (out[5] == 0).all()                    # fully masked


@pytest.mark.slow
def test_bert_base_rows_at_16_lanes(tmp_path):
    config = SoftmaxConfig(lanes=16, l_max=128)
    rng = np.random.default_rng(11)
    bert = random_softmax_rows(config, 256, 128, rng)
    mixed = random_softmax_rows(config, 64, list(rng.integers(1, 129, 64)), rng)
    extremes = extreme_softmax_rows(config, rng)
    scenarios = [{"rows": bert}, {"rows": mixed}, {"rows": extremes},
                 {"rows": mixed, "x_gap": 0.2, "y_stall": 0.3}]
    passed, results = simulate_softmax(config, scenarios, seed=5, workdir=tmp_path)
    assert passed
    for scenario, result in zip(scenarios, results):
        rows = scenario["rows"]
        assert np.array_equal(result["outputs"], softmax_golden(
            config, rows["x"], rows["mask"], rows["multipliers"], rows["shifts"]))
        assert result["max_abs_err"] <= 2 / 256
        if not result["stalls"]:
            assert result["cycles"] == result["model_cycles"]
    assert results[0]["elements_per_cycle"] >= 0.95 * 16


@pytest.mark.slow
def test_ecp5_synthesis_counts():
    config = SoftmaxConfig(lanes=2, l_max=16)
    stats = ecp5_stats(emit_verilog(config, Softmax(config)), config.name)
    assert stats["luts"] > 0 and stats["ffs"] > 0 and stats["dsps"] > 0
    assert stats["cells"] >= stats["luts"] + stats["ffs"]
