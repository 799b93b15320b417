"""N:M tools and models without a simulator: pruning, the compressed layout
and its loader checks, the golden tile model and the cycle model."""

import numpy as np
import pytest

from bertforge.rtl.sparse import SparseConfig
from bertforge.sim.sparse_cycles import nm_gemm_cycles, sparse_cycles, nm_tile_beats
from bertforge.sim.sparse_golden import (check_compressed, check_pattern, compress_nm, compressed_rows,
                                            decompress_nm, is_nm_sparse, nm_tile_golden, parse_pattern,
                                            prune_nm)
from bertforge.sim.systolic_cycles import systolic_cycles
from bertforge.rtl.systolic import SystolicConfig

PATTERNS = [(n, m) for m in (1, 2, 4, 8, 16) for n in range(1, m + 1)]


@pytest.mark.parametrize("n, m", PATTERNS)
def test_prune_compress_decompress_round_trip(n, m):
    rng = np.random.default_rng(n * 100 + m)
    for k in (1, m - 1 or 1, m, m + 1, 3 * m + 2):
        w = rng.integers(-128, 128, (k, 5))
        pruned = prune_nm(w, n, m)
        assert pruned.shape == w.shape
        assert is_nm_sparse(pruned, n, m)
        values, indices = compress_nm(pruned, n, m)
        assert values.shape == indices.shape == (compressed_rows(k, n, m), 5)
        assert np.array_equal(decompress_nm(values, indices, n, m, k), pruned)
        # Kept values are original values at their original rows.
        kept = pruned != 0
        assert np.array_equal(pruned[kept], w[kept])


def test_prune_keeps_the_largest_magnitudes_ties_to_the_lower_row():
    w = np.array([[1], [-9], [3], [9],      # group 0: |-9| == |9|, then 3
                  [0], [0], [5], [0],       # group 1: one non-zero
                  [4], [-4]])               # partial group of 2 rows
    assert prune_nm(w, 2, 4)[:, 0].tolist() == [0, -9, 0, 9, 0, 0, 5, 0, 4, -4]
    assert prune_nm(w, 1, 4)[:, 0].tolist() == [0, -9, 0, 0, 0, 0, 5, 0, 4, 0]
    assert np.array_equal(prune_nm(w, 4, 4), w)


def test_compressed_layout_is_what_the_hardware_reads():
    w = np.array([[0, 7], [5, 0], [0, 0], [-2, 1], [0, 0], [3, 0]])   # K = 6 at 2:4
    values, indices = compress_nm(w, 2, 4)
    assert values.tolist() == [[5, 7], [-2, 1], [0, 0], [3, 0]]
    assert indices.tolist() == [[1, 0], [3, 3], [0, 0], [1, 1]]
    assert indices.dtype == np.uint8


def test_compress_refuses_weights_that_break_the_pattern():
    w = np.zeros((8, 3), dtype=np.int64)
    w[4:7, 2] = [1, 2, 3]
    with pytest.raises(ValueError, match=r"^weights are not 2:4 sparse: group 1 \(rows 4\.\.7\) of "
                                         r"column 2 has 3 non-zeros; prune with prune_nm first$"):
        compress_nm(w, 2, 4)


def _valid():
    w = prune_nm(np.random.default_rng(3).integers(-128, 128, (8, 3)), 2, 4)
    return compress_nm(w, 2, 4)


def test_index_out_of_range_is_rejected():
    values, indices = _valid()
    indices[3, 1] = 4
    with pytest.raises(ValueError, match=r"^index 4 out of range 0\.\.3 \(M = 4\) at compressed row 3, "
                                         r"column 1 \(group 1\)$"):
        check_compressed(values, indices, 2, 4, 8)


@pytest.mark.parametrize("n", [2, 3])
def test_duplicate_index_in_a_group_is_rejected(n):
    w = prune_nm(np.random.default_rng(4).integers(-128, 128, (16, 2)), n, 8)
    values, indices = compress_nm(w, n, 8)
    indices[n + n - 1, 0] = indices[n, 0]     # last slot of group 1 repeats its first
    with pytest.raises(ValueError, match=rf"^repeated index in group 1 of column 0: index "
                                         rf"{indices[n, 0]} appears twice \(each position of a "
                                         rf"group holds at most one value\)$"):
        decompress_nm(values, indices, n, 8, 16)


def test_out_of_order_indices_and_values_past_k_are_rejected():
    values, indices = _valid()
    indices[[0, 1], 0] = indices[[1, 0], 0]
    with pytest.raises(ValueError, match=r"^indices out of order in group 0 of column 0: index \d "
                                         r"follows \d \(indices must increase within a group\)$"):
        check_compressed(values, indices, 2, 4, 8)
    w = np.zeros((5, 1), dtype=np.int64)
    w[[0, 4], 0] = 1
    values, indices = compress_nm(w, 1, 4)                  # K = 5: group 1 has row 4 only
    values[1, 0], indices[1, 0] = 7, 2                                     # row 6 >= K
    with pytest.raises(ValueError, match=r"^non-zero value at row 6 >= K = 5 \(group 1, column 0\)$"):
        check_compressed(values, indices, 1, 4, 5)


def test_wrong_shapes_and_types_are_rejected():
    values, indices = _valid()
    with pytest.raises(ValueError, match=r"^compressed values must have ceil\(K/M\)\*N = 6 rows for "
                                         r"K = 9 at 2:4, not shape \(4, 3\)$"):
        check_compressed(values, indices, 2, 4, 9)
    with pytest.raises(ValueError, match=r"^compressed indices have shape \(4, 2\); the values have \(4, 3\)$"):
        check_compressed(values, indices[:, :2], 2, 4, 8)
    with pytest.raises(ValueError, match=r"^compressed indices must be integers, not float64$"):
        check_compressed(values, indices.astype(float), 2, 4, 8)


@pytest.mark.parametrize("args, error, message", [
    ((0, 4), ValueError, r"^n must be in 1\.\.m = 4, not 0$"),
    ((5, 4), ValueError, r"^n must be in 1\.\.m = 4, not 5$"),
    ((1, 0), ValueError, r"^m must be a positive integer, not 0$"),
    ((2.0, 4), TypeError, r"^n must be an integer, not 2\.0$"),
    ((1, True), TypeError, r"^m must be an integer, not True$"),
    ((1, 16, 8), ValueError, r"^m must be at most m_max = 8, not 16$"),
])
def test_bad_patterns(args, error, message):
    with pytest.raises(error, match=message):
        check_pattern(*args)


@pytest.mark.parametrize("text, message", [
    ("2-4", r"^a pattern is N:M with integers, like 2:4, not '2-4'$"),
    ("2:x", r"^a pattern is N:M with integers, like 2:4, not '2:x'$"),
    ("3:2", r"^n must be in 1\.\.m = 2, not 3$"),
])
def test_parse_pattern(text, message):
    assert parse_pattern("2:4") == (2, 4)
    with pytest.raises(ValueError, match=message):
        parse_pattern(text)


def test_golden_is_the_saturating_product_with_the_pruned_weights():
    config = SparseConfig(rows=2, cols=2, m_max=8, acc_width=16)
    a = np.full((2, 16), -128)
    w = prune_nm(np.full((16, 2), -128), 2, 8)
    values, indices = compress_nm(w, 2, 8)
    assert np.all(nm_tile_golden(config, a, values, indices, 2, 8) == 32767)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (2, 13))
    w = prune_nm(rng.integers(-128, 128, (13, 2)), 3, 8)
    values, indices = compress_nm(w, 3, 8)
    wide = SparseConfig(rows=2, cols=2, m_max=8)
    assert np.array_equal(nm_tile_golden(wide, a, values, indices, 3, 8), a @ w)


def test_cycle_model_is_the_dense_os_model_over_compressed_beats():
    config = SparseConfig(rows=8, cols=8, m_max=8)
    dense = SystolicConfig(rows=8, cols=8, dataflow="os")
    assert nm_tile_beats(768, 2, 4) == 384
    assert nm_tile_beats(13, 3, 8) == 6       # two groups, the last partial
    beats = [nm_tile_beats(k, 1, 8) for k in (768, 5, 64)]
    assert sparse_cycles(config, beats) == systolic_cycles(dense, beats)
    assert sparse_cycles(config, [1, 1]) == 1 + 8 + 8 + 8 + 4
    # Long K: the speedup over dense mode (1:1) tends to M/N.
    for n, m in [(1, 4), (2, 4), (2, 8), (4, 8), (1, 8)]:
        speedup = nm_gemm_cycles(config, 32, 768, 96, 1, 1) / nm_gemm_cycles(config, 32, 768, 96, n, m)
        assert 0.95 * m / n <= speedup <= m / n
    with pytest.raises(ValueError, match=r"^beats must be a non-empty list of positive tile lengths$"):
        sparse_cycles(config, [])


def test_simulation_refuses_malformed_tiles_before_building():
    from bertforge.generators.sparse_sim import random_sparse_tile, simulate_sparse
    config = SparseConfig(rows=3, cols=4, m_max=8)
    a, values, indices, n, m = random_sparse_tile(config, 16, 2, 8, np.random.default_rng(0))
    bad = indices.copy()
    bad[2, 3] = 9
    with pytest.raises(ValueError, match=r"^index 9 out of range 0\.\.7 \(M = 8\) at compressed row 2, "
                                         r"column 3 \(group 1\)$"):
        simulate_sparse(config, [(a, values, bad, n, m)])
    bad = indices.copy()
    bad[1, 0] = bad[0, 0]
    with pytest.raises(ValueError, match=r"^repeated index in group 0 of column 0"):
        simulate_sparse(config, [(a, values, bad, n, m)])
    with pytest.raises(ValueError, match=r"^m must be at most m_max = 8, not 16$"):
        simulate_sparse(config, [(a, values, indices, 1, 16)])
    with pytest.raises(ValueError, match=r"^a tile's activations must be 3 x K, not shape \(2, 16\)$"):
        simulate_sparse(config, [(a[:2], values, indices, n, m)])
    wide = values.copy()
    wide[0, 0] = 200
    with pytest.raises(ValueError, match=r"^weights must lie in \[-128, 127\] \(int8\), not \[-?\d+, 200\]$"):
        simulate_sparse(config, [(a, wide, indices, n, m)])


def test_sparse_engine_models_add_the_bias_and_per_channel_scales():
    """The sparse engine shares the dense engine's writer: bias, per-channel
    scale words, their error rules and their read beats."""
    from bertforge.generators.sparse_engine_sim import layout_sparse_problems
    from bertforge.rtl.sparse_engine import SparseEngineConfig
    from bertforge.sim.fixed_golden import split_scale_words, channel_scale_words
    from bertforge.sim.gemm_golden import gemm_golden
    from bertforge.sim.sparse_engine_cycles import sparse_engine_cycles
    from bertforge.sim.sparse_engine_golden import run_sparse_commands, sparse_command_error
    config = SparseEngineConfig(rows=2, cols=2, mem_width=64, k_chunk=32, addr_width=15)
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (5, 40))
    w = prune_nm(rng.integers(-128, 128, (40, 7)), 2, 4)
    bias = rng.integers(-5000, 5000, 7)
    scales = 10.0 ** rng.uniform(-4, -2, 7)
    image, commands = layout_sparse_problems(config, [
        dict(m=5, k=40, n=7, pat_n=2, pat_m=4, a=a, w=w, bias=bias),
        dict(m=5, k=40, n=7, pat_n=2, pat_m=4, a=a, w=w, bias=bias, scale=scales)])
    assert run_sparse_commands(config, image, commands) == [False, False]
    c32 = np.ndarray((5, 7), "<i4", image, commands[0]["c_addr"], (commands[0]["c_stride"], 4))
    assert np.array_equal(c32, a @ w + bias)
    multipliers, shifts = split_scale_words(channel_scale_words(scales))
    c8 = np.ndarray((5, 7), "<i1", image, commands[1]["c_addr"], (commands[1]["c_stride"], 1))
    assert np.array_equal(c8, gemm_golden(config, a, w, bias=bias, int8=True, multiplier=multipliers,
                                          shift=shifts))
    cmd = commands[1]
    assert not sparse_command_error(config, cmd)
    assert sparse_command_error(config, dict(cmd, int8=0))                    # per-channel int32
    assert sparse_command_error(config, dict(cmd, scale_addr=(1 << 15) - 27))  # 7 words past the end
    assert sparse_command_error(config, dict(cmd, bias_addr=(1 << 15) - 27))
    # compute bound, each vector adds its beats to the first chunk: 7 columns of 4 bytes, 8-byte beats
    long = dict(cmd, m=8, k=1024, a_stride=1024)
    plain = sparse_engine_cycles(config, [dict(long, bias=0, per_channel=0)] * 2, lat=3)
    model = sparse_engine_cycles(config, [long] * 2, lat=3)
    assert model["exact"] and model["cycles"] == plain["cycles"] + 2 * 4
