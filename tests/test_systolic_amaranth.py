"""Fast unit test of the whole SystolicArray in amaranth.sim (no Verilator):
a few tiles back to back in both dataflows, int8 and bf16, against the
golden model."""

import ml_dtypes
import numpy as np
import pytest

from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim.stream_sim import run_streams
from bertforge.sim.systolic_golden import operand_words, result_words, systolic_golden


def beats(config, tiles):
    a_beats, b_beats = [], []
    for a, b in tiles:
        a, b = operand_words(config, a), operand_words(config, b)
        if config.dataflow == "os":
            k = a.shape[1]
            a_beats += [(a[:, i].tolist(), i == k - 1) for i in range(k)]
            b_beats += [b[i].tolist() for i in range(k)]
        else:
            k = a.shape[0]
            a_beats += [(a[i].tolist(), i == k - 1) for i in range(k)]
            b_beats += [b[i].tolist() for i in range(config.rows)]
    return a_beats, b_beats


@pytest.mark.parametrize("arith", ["int8", "bf16"])
@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_tiles_back_to_back(dataflow, arith):
    config = SystolicConfig(rows=2, cols=3, dataflow=dataflow, arith=arith)
    dut = SystolicArray(config)
    rng = np.random.default_rng(3)
    shapes = {"os": lambda k: ((2, k), (k, 3)), "ws": lambda k: ((k, 2), (2, 3))}[dataflow]
    tiles = []
    for k in (1, 4, 2, 5):
        sa, sb = shapes(k)
        if arith == "bf16":
            tiles.append((rng.standard_normal(sa).astype(ml_dtypes.bfloat16),
                          (rng.standard_normal(sb) * 1e3).astype(ml_dtypes.bfloat16)))
        else:
            tiles.append((rng.integers(-128, 128, sa), rng.integers(-128, 128, sb)))
    a_beats, b_beats = beats(config, tiles)
    expected = np.concatenate([result_words(config, systolic_golden(config, a, b))
                               for a, b in tiles])
    received, _ = run_streams(
        dut, {"a": [{"data": data, "last": last} for data, last in a_beats], "b": b_beats},
        {"c": len(expected)}, max_cycles=500)
    assert np.array_equal(np.array([row["data"] for row in received["c"]]), expected)
