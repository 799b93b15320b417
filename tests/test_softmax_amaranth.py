"""Fast test of Softmax in amaranth.sim (no Verilator): rows of mixed
lengths, driven with stream_put/stream_get, against the golden model, and
the measured cycles against the cycle model when nothing stalls."""

import numpy as np
import pytest

from bertforge.rtl.softmax import Softmax, SoftmaxConfig, softmax_scale
from bertforge.sim.softmax_cycles import softmax_beats, softmax_cycles
from bertforge.sim.softmax_golden import softmax_golden
from bertforge.sim.stream_sim import run_streams

CONFIG = SoftmaxConfig(lanes=4, l_max=24)


def random_rows(config, lengths, rng):
    """``(x, mask, multipliers, shifts)``: rows padded to ``l_max`` (the
    padding masked), a few elements masked, one scale per row."""
    rows = len(lengths)
    x = rng.integers(-3000, 3000, (rows, config.l_max))
    x[0, :] = 2 ** 31 - 1                     # an all-max row
    mask = np.arange(config.l_max)[None, :] >= np.array(lengths)[:, None]
    mask |= rng.random((rows, config.l_max)) < 0.1
    scales = [softmax_scale(float(s)) for s in rng.uniform(0.001, 0.02, rows)]
    return x, mask, [m for m, _ in scales], [s for _, s in scales]


def beats(config, x, mask, multipliers, shifts, lengths):
    """``x`` stream payloads (dicts) of the rows."""
    lanes = config.lanes
    out = []
    for row, count in enumerate(softmax_beats(config, lengths)):
        for k in range(count):
            lane_mask = sum(int(mask[row, k * lanes + j]) << j for j in range(lanes))
            out.append({"data": x[row, k * lanes:(k + 1) * lanes], "mask": lane_mask,
                        "multiplier": multipliers[row], "shift": shifts[row],
                        "last": k == count - 1})
    return out


def expected_beats(config, golden, lengths):
    lanes = config.lanes
    out = []
    for row, count in enumerate(softmax_beats(config, lengths)):
        values = np.where(np.arange(count * lanes) < lengths[row], golden[row, :count * lanes], 0)
        out += [{"data": values[k * lanes:(k + 1) * lanes].tolist(), "last": int(k == count - 1)}
                for k in range(count)]
    return out


@pytest.mark.parametrize("gap,stall", [(0.0, 0.0), (0.3, 0.4)])
def test_softmax_rows_match_golden_and_cycle_model(gap, stall):
    rng = np.random.default_rng(5)
    lengths = [24, 1, 7, 24, 13, 4, 2, 20]
    x, mask, multipliers, shifts = random_rows(CONFIG, lengths, rng)
    inputs = beats(CONFIG, x, mask, multipliers, shifts, lengths)
    expected = expected_beats(CONFIG, softmax_golden(CONFIG, x, mask, multipliers, shifts), lengths)
    received, cycles = run_streams(Softmax(CONFIG), {"x": inputs}, {"y": len(expected)},
                                   seed=11, gap=gap, stall=stall)
    assert received["y"] == expected
    if not (gap or stall):
        assert cycles == softmax_cycles(CONFIG, lengths)
