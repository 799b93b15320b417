"""Fast test of the SparseArray in amaranth.sim (no Verilator): tiles of
several N:M patterns back to back, with 1 and with 3 multiply stages (as
the ECP5 board tops), against the golden model; cycles equal to the cycle
model when the streams do not stall, results unchanged when they do."""

import numpy as np
import pytest

from bertforge.generators.sparse_sim import random_sparse_tile
from bertforge.rtl.sparse import SparseArray, SparseConfig
from bertforge.sim.sparse_cycles import sparse_cycles
from bertforge.sim.sparse_golden import nm_tile_golden, sparse_columns
from bertforge.sim.stream_sim import run_streams


@pytest.mark.parametrize("stages", [1, 3])
def test_tiles_back_to_back(stages):
    config = SparseConfig(rows=2, cols=3, m_max=4, multiply_stages=stages)
    rng = np.random.default_rng(stages)
    tiles = [random_sparse_tile(config, k, n, m, rng)
             for n, m, k in [(2, 4, 8), (1, 2, 3), (4, 4, 5), (1, 4, 9), (3, 4, 1)]]
    a_value, b_value, beats = sparse_columns(config, tiles)
    a_beats = [{"data": window.tolist(), "last": bool(last)}
               for window, last in zip(a_value["data"], a_value["last"])]
    b_beats = [{"data": data.tolist(), "index": index.tolist(), "group_end": bool(end)}
               for data, index, end in zip(b_value["data"], b_value["index"], b_value["group_end"])]
    expected = np.concatenate([nm_tile_golden(config, *tile) for tile in tiles])
    for seed, gap, stall in ((0, 0.0, 0.0), (1, 0.3, 0.4)):
        received, cycles = run_streams(SparseArray(config), {"a": a_beats, "b": b_beats},
                                       {"c": len(expected)}, seed=seed, gap=gap, stall=stall,
                                       max_cycles=2000)
        assert np.array_equal(np.array([row["data"] for row in received["c"]]), expected)
        if not gap:
            assert cycles == sparse_cycles(config, beats)
