"""``bertforge bench sweep`` on a cut-down set: one synthesis point per
run and 40 random points of each model-only grid (slow: real yosys, four
Ray start-ups)."""

import json

import pytest


@pytest.mark.slow
def test_bench_sweep_writes_its_results(tmp_path, monkeypatch):
    from bertforge.generators import sweep_bench
    monkeypatch.setattr(sweep_bench, "GRID_SPEC", sweep_bench.GRID_SPEC + "[sweep]\nrandom = 40\n")
    rows = sweep_bench.bench_sweep(tmp_path, arrays=["2x2"])
    saved = json.loads((tmp_path / "bench.json").read_text())["results"]
    assert [r["run"] for r in saved] == ["synth-1cpu", "synth-2cpu", "bert-base-1000", "minilm-1000"]
    assert [r["cpus"] for r in rows] == [1, 2, 2, 2]
    assert all(r["ok"] == r["points"] for r in rows)
    assert rows[0]["points"] == rows[1]["points"] == 1 and rows[2]["points"] == rows[3]["points"] == 40
    for row in rows:
        assert 0 < row["work_seconds"] and row["points_per_hour"] > 0
        # the work inside the points is less than the CPUs' wall time
        assert row["work_seconds"] < row["cpus"] * row["wall_seconds"]
    assert rows[1]["speedup"] > 0
    assert all(r["ray_start_seconds"] > 0 and r["ray_stop_seconds"] > 0 for r in rows[2:])
    assert (tmp_path / "sweep_bench.png").stat().st_size > 0
    assert "| bert-base-1000 |" in (tmp_path / "bench.md").read_text()
