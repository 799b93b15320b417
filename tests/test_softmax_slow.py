"""Long softmax runs, excluded by default (``pytest -m slow tests/test_softmax_slow.py``):
BERT-base rows at 16 lanes in Verilator, and ECP5 synthesis of a small design."""

import numpy as np
import pytest

from bertforge.generators.emit import emit_verilog
from bertforge.generators.softmax_sim import (ecp5_stats, extreme_softmax_rows, random_softmax_rows,
                                              simulate_softmax)
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.softmax_golden import softmax_golden


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
    stats = ecp5_stats(emit_verilog(config), config.name)
    assert stats["luts"] > 0 and stats["ffs"] > 0 and stats["dsps"] > 0
    assert stats["cells"] >= stats["luts"] + stats["ffs"]
