"""cocotb tests of the emitted SparseArray Verilog in Verilator. Three builds: a
3x4 array with m_max = 8 (every N:M with M in {2, 4, 8}, the pattern changing
from tile to tile in one run), the same with the ECP5 boards' 3 multiply
stages, and a 2x2 array with m_max = 16 and 16-bit accumulators (1:16, 2:16,
dense 16:16, and -128 * -128 saturation). Each runs clean (outputs == golden
model, cycles == cycle model) and with random input gaps and output
backpressure (outputs == golden model, nothing lost or duplicated)."""

import numpy as np
import pytest

from bertforge.generators.sparse_sim import random_sparse_tile, simulate_sparse, simulate_sparse_product
from bertforge.rtl.sparse import SparseConfig
from bertforge.sim.sparse_cycles import nm_gemm_cycles, sparse_cycles, nm_tile_beats
from bertforge.sim.sparse_golden import nm_tile_golden, prune_nm
from bertforge.sim.systolic_golden import saturating_matmul
from bertforge.sim.coverage import uncovered

M8 = SparseConfig(rows=3, cols=4, m_max=8)
M16 = SparseConfig(rows=2, cols=2, m_max=16, acc_width=16)
#: As the ECP5 board tops: the picked activation and the weight registered
#: before the multiply, a fabric register after it.
STAGED = SparseConfig(rows=3, cols=4, m_max=8, multiply_stages=3)


def every_pattern_tiles(config, seed):
    """Every N:M with M in {2, 4, 8}, some with M = 3, 5, 6, 7; K cycles
    through multiples and non-multiples of M, and lengths whose compressed
    beats are fewer than R; operand extremes."""
    rng = np.random.default_rng(seed)
    tiles = []
    for index, (n, m) in enumerate((n, m) for m in (2, 4, 8) for n in range(1, m + 1)):
        k = [m, 3 * m + 1, 2 * m - 1, 1, 4 * m, m + 3][index % 6]
        tiles.append(random_sparse_tile(config, k, n, m, rng))
    # M need not be a power of two in the array (the engine takes powers of two).
    tiles += [random_sparse_tile(config, k, n, m, rng) for n, m, k in
              [(2, 3, 10), (3, 5, 13), (1, 6, 30), (5, 7, 7), (7, 7, 22)]]
    lo, hi = -128, 127
    tiles += [random_sparse_tile(config, 24, 2, 4, rng, extreme=(lo, lo)),
              random_sparse_tile(config, 19, 3, 8, rng, extreme=(hi, lo)),
              random_sparse_tile(config, 16, 8, 8, rng, extreme=(lo, hi))]
    return tiles


def pattern_pair_tiles(config, seed):
    """Patterns of the kinds that ``sim.sparse_tb.pattern_kind`` names
    (N = 1, sparse, dense) back to back in the orders other tiles leave
    out, M = 1 (the smallest), and -1 and +1 operands; then tiles of one
    beat, whose result rows outrun a stalled consumer (the output queue
    fills and inputs are refused for 4+ cycles)."""
    rng, m = np.random.default_rng(seed), config.m_max
    return [random_sparse_tile(config, 3, 1, 1, rng), random_sparse_tile(config, 9, 1, m, rng),
            random_sparse_tile(config, m, m, m, rng, extreme=(-1, 1)),
            random_sparse_tile(config, m + 2, m, m, rng, extreme=(1, -1)),
            random_sparse_tile(config, m + 1, 2, m, rng)] + [
        random_sparse_tile(config, 1, 1, 1, rng) for _ in range(12)]


def m16_tiles(seed):
    rng = np.random.default_rng(seed)
    tiles = [random_sparse_tile(M16, k, n, 16, rng) for n, k in
             [(1, 16), (2, 33), (1, 5), (2, 64), (16, 16), (16, 21), (1, 47)]]
    tiles += [random_sparse_tile(M16, 3, 1, 1, rng),                     # 1:1 dense mode
              random_sparse_tile(M16, 14, 2, 4, rng)]                    # M < m_max
    tiles += [random_sparse_tile(M16, 64, 2, 16, rng, extreme=(-128, -128)),   # saturates high
              random_sparse_tile(M16, 64, 2, 16, rng, extreme=(127, -128)),    # saturates low
              random_sparse_tile(M16, 32, 16, 16, rng, extreme=(-128, -128))]
    return tiles


def check_outputs(config, tiles, result):
    assert len(result["outputs"]) == len(tiles)
    for tile, got in zip(tiles, result["outputs"]):
        a, values, indices, n, m = tile
        assert np.array_equal(got, nm_tile_golden(config, a, values, indices, n, m))


@pytest.mark.parametrize("config, tiles", [
    (M8, every_pattern_tiles(M8, 1) + pattern_pair_tiles(M8, 1)),
    (M16, m16_tiles(2) + pattern_pair_tiles(M16, 2)),
    (STAGED, every_pattern_tiles(STAGED, 5) + pattern_pair_tiles(STAGED, 5)),
], ids=["3x4-m8-every-pattern", "2x2-m16-acc16", "3x4-m8-3-multiply-stages"])
def test_tiles_match_golden_and_cycle_model(config, tiles, tmp_path):
    result = simulate_sparse(config, tiles, seed=1, workdir=tmp_path / "clean")
    assert result["passed"], result["log"]
    assert result["match"]
    beats = [nm_tile_beats(a.shape[1], n, m) for a, _, _, n, m in tiles]
    assert result["ideal_cycles"] == sum(beats)
    assert result["cycles"] == result["model_cycles"] == sparse_cycles(config, beats)
    check_outputs(config, tiles, result)

    stalled = simulate_sparse(config, tiles, seed=2, a_gap=0.3, b_gap=0.4, c_stall=0.6,
                              workdir=tmp_path / "stalls")
    assert stalled["passed"], stalled["log"]
    assert stalled["match"] and stalled["stalls"]
    assert stalled["cycles"] > result["cycles"]
    check_outputs(config, tiles, stalled)
    # every functional cover point (sim/funcov_tb.py) of the two runs
    assert uncovered([result, stalled], WAIVED) == []


#: Cover points no run can hit, and why: the array takes ``a`` and ``b``
#: beats only when both are valid (``ready`` is computed from ``valid``, as
#: stream rules allow), so ready without valid never shows.
WAIVED = {"sparse.a.idle:True", "sparse.b.idle:True"}


def test_saturation_is_reached_with_16_bit_accumulators(tmp_path):
    tiles = m16_tiles(3)[-3:]
    result = simulate_sparse(M16, tiles, seed=3, workdir=tmp_path)
    assert result["match"]
    assert np.all(result["outputs"][0] == 32767)
    assert np.all(result["outputs"][1] == -32768)
    assert np.all(result["outputs"][2] == 32767)


def test_32_bit_accumulators_saturate_low(tmp_path):
    """The 3x4 array's 32-bit accumulators clamp at -2**31: 132,200 dense
    beats of 127 * -128 (-2.148e9) in one tile. The only run that reaches
    the clamp (line coverage; mutants of the clamp value survive every other
    test), about 130,000 cycles."""
    tile = random_sparse_tile(M8, 132_200, 8, 8, np.random.default_rng(4), extreme=(127, -128))
    result = simulate_sparse(M8, [tile], seed=3, workdir=tmp_path)
    assert result["passed"] and result["match"]
    check_outputs(M8, [tile], result)
    assert (result["outputs"][0] == -(1 << 31)).any()


def test_heavy_backpressure_and_sparse_input(tmp_path):
    rng = np.random.default_rng(9)
    tiles = [random_sparse_tile(M8, k, n, m, rng) for n, m, k in
             [(1, 8, 9), (2, 4, 6), (4, 8, 40), (1, 2, 3), (7, 8, 8)]]
    result = simulate_sparse(M8, tiles, seed=4, a_gap=0.7, b_gap=0.2, c_stall=0.9,
                             workdir=tmp_path)
    assert result["match"]
    check_outputs(M8, tiles, result)


@pytest.mark.parametrize("n, m", [(1, 4), (2, 8)])
def test_gemm_as_tiles_and_speedup_over_dense_mode(n, m, tmp_path):
    """A GEMM with edge tiles (M, N not multiples of R, C; K not of M) at
    N:M, and the same GEMM in dense mode (1:1) on the same array: both match
    and their cycle models, and the sparse run is faster by the beat ratio."""
    rng = np.random.default_rng(n * 10 + m)
    a = rng.integers(-128, 128, (7, 83))
    b = prune_nm(rng.integers(-128, 128, (83, 9)), n, m)
    sparse = simulate_sparse_product(M8, a, b, n, m, seed=5, workdir=tmp_path / "sparse")
    dense = simulate_sparse_product(M8, a, b, 1, 1, seed=5, workdir=tmp_path / "dense")
    for result in (sparse, dense):
        assert result["match"]
        assert np.array_equal(result["c"], saturating_matmul(a, b, 32))
    assert sparse["cycles"] == nm_gemm_cycles(M8, 7, 83, 9, n, m)
    assert dense["cycles"] == nm_gemm_cycles(M8, 7, 83, 9, 1, 1)
    speedup = dense["cycles"] / sparse["cycles"]
    assert speedup > 0.9 * 83 / nm_tile_beats(83, n, m)


SLOW_DESIGNS = [
    SparseConfig(rows=1, cols=1, m_max=2),
    SparseConfig(rows=4, cols=3, m_max=4, width=16, acc_width=40),
    SparseConfig(rows=5, cols=2, m_max=16, max_dsp=3),
    SparseConfig(rows=8, cols=8, m_max=8),
]


def all_patterns_tiles(config, seed):
    """Every N:M with M <= m_max, K cycling through awkward lengths, and the
    operand extremes of the config's width."""
    rng = np.random.default_rng(seed)
    patterns = [(n, m) for m in (1, 2, 4, 8, 16) if m <= config.m_max for n in range(1, m + 1)]
    tiles = [random_sparse_tile(config, [m, 2 * m + 1, 1, 3 * m - 1, 5][i % 5], n, m, rng)
             for i, (n, m) in enumerate(patterns)]
    lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
    m = config.m_max
    tiles += [random_sparse_tile(config, 4 * m + 3, 1, m, rng, extreme=(lo, lo)),
              random_sparse_tile(config, 2 * m, m, m, rng, extreme=(hi, lo))]
    return tiles


@pytest.mark.slow
@pytest.mark.parametrize("config", SLOW_DESIGNS, ids=lambda c: f"{c.name}-w{c.width}-dsp{c.max_dsp}")
def test_more_designs(config, tmp_path):
    tiles = all_patterns_tiles(config, config.rows * 10 + config.m_max)
    result = simulate_sparse(config, tiles, seed=1, workdir=tmp_path / "clean")
    assert result["match"] and result["cycles"] == result["model_cycles"]
    check_outputs(config, tiles, result)
    stalled = simulate_sparse(config, tiles, seed=2, a_gap=0.5, b_gap=0.3, c_stall=0.6,
                              workdir=tmp_path / "stalls")
    assert stalled["match"]
    check_outputs(config, tiles, stalled)
