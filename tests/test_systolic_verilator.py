"""cocotb tests of the emitted SystolicArray Verilog in Verilator.

Per design: one run with mixed tiles back to back (random data of several K,
K = 1, K < R, extremes) that must match the golden model bit for bit and the
cycle model to the cycle; one run of the same tiles with random input gaps and
output backpressure that must match with nothing lost or duplicated.
"""

import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from bertforge.generators.systolic_sim import (bf16_errors, random_systolic_tiles, simulate_systolic,
                                               systolic_operand_shapes)
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim.coverage import uncovered
from bertforge.sim.systolic_golden import result_words, systolic_golden

DESIGNS = [
    SystolicConfig(rows=r, cols=c, dataflow=df, width=w)
    for (r, c) in [(1, 1), (2, 3), (3, 5), (4, 4), (8, 8)]
    for df in ("os", "ws")
    for w in ((8, 16) if (r, c) in [(2, 3), (3, 5), (8, 8)] else (8,))
] + [
    # int8 with a 16-bit accumulator: -128 * -128 saturates after two steps.
    SystolicConfig(rows=2, cols=2, dataflow=df, width=8, acc_width=16) for df in ("os", "ws")
] + [
    # 4 of 15 PEs multiply with *, the rest with logic (boards with few DSPs).
    SystolicConfig(rows=3, cols=5, dataflow="ws", max_dsp=4),
] + [
    # Pipelined multiplies: inferred, ECP5 MULT18X18D cells (with the
    # cell's simulation model) and, past max_dsp, pipelined logic multipliers.
    SystolicConfig(rows=r, cols=c, dataflow=df, width=w, max_dsp=dsp, multiply_stages=s,
                   multiplier_cell=cell)
    for (r, c, w, dsp, s, cell) in [(3, 4, 8, None, 2, "inferred"), (3, 4, 8, 7, 3, "ecp5"),
                                    (2, 3, 16, 4, 2, "ecp5"), (1, 1, 8, None, 3, "ecp5")]
    for df in ("os", "ws")
] + [
    # bf16 PEs: sizes 1x1 to 8x8; pipelined (inferred and ECP5 cells) with
    # logic multipliers past max_dsp.
    SystolicConfig(rows=r, cols=c, dataflow=df, arith="bf16")
    for (r, c) in [(1, 1), (2, 3), (3, 5), (4, 4), (8, 8)] for df in ("os", "ws")
] + [
    SystolicConfig(rows=2, cols=2, dataflow=df, arith="bf16", max_dsp=3, multiply_stages=s,
                   multiplier_cell=cell)
    for (s, cell) in [(2, "inferred"), (3, "ecp5")] for df in ("os", "ws")
]


def design_id(config):
    dsp = "" if config.max_dsp is None else f"-dsp{config.max_dsp}"
    stages = "" if config.multiply_stages == 1 else f"-s{config.multiply_stages}-{config.multiplier_cell}"
    bf16 = "-bf16" if config.arith == "bf16" else ""
    return (f"{config.rows}x{config.cols}-{config.dataflow}-w{config.width}-acc{config.acc_width}"
            f"{dsp}{stages}{bf16}")


def bf16(values):
    return np.asarray(values, dtype=np.float64).astype(ml_dtypes.bfloat16)


def bf16_extreme_tiles(config, k):
    """Max and min normals, subnormals (zeros), both zeros, Inf and NaN,
    cancellation and order-dependent rounding, as bf16 tiles."""
    shape_a, shape_b = systolic_operand_shapes(config, k)
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    small = float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_normal)
    sub = float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)
    rng = np.random.default_rng(k)
    # along each row of a (the summed axis in both dataflows):
    # [2**24, 1, 1, ..., -2**24]: every +1 rounds away at 2**24, the sum is 0
    ordered = np.ones(shape_a)
    ordered[:, 0] = 2.0 ** 24
    if shape_a[1] > 1:
        ordered[:, -1] = -(2.0 ** 24)
    pick = lambda shape, values: rng.choice(values, size=shape)
    signs = lambda shape: rng.choice([-1.0, 1.0], size=shape)
    specials = pick(shape_a, [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, 3.0, -2.0])
    return [
        (bf16(np.full(shape_a, big)), bf16(np.full(shape_b, -big))),                  # -inf
        (bf16(np.full(shape_a, big)), bf16(np.full(shape_b, big)) * signs(shape_b)),  # overflow
        (bf16(np.full(shape_a, small)), bf16(np.full(shape_b, -small)) * signs(shape_b)),  # flush
        (bf16(pick(shape_a, [sub, -sub, 127 * sub, 1.0])), bf16(pick(shape_b, [sub, 1.0, -2.0]))),
        (bf16(np.full(shape_a, -2.0 ** -70)), bf16(np.full(shape_b, 2.0 ** -60))),     # -0
        (bf16(np.full(shape_a, -2.0 ** -70)), bf16(pick(shape_b, [2.0 ** -60, -0.0, 0.0]))),
        (bf16(specials), bf16(pick(shape_b, [0.0, 1.0, -1.0, np.inf, 2.0 ** 100]))),
        (bf16(ordered), bf16(np.ones(shape_b))),
        (bf16(pick(shape_a, [big, small, 1.0, 2.0 ** -100, 2.0 ** 100]) * signs(shape_a)),
         bf16(pick(shape_b, [big, small, 1.0, 2.0 ** -30, 2.0 ** 30]) * signs(shape_b))),
        (bf16(pick(shape_a, [3.0, -3.0, 1.5, -1.5])), bf16(pick(shape_b, [1.0, -1.0]))),  # x - x = +0
    ]


def extreme_tiles(config, k):
    if config.arith == "bf16":
        return bf16_extreme_tiles(config, k)
    lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
    shape_a, shape_b = systolic_operand_shapes(config, k)
    alternating = np.where(np.indices(shape_a).sum(axis=0) % 2 == 0, lo, hi)
    return [
        (np.full(shape_a, lo), np.full(shape_b, lo)),   # -128 * -128, all of K
        (np.full(shape_a, hi), np.full(shape_b, lo)),   # most negative products
        (alternating, np.full(shape_b, hi)),
        (np.zeros(shape_a, dtype=np.int64), np.full(shape_b, hi)),
    ]


def pair_tiles(config, rng):
    """Short tiles whose K kinds (1, 2 to R, longer: ``sim.systolic_tb.k_kind``)
    follow each other in every order; one holds -1, 0 and +1 operands."""
    rows = config.rows
    ks = [1, 1, rows, rows, rows + 2, rows + 2, 1, rows + 2, rows, 1] if rows > 1 else [1, 1, 3, 3, 1]
    tiles = [random_systolic_tiles(config, k, 1, rng)[0] for k in ks + [3]]
    if config.arith == "int":
        a, b = tiles[-1]
        tiles[-1] = (np.resize([-1, 0, 1], a.shape), np.resize([1, -1, 0], b.shape))
    return tiles


#: Cover points no run can hit, and why: the array takes an ``a`` (and in OS
#: a ``b``) beat only when it is valid (``ready`` is computed from
#: ``valid``, as stream rules allow), so ready without valid never shows.
WAIVED = {"systolic.a.idle:True", "systolic.b.idle:True"}
#: An OS array of one row gives one result row per tile: ``last`` on every row.
WAIVED_ONE_ROW_OS = {"systolic.c.last:False"}


def mixed_tiles(config, seed):
    rng = np.random.default_rng(seed)
    rows = config.rows
    tiles = pair_tiles(config, rng)
    for k in sorted({1, max(1, rows - 1), rows, rows + 3, 2 * rows + 5}, key=lambda k: (k * 7) % 5):
        tiles += random_systolic_tiles(config, k, 1, rng)
    tiles += extreme_tiles(config, 3 * rows + 40)
    tiles += random_systolic_tiles(config, rows + 1, 2, rng)
    if config.arith == "bf16":
        tiles += random_systolic_tiles(config, 1000, 1, rng)    # long K
    return tiles


def check_outputs(config, tiles, result):
    """Bit for bit (bf16: binary32 bit patterns, so NaNs and zeros' signs count)."""
    assert len(result["outputs"]) == len(tiles)
    for (a, b), got in zip(tiles, result["outputs"]):
        assert np.array_equal(result_words(config, got), result_words(config, systolic_golden(config, a, b)))


#: The sweep's other designs run with ``-m slow``; the default run keeps one
#: of each kind: 1x1, ws and os, w16, 8x8, a 16-bit accumulator, max_dsp,
#: inferred and ECP5 pipelined multipliers (and the models that other tests
#: here build anyway: 3x5 both dataflows, 2x3 ws, 2x2 os acc16).
DEFAULT_DESIGNS = {"1x1-os-w8-acc32", "2x3-ws-w8-acc32", "2x3-ws-w16-acc32", "3x5-os-w8-acc32",
                   "3x5-ws-w8-acc32", "4x4-os-w8-acc32", "8x8-ws-w8-acc32", "2x2-os-w8-acc16",
                   "3x5-ws-w8-acc32-dsp4", "3x4-os-w8-acc32-s2-inferred",
                   "3x4-ws-w8-acc32-dsp7-s3-ecp5",
                   "2x3-ws-w16-acc32-bf16", "2x2-os-w16-acc32-dsp3-s3-ecp5-bf16"}


@pytest.mark.parametrize("config", [
    c if design_id(c) in DEFAULT_DESIGNS else pytest.param(c, marks=pytest.mark.slow)
    for c in DESIGNS], ids=design_id)
def test_tiles_match_golden_and_cycle_model(config, tmp_path):
    tiles = mixed_tiles(config, seed=config.rows * 100 + config.cols)
    result = simulate_systolic(config, tiles, seed=1, workdir=tmp_path / "clean")
    assert result["passed"], result["log"]
    assert result["match"]
    assert result["cycles"] == result["model_cycles"]
    check_outputs(config, tiles, result)

    stalled = simulate_systolic(config, tiles, seed=2, a_gap=0.3, b_gap=0.4, c_stall=0.6,
                                workdir=tmp_path / "stalls")
    assert stalled["passed"], stalled["log"]
    assert stalled["match"]
    assert stalled["cycles"] > result["cycles"]
    check_outputs(config, tiles, stalled)
    # every functional cover point (sim/funcov_tb.py) of the two runs
    one_row_os = config.dataflow == "os" and config.rows == 1
    assert uncovered([result, stalled], WAIVED | (WAIVED_ONE_ROW_OS if one_row_os else set())) == []
    if config.arith == "bf16":
        # the extremes' sums include every special value; random tiles are
        # within the rounding-error bound of a float64 GEMM
        got = np.concatenate([o.ravel() for o in result["outputs"]]).view(np.uint32)
        for word in (0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0):
            assert word in got
        rows = config.rows
        randoms = [*range(len({1, max(1, rows - 1), rows, rows + 3, 2 * rows + 5})), len(tiles) - 1]
        errors = bf16_errors([tiles[i] for i in randoms], [result["outputs"][i] for i in randoms])
        assert errors["max_err_to_bound"] < 1
        if config.dataflow == "os" or rows > 1:      # else every sum is one product: exact
            assert errors["max_err_to_bound"] > 0


def test_saturation_is_reached_in_int8_with_16_bit_accumulators(tmp_path):
    config = SystolicConfig(rows=2, cols=2, dataflow="os", width=8, acc_width=16)
    tiles = extreme_tiles(config, 4)
    result = simulate_systolic(config, tiles, seed=3, workdir=tmp_path)
    assert result["match"]
    assert np.all(result["outputs"][0] == 32767)
    assert np.all(result["outputs"][1] == -32768)


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_heavy_backpressure_and_sparse_input(dataflow, tmp_path):
    config = SystolicConfig(rows=3, cols=5, dataflow=dataflow)
    tiles = random_systolic_tiles(config, 6, 5, np.random.default_rng(9))
    result = simulate_systolic(config, tiles, seed=4, a_gap=0.7, b_gap=0.2, c_stall=0.9,
                               workdir=tmp_path)
    assert result["match"]
    check_outputs(config, tiles, result)


def test_waveform_on_request(tmp_path):
    config = SystolicConfig(rows=2, cols=3, dataflow="ws")
    tiles = random_systolic_tiles(config, 3, 2, np.random.default_rng(1))
    result = simulate_systolic(config, tiles, waves=True, workdir=tmp_path)
    assert result["match"]
    assert result["waves"].endswith(".fst")
    with open(result["waves"], "rb") as f:
        assert len(f.read()) > 100


def test_failing_run_is_rerun_with_a_kept_waveform(tmp_path, monkeypatch):
    from bertforge.generators.simulate import cached_verilog
    from bertforge.sim import runner
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = SystolicConfig(rows=2, cols=3, dataflow="ws")
    result = runner.run(cached_verilog(config, SystolicArray), config.name, "cocotb_always_fails", {})
    assert result["passed"] is False
    assert result["waves"].endswith("dump.fst")
    with open(result["waves"], "rb") as f:
        assert len(f.read()) > 100


def test_run_directory_removed_after_a_pass_kept_after_a_failure(tmp_path, monkeypatch):
    """A run without ``workdir`` leaves nothing in the temporary directory
    once it passed; a failed run keeps its directory and log."""
    from bertforge.generators.simulate import simulate
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = SystolicConfig(rows=2, cols=3, dataflow="ws")
    tiles = random_systolic_tiles(config, 3, 2, np.random.default_rng(1))
    passed = simulate_systolic(config, tiles)
    assert passed["passed"] and passed["match"] and "log" not in passed
    assert list(tmp_path.iterdir()) == []
    failed = simulate(config, "cocotb_always_fails", {}, design=SystolicArray)
    assert failed["passed"] is False
    assert Path(failed["log"]).parent.parent == tmp_path and Path(failed["log"]).is_file()
