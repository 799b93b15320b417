"""Fast test of Gelu in amaranth.sim (no Verilator): rows driven with
stream_put/stream_get against the golden model, and the measured cycles
against the cycle model when nothing stalls."""

import numpy as np
import pytest

from bertforge.rtl.gelu import Gelu, GeluConfig
from bertforge.sim.gelu_cycles import gelu_cycles
from bertforge.sim.gelu_golden import gelu_golden
from bertforge.sim.stream_sim import run_streams


@pytest.mark.parametrize("config", [GeluConfig(lanes=2),
                                    GeluConfig(lanes=4, in_width=16, out_width=16, in_mult=1,
                                               out_shift=3)],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("gap,stall", [(0.0, 0.0), (0.3, 0.4)])
def test_gelu_rows_match_golden_and_cycle_model(config, gap, stall):
    rng = np.random.default_rng(2)
    lanes, length = config.lanes, 4 * config.lanes
    lo, hi = -(1 << (config.in_width - 1)), 1 << (config.in_width - 1)
    x = rng.integers(lo, hi, (6, length))
    x[0, :lanes] = [lo, hi - 1] * (lanes // 2)          # the extremes
    flat = x.reshape(-1, lanes)
    last = np.arange(len(flat)) % (length // lanes) == length // lanes - 1
    inputs = [{"data": beat, "last": bool(flag)} for beat, flag in zip(flat, last)]
    golden = gelu_golden(config, x).reshape(-1, lanes)
    expected = [{"data": beat.tolist(), "last": int(flag)} for beat, flag in zip(golden, last)]
    received, cycles = run_streams(Gelu(config), {"x": inputs}, {"y": len(expected)},
                                   seed=4, gap=gap, stall=stall)
    assert received["y"] == expected
    if not (gap or stall):
        assert cycles == gelu_cycles(config, len(inputs))
