"""``bertforge generate/sim/bench sparse``: outputs, JSON keys, user matrices,
pruning or refusing B, and the one-line errors for bad input.

Simulating tests use a 3x4 array with m_max 8, the design of
test_sparse_verilator.py (one Verilator build). ``bench sparse`` runs small
on that array by default; the full benchmark (8x8, BERT-base FFN shapes,
ECP5 synthesis) and its targets are under ``slow``."""

import argparse
import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from bertforge.generators.sparse_bench import PATTERNS, bench_sparse
from bertforge.rtl.sparse import SparseConfig
from bertforge.rtl.sparse_engine import SparseEngineConfig
from bertforge.sim.sparse_cycles import nm_gemm_cycles
from bertforge.sim.sparse_golden import is_nm_sparse, prune_nm
from cli_helpers import assert_one_line_error, npy_flags, run_cli

ARRAY = ["--rows", "3", "--cols", "4", "--m-max", "8"]
#: The sparse GEMM engine of test_sparse_engine_verilator.py (TINY: one build).
ENGINE = ["--rows", "2", "--cols", "2", "--m-max", "8", "--engine", "--mem-width", "64",
          "--k-chunk", "32", "--addr-width", "15"]


def test_generate_is_deterministic(tmp_path):
    for out in ("one", "two"):
        assert main(["generate", "sparse", "--rows", "2", "--cols", "3", "--m-max", "16",
                     "-o", str(tmp_path / out)]) == 0
    first = (tmp_path / "one" / "sparse_2x3_m16.v").read_bytes()
    assert first == (tmp_path / "two" / "sparse_2x3_m16.v").read_bytes()
    assert b"module sparse_2x3_m16(" in first
    sidecar = json.loads((tmp_path / "one" / "sparse_2x3_m16.json").read_text())
    assert sidecar["config"] == {"rows": 2, "cols": 3, "m_max": 16, "width": 8, "acc_width": 32}
    ports = {p["name"]: (p["direction"], p["width"]) for p in sidecar["ports"]}
    assert ports["a__payload"] == ("input", 2 * 16 * 8 + 1)
    assert ports["b__payload"] == ("input", 3 * 8 + 3 * 4 + 1)
    assert ports["c__payload"] == ("output", 3 * 32 + 1)


def test_sim_json(capsys):
    assert main(["sim", "sparse", *ARRAY, "--pattern", "2:8", "--m", "7", "--k", "61", "--n", "9",
                 "--seed", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    gemm_keys = ("cycles", "model_cycles", "ideal_cycles", "utilization", "match", "mismatches",
                 "stalls", "bound", "model_exact", "sim_cycles_per_second")
    for key in gemm_keys + ("speedup_vs_dense",):
        assert key in result
    assert result["match"] is True and result["dense_match"] is True
    assert result["cycles"] == result["model_cycles"] == nm_gemm_cycles(
        _config(), 7, 61, 9, 2, 8)
    assert result["dense_cycles"] == nm_gemm_cycles(_config(), 7, 61, 9, 1, 1)
    assert result["ideal_cycles"] == 3 * 3 * 16          # 9 tiles of ceil(61/8)*2 beats
    assert result["utilization"] == pytest.approx(result["ideal_cycles"] / result["cycles"])
    assert result["speedup_vs_dense"] == pytest.approx(result["dense_cycles"] / result["cycles"])
    assert result["speedup_vs_dense"] > 3.0


def _config():
    from bertforge.rtl.sparse import SparseConfig
    return SparseConfig(rows=3, cols=4, m_max=8)


def test_sim_user_matrices_are_pruned(tmp_path):
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (5, 21)).astype(np.int8)
    b = rng.integers(-128, 128, (21, 6)).astype(np.int16)
    assert main(["sim", "sparse", *ARRAY, "--pattern", "1:4", *npy_flags(tmp_path, a=a, b=b),
                 "--gap", "0.2", "--stall", "0.3"]) == 0
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.int32
    assert np.array_equal(c, a.astype(np.int64) @ prune_nm(b, 1, 4))


def test_b_is_pruned_accepts_a_sparse_b_and_refuses_a_dense_one(tmp_path):
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (3, 12))
    pruned = prune_nm(rng.integers(-128, 128, (12, 4)), 3, 8)
    assert is_nm_sparse(pruned, 3, 8)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "pruned.npy", pruned)
    np.save(tmp_path / "dense.npy", np.ones((12, 4), dtype=np.int64))
    ok = run_cli("sim", "sparse", *ARRAY, "--pattern", "3:8", "--a", "a.npy", "--b", "pruned.npy",
                 "--out", "c.npy", "--b-is-pruned", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert np.array_equal(np.load(tmp_path / "c.npy"), a @ pruned)
    bad = run_cli("sim", "sparse", *ARRAY, "--pattern", "3:8", "--a", "a.npy", "--b", "dense.npy",
                  "--out", "bad.npy", "--b-is-pruned", cwd=tmp_path)
    assert_one_line_error(bad, "bertforge: error: B (dense.npy) breaks the 3:8 pattern: weights "
                               "are not 3:8 sparse: group 0 (rows 0..7) of column 0 has 8 "
                               "non-zeros; prune with prune_nm first")
    assert not (tmp_path / "bad.npy").exists()
    assert not list(tmp_path.glob("*.tmp"))


def test_sim_engine_json_and_user_matrices(tmp_path, capsys):
    assert main(["sim", "sparse", *ENGINE, "--pattern", "2:8", "--m", "4", "--k", "64", "--n", "8",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tile_loop"] == "engine" and result["design"] == "sparse_engine_2x2_m8"
    assert result["match"] is True and result["dense_match"] is True
    assert result["model_exact"] is True
    assert result["cycles"] == result["model_cycles"]
    assert result["dense_cycles"] == result["dense_model_cycles"]
    assert result["speedup_vs_dense"] == pytest.approx(result["dense_cycles"] / result["cycles"])
    assert result["speedup_vs_dense"] > 2.5
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (5, 37))
    b = rng.integers(-128, 128, (37, 6))
    assert main(["sim", "sparse", *ENGINE, "--pattern", "1:4", *npy_flags(tmp_path, a=a, b=b),
                 "--stall", "0.2", "--gap", "0.1"]) == 0
    assert np.array_equal(np.load(tmp_path / "c.npy"), a @ prune_nm(b, 1, 4))


@pytest.mark.parametrize("args, message", [
    (["sim", "sparse", *ENGINE, "--pattern", "2:3", "--m", "4", "--k", "4", "--n", "4"],
     "the engine takes N:M with M a power of two, not 2:3"),
    (["sim", "sparse", "--pattern", "2:4", "--m", "4", "--k", "4", "--n", "4", "--k-chunk", "32"],
     "--mem-width, --k-chunk and --addr-width go with --engine"),
    (["sim", "sparse", *ENGINE, "--max-dsp", "2", "--pattern", "2:4", "--m", "4", "--k", "4", "--n", "4"],
     "--max-dsp does not apply to --engine"),
    (["sim", "sparse", "--rows", "2", "--cols", "2", "--engine", "--mem-width", "48", "--pattern", "2:4",
      "--m", "4", "--k", "4", "--n", "4"], "mem_width must be a power of two, not 48"),
    (["sim", "sparse", "--m", "4", "--k", "4", "--n", "4"], "the following arguments are required: --pattern"),
    (["sim", "sparse", "--pattern", "2-4", "--m", "4", "--k", "4", "--n", "4"],
     "a pattern is N:M with integers, like 2:4, not '2-4'"),
    (["sim", "sparse", "--pattern", "5:4", "--m", "4", "--k", "4", "--n", "4"], "n must be in 1..m = 4, not 5"),
    (["sim", "sparse", "--m-max", "8", "--pattern", "1:16", "--m", "4", "--k", "4", "--n", "4"],
     "m must be at most m_max = 8, not 16"),
    (["sim", "sparse", "--pattern", "2:4", "--m", "4"], "--m, --k and --n are required"),
    (["sim", "sparse", "--pattern", "2:4", "--m", "4", "--k", "4", "--n", "4", "--b-is-pruned"],
     "--b-is-pruned goes with --b"),
    (["sim", "sparse", "--pattern", "2:4", "--a", "x.npy"], "--a, --b and --out go together"),
    (["sim", "sparse", "--pattern", "2:4", "--m", "4000", "--k", "4000", "--n", "400"],
     "at most 4000000 per run"),
    (["generate", "sparse", "--m-max", "6", "-o", "o"], "m_max must be 2, 4, 8 or 16, not 6"),
    (["generate", "sparse", "--rows", "0", "-o", "o"], "rows must be a positive integer, not 0"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    assert_one_line_error(run_cli(*args, cwd=tmp_path), message)
    assert not (tmp_path / "o").exists()


def test_small_bench_writes_measured_speedups_and_area(tmp_path):
    shape = ("small", 5, 70, 7)
    engine = SparseEngineConfig(rows=2, cols=2, mem_width=64, k_chunk=32, m_tile=16, m_max=8,
                              addr_width=15)    # the engine build of test_sparse_engine_verilator.py
    results = bench_sparse(tmp_path, rows=3, cols=4, m_max=8, shapes=[shape], engine=engine)
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["benchmark"] == "sparse" and len(saved["results"]) == len(results)
    assert "| pattern |" in (tmp_path / "bench.md").read_text()
    config = SparseConfig(rows=3, cols=4, m_max=8)
    runs = [r for r in results if "pattern" in r and r["design"] == config.name]
    assert [r["pattern"] for r in runs] == ["dense" if n == m else f"{n}:{m}" for n, m in PATTERNS]
    on_engine = [r for r in results if r["design"] == engine.name]
    assert [r["pattern"] for r in on_engine] == [r["pattern"] for r in runs]
    assert all(r["match"] for r in on_engine)
    assert on_engine[0]["speedup_vs_dense"] == 1.0 < on_engine[-1]["speedup_vs_dense"]
    dense = nm_gemm_cycles(config, 5, 70, 7, 1, 1)
    for row, (n, m) in zip(runs, PATTERNS):
        assert row["match"]
        assert row["cycles"] == row["model_cycles"] == nm_gemm_cycles(config, 5, 70, 7, n, m)
        assert row["speedup_vs_dense"] == pytest.approx(dense / row["cycles"])
    area = {r["design"]: r for r in results if "lut4" in r}
    sparse, dense_area = area["sparse_3x4_m8"], area["systolic_3x4_os"]
    assert sparse["lut4"] > dense_area["lut4"] > 0
    assert sparse["lut_ratio"] == pytest.approx(sparse["lut4"] / dense_area["lut4"])
    assert sparse["mult18"] == dense_area["mult18"] == 12


@pytest.mark.slow
def test_full_bench_meets_the_targets(tmp_path):
    assert main(["bench", "sparse", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "bench.json").read_text())["results"]
    runs = [r for r in results if "pattern" in r]
    assert len(runs) == 18     # 2 shapes x 6 patterns as array tiles, 6 on the engine
    for row in runs:
        assert row["match"]
        if row["design"].startswith("sparse") or row["model_exact"]:
            assert row["cycles"] == row["model_cycles"]
        assert row["meets_target"], row
    area = {r["design"]: r for r in results if "lut4" in r}
    assert area["sparse_8x8_m8"]["lut_ratio"] < 1.6


def test_engine_keeps_the_arrays_multiply_fields():
    """``sim sparse --engine --multiply-stages 3``: the engine's array has them."""
    from bertforge.generators.sparse_engine_sim import engine_config
    array = SparseConfig(rows=2, cols=2, m_max=8, multiply_stages=3, multiplier_cell="ecp5")
    args = argparse.Namespace(mem_width=64, k_chunk=32, addr_width=15)
    config = engine_config(array, args, np.zeros((4, 8), int), np.zeros((8, 4), int), 2, 4)
    assert (config.multiply_stages, config.multiplier_cell) == (3, "ecp5")
    assert config.sparse == array
