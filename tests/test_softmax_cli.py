"""``bertforge generate|sim softmax``: outputs, user data and bad input.

The simulations reuse the 4-lane, l_max = 24 design of
``test_softmax_verilator.py`` (one Verilator build, cached).
"""

import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.softmax_golden import row_scales, softmax_golden

DESIGN = ["--lanes", "4", "--l-max", "24"]


def test_generate_is_byte_identical(tmp_path, capsys):
    assert main(["generate", "softmax", *DESIGN, "-o", str(tmp_path / "a")]) == 0
    assert main(["generate", "softmax", "--preset", "default", *DESIGN, "-o", str(tmp_path / "b")]) == 0
    name = "softmax_4x24_i32_o8"
    first = (tmp_path / "a" / f"{name}.v").read_bytes()
    assert first == (tmp_path / "b" / f"{name}.v").read_bytes()
    sidecar = json.loads((tmp_path / "a" / f"{name}.json").read_text())
    assert sidecar["config"] == SoftmaxConfig(lanes=4, l_max=24).to_dict()


def test_sim_json_keys(capsys):
    assert main(["sim", "softmax", *DESIGN, "--rows", "6", "--length", "22", "--gap", "0.2",
                 "--stall", "0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("cycles", "model_cycles", "ideal_cycles", "utilization", "match", "max_abs_err",
                "mean_abs_err"):
        assert key in out
    assert out["match"] and out["stalls"] and out["ideal_cycles"] == 6 * 22 // 4
    assert out["max_abs_err"] <= 2 / 256


def test_sim_user_rows(tmp_path, capsys):
    rng = np.random.default_rng(3)
    x = rng.integers(-20000, 20000, (5, 19)).astype(np.int32)
    mask = rng.random((5, 19)) < 0.2
    mask[:, 0] = False
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "m.npy", mask)
    assert main(["sim", "softmax", *DESIGN, "--x", str(tmp_path / "x.npy"), "--x-mask",
                 str(tmp_path / "m.npy"), "--scale", "0.0005", "--out", str(tmp_path / "y.npy"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] and out["cycles"] == out["model_cycles"]
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.uint8 and y.shape == x.shape
    config = SoftmaxConfig(lanes=4, l_max=24)
    multipliers, shifts = row_scales(0.0005, 5)
    assert np.array_equal(y, softmax_golden(config, x, mask, multipliers, shifts))


@pytest.mark.parametrize("setup, args, message", [
    (lambda p: (p / "x.npy").write_text("hello"), ["--x", "{p}/x.npy", "--out", "{p}/y.npy"],
     "is not a .npy file"),
    (lambda p: np.save(p / "x.npy", np.zeros((2, 30), np.int32)),
     ["--x", "{p}/x.npy", "--out", "{p}/y.npy"], "at most l_max = 24"),
    (lambda p: np.save(p / "x.npy", np.zeros(5, np.int32)),
     ["--x", "{p}/x.npy", "--out", "{p}/y.npy"], "must have 2 dimensions"),
    (lambda p: np.save(p / "x.npy", np.zeros((2, 5), np.float32)),
     ["--x", "{p}/x.npy", "--out", "{p}/y.npy"], "it must hold integers"),
    (lambda p: (np.save(p / "x.npy", np.zeros((2, 5), np.int32)), np.save(p / "m.npy", np.zeros((2, 4), bool))),
     ["--x", "{p}/x.npy", "--x-mask", "{p}/m.npy", "--out", "{p}/y.npy"], "must match X's (2, 5)"),
    (lambda p: np.save(p / "x.npy", np.zeros((2, 5), np.int32)),
     ["--x", "{p}/x.npy", "--out", "{p}/y.npy", "--scale", "-1"], "scale must be a positive"),
    (lambda p: np.save(p / "x.npy", np.zeros((2, 5), np.int32)), ["--x", "{p}/x.npy"],
     "--x and --out go together"),
    (lambda p: None, ["--length", "25"], "longer than l_max = 24"),
    (lambda p: None, ["--lanes", "0"], "lanes must be a positive integer, not 0"),
])
def test_sim_rejects_bad_input(setup, args, message, tmp_path, capsys):
    setup(tmp_path)
    args = [a.format(p=tmp_path) for a in args]
    assert main(["sim", "softmax", *DESIGN, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bertforge: error: ") and message in err
    assert not (tmp_path / "y.npy").exists()


def test_sim_without_mask_needs_whole_beats(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((2, 6), np.int32))
    assert main(["sim", "softmax", *DESIGN, "--mask", "false", "--x", str(tmp_path / "x.npy"),
                 "--out", str(tmp_path / "y.npy")]) == 2
    assert "multiple of lanes = 4" in capsys.readouterr().err
