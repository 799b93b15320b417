"""GELU unit: parameters, golden model accuracy, emitted Verilog in
Verilator against the golden and cycle models, command line."""

import dataclasses
import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from bertforge.generators.emit import emit_verilog
from bertforge.generators.gelu_sim import random_gelu_input, simulate_gelu
from bertforge.rtl.gelu import GeluConfig
from bertforge.sim.gelu_cycles import gelu_cycles
from bertforge.sim.gelu_golden import (gelu_config_for_scales, gelu_float, gelu_golden,
                                       gelu_internal, ratio_to_mult_shift)

#: int16 in (LSB 2**-10) and int16 out (LSB 2**-11): the 0.02 bound holds end to end.
WIDE = GeluConfig(lanes=3, in_width=16, out_width=16, in_mult=1, in_shift=0, out_mult=1, out_shift=3)
#: int32 in, int8 out, a non-power-of-two input scale.
INT32 = gelu_config_for_scales(GeluConfig(lanes=4, in_width=32), 0.0007, 1 / 16)
#: the default: int8 in and out, LSB 1/16.
DEFAULT = GeluConfig()


@pytest.mark.parametrize("field, value, error, message", [
    ("lanes", 0, ValueError, r"^lanes must be a positive integer, not 0$"),
    ("lanes", 65, ValueError, r"^lanes must be an integer <= 64, not 65$"),
    ("lanes", 2.0, TypeError, r"^lanes must be an integer, not 2\.0$"),
    ("in_width", 12, ValueError, r"^in_width must be 8, 16 or 32, not 12$"),
    ("out_width", 32, ValueError, r"^out_width must be 8 or 16, not 32$"),
    ("in_mult", 0, ValueError, r"^in_mult must be a positive integer, not 0$"),
    ("in_shift", -1, ValueError, r"^in_shift must be a non-negative integer, not -1$"),
    ("out_shift", 63, ValueError, r"^out_shift must be an integer <= 62, not 63$"),
    ("out_mult", True, TypeError, r"^out_mult must be an integer, not True$"),
])
def test_bad_parameters(field, value, error, message):
    with pytest.raises(error, match=message):
        GeluConfig(**{field: value})


def test_component_needs_config():
    from bertforge.rtl.gelu import Gelu
    with pytest.raises(TypeError, match=r"^config must be a GeluConfig, not 3$"):
        Gelu(3)


def test_ratio_to_mult_shift():
    assert ratio_to_mult_shift(64.0) == (64, 0)
    assert ratio_to_mult_shift(2.0 ** -10) == (1, 10)
    mult, shift = ratio_to_mult_shift(0.037)
    assert mult < 1 << 16 and abs(mult / 2 ** shift / 0.037 - 1) < 2 ** -15
    with pytest.raises(ValueError, match=r"^scale ratio must be a positive finite number, not 0\.0$"):
        ratio_to_mult_shift(0.0)


def test_golden_error_bound_every_q8_10_input():
    """Before the output rounding the table is within 0.0018 of GELU for
    every Q8.10 input in [-8, 8] (and the saturated tails)."""
    config = GeluConfig(in_width=32, in_mult=1)
    raw = np.arange(-130 * 1024, 130 * 1024)
    x, y = gelu_internal(config, raw)
    err = np.abs(y / 2 ** 14 - gelu_float(x / 1024))
    assert err.max() <= 0.0018
    assert np.array_equal(x, np.clip(raw, -(1 << 17), (1 << 17) - 1))


def test_golden_end_to_end_error():
    """int16 output: within 0.02 of float GELU over [-8, 8]; int8 output
    (LSB 1/16): within 0.0018 + half an LSB."""
    raw = np.arange(-8 * 1024, 8 * 1024 + 1)
    err = np.abs(gelu_golden(WIDE, raw) * WIDE.out_scale - gelu_float(raw * WIDE.in_scale))
    assert err.max() <= 0.02 and err.max() <= 0.0018 + WIDE.out_scale / 2
    raw8 = np.arange(-128, 128)
    err8 = np.abs(gelu_golden(DEFAULT, raw8) * DEFAULT.out_scale - gelu_float(raw8 / 16))
    assert err8.max() <= 0.0018 + DEFAULT.out_scale / 2


def test_cycle_model():
    assert gelu_cycles(DEFAULT, 1) == 7
    assert gelu_cycles(DEFAULT, 100) == 106
    with pytest.raises(ValueError):
        gelu_cycles(DEFAULT, 0)


def test_verilog_is_deterministic():
    assert emit_verilog(WIDE) == emit_verilog(dataclasses.replace(WIDE))
    assert "module gelu_l3_i16_o16" in emit_verilog(WIDE)


def _extremes(config, length):
    lo, hi = -(1 << (config.in_width - 1)), (1 << (config.in_width - 1)) - 1
    return np.array([[lo] * length, [hi] * length, [lo, hi, 0, -1, 1, lo + 1] * (length // 6)])


def test_verilator_wide_random_extremes_and_stalls():
    """int16: random rows, [-8, 8] sweep, extremes; then the same with gaps
    and stalls. Bit-exact, cycles == model, error <= 0.02 in [-8, 8]."""
    rng = np.random.default_rng(1)
    sweep = np.arange(-8 * 1024, 8 * 1024 + 1, 7)[:2334].reshape(2, 1167)[:, :1167 - 1167 % 3]
    rows = [random_gelu_input(WIDE, 5, 96, rng)]
    data = np.concatenate([r[:, :96] for r in rows] + [_extremes(WIDE, 96)])
    clean = simulate_gelu(WIDE, data, seed=1)
    assert clean["match"] and clean["passed"]
    assert clean["cycles"] == clean["model_cycles"] == gelu_cycles(WIDE, data.size // 3)
    assert np.array_equal(clean["outputs"], gelu_golden(WIDE, data))
    swept = simulate_gelu(WIDE, sweep, seed=2)
    assert swept["match"] and swept["cycles"] == swept["model_cycles"]
    assert swept["max_abs_err"] <= 0.02
    stalled = simulate_gelu(WIDE, data, seed=3, x_gap=0.3, y_stall=0.4)
    assert stalled["match"] and stalled["passed"] and stalled["cycles"] > stalled["model_cycles"]
    assert np.array_equal(stalled["outputs"], clean["outputs"])


def test_verilator_int32_extremes_and_stalls():
    rng = np.random.default_rng(2)
    data = np.concatenate([random_gelu_input(INT32, 3, 48, rng), _extremes(INT32, 48),
                           rng.integers(-(1 << 31), 1 << 31, (2, 48))])
    result = simulate_gelu(INT32, data, seed=4, x_gap=0.2, y_stall=0.5)
    assert result["match"] and result["passed"]
    assert np.array_equal(result["outputs"], gelu_golden(INT32, data))
    clean = simulate_gelu(INT32, data[:1], seed=5)
    assert clean["match"] and clean["cycles"] == clean["model_cycles"] == 12 + 6


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
