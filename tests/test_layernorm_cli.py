"""``bertforge generate|sim|bench layernorm``: outputs, user data and the
one-line errors for bad input (the simulations use the 4-lane h_max 64
design of test_layernorm_verilator.py)."""

import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from bertforge.sim.layernorm_golden import layernorm_golden

from helpers import LAYERNORM_SMALL as SMALL


def test_cli_sim_random_json(capsys):
    assert main(["sim", "layernorm", "--lanes", "4", "--h-max", "64", "--vectors", "3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] and out["cycles"] == out["model_cycles"]
    assert out["ideal_cycles"] == 48 and out["max_abs_err"] <= 1


def test_cli_sim_user_data(tmp_path):
    rng = np.random.default_rng(10)
    x = rng.integers(-3000, 3000, (3, 32)).astype(np.int16)
    r = rng.integers(-3000, 3000, (3, 32)).astype(np.int16)
    gamma = rng.integers(-128, 128, 32).astype(np.int8)
    beta = rng.integers(-128, 128, 32).astype(np.int8)
    for name, array in (("x", x), ("r", r), ("g", gamma), ("b", beta)):
        np.save(tmp_path / f"{name}.npy", array)
    args = ["sim", "layernorm", "--lanes", "4", "--h-max", "64", "--x", str(tmp_path / "x.npy"),
            "--residual", str(tmp_path / "r.npy"), "--gamma", str(tmp_path / "g.npy"),
            "--beta", str(tmp_path / "b.npy"), "--out", str(tmp_path / "y.npy"), "--stall", "0.3"]
    assert main(args) == 0
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.int8 and y.shape == (3, 32)
    for k in range(3):
        assert np.array_equal(y[k], layernorm_golden(SMALL, x[k], r[k], gamma, beta))


@pytest.mark.parametrize("setup, args, message", [
    (lambda d: (d / "x.npy").write_bytes(b"\x93NUMPY garbage"), ["--x", "{d}/x.npy"],
     "is not a readable .npy file"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 6), np.int16)), ["--x", "{d}/x.npy"],
     "multiple of lanes=4"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 128), np.int16)), ["--x", "{d}/x.npy"],
     "at most h_max=64"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 8), np.int16)), ["--x", "{d}/x.npy"],
     "give --residual R.npy"),
    (lambda d: [np.save(d / "x.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "r.npy", np.zeros((2, 4), np.int16))],
     ["--x", "{d}/x.npy", "--residual", "{d}/r.npy"], "it must have the shape of X"),
    (lambda d: [np.save(d / "x.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "r.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "g.npy", np.zeros(8, np.int16) + 300)],
     ["--x", "{d}/x.npy", "--residual", "{d}/r.npy", "--gamma", "{d}/g.npy", "--beta", "{d}/g.npy"],
     "int8 values must lie in"),
    (lambda d: [np.save(d / "x.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "r.npy", np.zeros((2, 8), np.int16))],
     ["--x", "{d}/x.npy", "--residual", "{d}/r.npy", "--gamma", "{d}/r.npy"],
     "--gamma and --beta go together"),
    (lambda d: None, ["--length", "6"], "multiple of lanes=4"),
    (lambda d: None, ["--h-max", "62"], "h_max must be a multiple of lanes (4), not 62"),
])
def test_cli_bad_input(tmp_path, capsys, setup, args, message):
    setup(tmp_path)
    argv = ["sim", "layernorm", "--lanes", "4", "--h-max", "64"]
    argv += [a.format(d=tmp_path) for a in args]
    if "--x" in args:
        argv += ["--out", str(tmp_path / "y.npy")]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y.npy").exists()


def test_cli_generate(tmp_path):
    assert main(["generate", "layernorm", "--lanes", "2", "--h-max", "8", "-o", str(tmp_path)]) == 0
    sidecar = json.loads((tmp_path / "layernorm_l2_h8_i16_p8_res.json").read_text())
    names = {port["name"] for port in sidecar["ports"]}
    assert {"x__payload", "r__valid", "params__payload", "y__ready"} <= names


@pytest.mark.slow
def test_bench_layernorm_small(tmp_path):
    from bertforge.generators.layernorm_sim import bench_layernorm
    rows = bench_layernorm(tmp_path, lanes=(4,), vectors=4, length=64, synth=True)
    assert rows[0]["match"] and rows[0]["cycles"] == rows[0]["model_cycles"]
    assert rows[0]["ecp5_luts"] > 0
    assert (tmp_path / "bench.md").exists()
