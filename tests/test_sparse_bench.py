"""``bertforge bench sparse``: a small run on the 3x4 m_max 8 array of the
other sparse tests (one Verilator build) by default; the full benchmark
(8x8, BERT-base FFN shapes, ECP5 synthesis) and its targets under ``slow``."""

import json

import pytest

from bertforge.generators.cli import main
from bertforge.generators.sparse_bench import PATTERNS, bench_sparse
from bertforge.rtl.sparse import SparseConfig
from bertforge.rtl.sparse_engine import SparseEngineConfig
from bertforge.sim.sparse_cycles import nm_gemm_cycles


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
