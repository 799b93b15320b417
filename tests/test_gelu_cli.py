"""``bertforge generate|sim|bench gelu``: outputs, user data and the one-line
errors for bad input."""

import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from bertforge.sim.gelu_golden import gelu_golden

from helpers import GELU_DEFAULT as DEFAULT


def test_cli_sim_random_json(capsys):
    assert main(["sim", "gelu", "--rows", "2", "--length", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] and out["cycles"] == out["model_cycles"] == 128 + 6
    assert out["ideal_cycles"] == 128 and 0.9 < out["utilization"] < 1
    assert out["max_abs_err"] <= 0.0018 + 1 / 32


def test_cli_sim_user_data(tmp_path, capsys):
    x = np.arange(-128, 128, dtype=np.int8).reshape(4, 64)
    np.save(tmp_path / "x.npy", x)
    assert main(["sim", "gelu", "--x", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy"),
                 "--gap", "0.2", "--stall", "0.2"]) == 0
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.int8 and np.array_equal(y, gelu_golden(DEFAULT, x))


@pytest.mark.parametrize("setup, args, message", [
    (lambda d: (d / "x.npy").write_text("not numpy"), ["--x", "{d}/x.npy", "--out", "{d}/y.npy"],
     "is not a .npy file"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 3), np.float32)),
     ["--x", "{d}/x.npy", "--out", "{d}/y.npy"], "holds float32 values"),
    (lambda d: np.save(d / "x.npy", np.full((2, 4), 300)),
     ["--x", "{d}/x.npy", "--out", "{d}/y.npy"], "int8 values must lie in"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 5), np.int8)),
     ["--x", "{d}/x.npy", "--out", "{d}/y.npy", "--lanes", "2"], "multiple of lanes=2"),
    (lambda d: None, ["--x", "{d}/missing.npy", "--out", "{d}/y.npy"], "does not exist"),
    (lambda d: None, ["--x", "{d}/missing.npy"], "--x and --out go together"),
    (lambda d: None, ["--lanes", "0"], "lanes must be a positive integer, not 0"),
    (lambda d: None, ["--scale", "-1"], "must be a positive number"),
])
def test_cli_bad_input(tmp_path, capsys, setup, args, message):
    setup(tmp_path)
    code = main(["sim", "gelu"] + [a.format(d=tmp_path) for a in args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y.npy").exists()


def test_cli_generate(tmp_path):
    assert main(["generate", "gelu", "--preset", "lanes4", "-o", str(tmp_path)]) == 0
    text = (tmp_path / "gelu_l4_i8_o8.v").read_text()
    assert "module gelu_l4_i8_o8" in text
    sidecar = json.loads((tmp_path / "gelu_l4_i8_o8.json").read_text())
    assert sidecar["config"]["lanes"] == 4


@pytest.mark.slow
def test_bench_gelu_small(tmp_path):
    from bertforge.generators.gelu_sim import bench_gelu
    rows = bench_gelu(tmp_path, lanes=(1,), rows=2, synth=True)
    assert rows[0]["match"] and rows[0]["cycles"] == rows[0]["model_cycles"]
    assert rows[0]["ecp5_luts"] > 0
