"""``bertforge generate/sim gemm``: outputs, JSON keys, user matrices and bad input.

The simulating tests use the ``tiny`` preset with ``--addr-width 15``, the
same hardware as ``TINY`` in test_gemm_verilator.py (one Verilator build)."""

import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from cli_helpers import npy_flags

TINY = ["--preset", "tiny", "--addr-width", "15"]


def test_generate_is_deterministic(tmp_path):
    for out in ("one", "two"):
        assert main(["generate", "gemm", "--rows", "2", "--cols", "3", "--dataflow", "ws",
                     "--mem-width", "64", "--k-chunk", "16", "-o", str(tmp_path / out)]) == 0
    first = (tmp_path / "one" / "gemm_2x3_ws.v").read_text()
    assert first == (tmp_path / "two" / "gemm_2x3_ws.v").read_text()
    assert "module gemm_2x3_ws" in first
    ports = {p["name"] for p in json.loads((tmp_path / "one" / "gemm_2x3_ws.json").read_text())["ports"]}
    assert {"cmd__valid", "done__payload", "rd_req__ready", "rd_data__payload", "wr_req__valid"} <= ports


def test_sim_json(capsys):
    assert main(["sim", "gemm", *TINY, "--m", "7", "--k", "13", "--n", "5", "--seed", "3",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("cycles", "model_cycles", "ideal_cycles", "utilization", "match"):
        assert key in result
    assert result["match"] is True and result["max_lsb_error_vs_float"] is None
    assert result["ideal_cycles"] == 7 * 13 * 5 / 4
    assert result["utilization"] == pytest.approx(result["ideal_cycles"] / result["cycles"])


def test_sim_user_matrices(tmp_path, capsys):
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (9, 33)).astype(np.int8)
    b = rng.integers(-128, 128, (33, 6)).astype(np.int16)
    assert main(["sim", "gemm", *TINY, *npy_flags(tmp_path, a=a, b=b), "--mem-latency", "7",
                 "--stall", "0.2", "--gap", "0.2"]) == 0
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.int32
    assert np.array_equal(c, a.astype(np.int64) @ b.astype(np.int64))
    assert "match" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--m", "3", "--k", "3"], r"--m, --k and --n are required"),
    (["--m", "3", "--k", "3", "--n", "0"], r"must be a positive integer, not 0"),
    (["--m", "3", "--k", "3", "--n", "3", "--shift", "64"], r"--shift must be in 0\.\.63, not 64"),
    (["--m", "3", "--k", "3", "--n", "3", "--mem-latency", "0"], r"--mem-latency must be in 1\.\.255"),
    (["--m", "3", "--k", "3", "--n", "3", "--addr-width", "32"], r"the simulated memory is 2\*\*addr_width"),
    (["--m", "3", "--k", "3", "--n", "3", "--rows", "0"], r"rows must be a positive integer, not 0"),
    (["--m", "3", "--k", "3", "--n", "3", "--k-chunk", "20"], r"k_chunk must be a multiple"),
])
def test_bad_input(args, message, capsys):
    assert main(["sim", "gemm", "--preset", "tiny", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bertforge: error: ")
    assert __import__("re").search(message, err), err


def test_bad_files(tmp_path, capsys):
    (tmp_path / "junk.npy").write_text("not numpy")
    np.save(tmp_path / "a.npy", np.zeros((3, 4), dtype=np.int8))
    np.save(tmp_path / "b.npy", np.zeros((5, 2), dtype=np.int8))
    np.save(tmp_path / "f.npy", np.zeros((4, 2), dtype=np.float32))
    out = tmp_path / "c.npy"
    cases = [
        (["--a", str(tmp_path / "junk.npy"), "--b", str(tmp_path / "b.npy")], "is not a .npy file"),
        (["--a", str(tmp_path / "a.npy"), "--b", str(tmp_path / "b.npy")], "A must be M x K and B K x N"),
        (["--a", str(tmp_path / "a.npy"), "--b", str(tmp_path / "f.npy")], "holds float32 values"),
        (["--a", str(tmp_path / "missing.npy"), "--b", str(tmp_path / "b.npy")], "does not exist"),
    ]
    for args, message in cases:
        assert main(["sim", "gemm", *TINY, *args, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
        assert not out.exists()
    assert main(["sim", "gemm", *TINY, "--a", str(tmp_path / "a.npy")]) == 2
    assert "go together" in capsys.readouterr().err


# ---- bias and requantization with real scales (issue #15)

def _float_reference(a, b, bias, scale):
    return np.clip((a.astype(np.int64) @ b.astype(np.int64) + bias) * scale, -128, 127)


@pytest.mark.parametrize("scale_shape", [(), (1,), (6,)])
def test_sim_user_bias_and_scale(scale_shape, tmp_path, capsys):
    """Needs the RTL of issue #15 (bias and per-channel scales)."""
    from bertforge.rtl.gemm import GemmConfig
    from bertforge.sim.fixed_golden import channel_scale_words, command_scale, split_scale_words
    from bertforge.sim.gemm_golden import gemm_golden
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (9, 33)).astype(np.int8)
    b = rng.integers(-128, 128, (33, 6)).astype(np.int8)
    bias = rng.integers(-20000, 20000, 6).astype(np.int32)
    scale = (10.0 ** rng.uniform(-4, -2, scale_shape)).astype(np.float64)
    assert main(["sim", "gemm", *TINY, *npy_flags(tmp_path, a=a, b=b, bias=bias, scale=scale),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["match"] is True
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.int8
    if scale.ndim == 1 and scale.size > 1:
        multiplier, shift = split_scale_words(channel_scale_words(scale))
    else:
        multiplier, shift = command_scale(float(scale.reshape(())))
    config = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=32, addr_width=15)
    assert np.array_equal(c, gemm_golden(config, a, b, bias=bias, int8=True, multiplier=multiplier,
                                         shift=shift))
    error = np.abs(c - _float_reference(a, b, bias, scale)).max()
    assert result["max_lsb_error_vs_float"] == pytest.approx(error)
    assert error <= 0.5 + 1e-6


def test_sim_int16_output_with_per_channel_scales(tmp_path, capsys):
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (5, 40)).astype(np.int8)
    b = rng.integers(-128, 128, (40, 7)).astype(np.int8)
    bias = rng.integers(-20000, 20000, 7).astype(np.int32)
    scale = np.array([1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 1e-3])   # 3.0 saturates some outputs
    assert main(["sim", "gemm", *TINY, *npy_flags(tmp_path, a=a, b=b, bias=bias, scale=scale),
                 "--int16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["match"] is True
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.int16
    reference = np.clip((a.astype(np.int64) @ b.astype(np.int64) + bias) * scale, -2**15, 2**15 - 1)
    assert np.abs(reference).max() == 2**15      # saturation happened
    error = np.abs(c - reference).max()
    assert result["max_lsb_error_vs_float"] == pytest.approx(error)
    assert error <= 0.5 + 1e-6


def test_sim_random_batch_with_bias_and_scales(capsys):
    """Needs the RTL of issue #15 (bias and per-channel scales)."""
    assert main(["sim", "gemm", *TINY, "--m", "7", "--k", "13", "--n", "5", "--bias", "--scale",
                 "--batch", "3", "--seed", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["match"] is True and result["batch"] == 3
    assert result["ideal_cycles"] == 3 * 7 * 13 * 5 / 4
    assert result["utilization"] == pytest.approx(result["ideal_cycles"] / result["cycles"])
    assert 0 <= result["max_lsb_error_vs_float"] <= 0.5 + 1e-6


def test_sim_random_bias_int32(capsys):
    """Needs the RTL of issue #15 (bias)."""
    assert main(["sim", "gemm", *TINY, "--m", "5", "--k", "9", "--n", "7", "--bias", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["match"] is True and result["max_lsb_error_vs_float"] is None


@pytest.mark.parametrize("args, message", [
    (["--scale", "--multiplier", "3"], "--scale sets the requantization; leave out --multiplier and --shift"),
    (["--scale", "--shift", "3"], "--scale sets the requantization; leave out --multiplier and --shift"),
    (["--int8", "--int16"], "--int8 and --int16 each choose C's type; give one"),
    (["--batch", "0"], "argument --batch: must be a positive integer, not 0"),
    (["--batch", "41"], "argument --batch: at most 40 (the harness's command queue), not 41"),
    (["--batch", "two"], "argument --batch: not an integer: 'two'"),
    (["--bias", "{d}/bias4.npy"], "bias file {d}/bias4.npy holds 4 values; it must hold N = 5, one per column of C"),
    (["--scale", "{d}/missing.npy"], "scale file {d}/missing.npy does not exist"),
])
def test_bad_random_run_input(args, message, tmp_path, capsys):
    np.save(tmp_path / "bias4.npy", np.ones(4, dtype=np.int32))
    args = [arg.format(d=tmp_path) for arg in args]
    assert main(["sim", "gemm", *TINY, "--m", "3", "--k", "4", "--n", "5", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bertforge: error: ")
    assert message.format(d=tmp_path) in err, err


@pytest.mark.parametrize("name, array, message", [
    ("bias", np.ones(4, dtype=np.int32), "holds 4 values; it must hold N = 5, one per column of C"),
    ("bias", np.ones(5, dtype=np.float32), "holds float32 values; it must hold integers (int32)"),
    ("bias", np.ones((1, 5), dtype=np.int32), "has shape (1, 5); it must have 1 dimensions"),
    ("bias", np.full(5, 2**31, dtype=np.int64),
     "holds values in [2147483648, 2147483648]; int32 values must lie in [-2147483648, 2147483647]"),
    ("scale", np.ones(3), "has shape (3,); it must hold one scale (shape () or (1,)) or N = 5, "
                          "one per column of C"),
    ("scale", np.ones((5, 1)), "has shape (5, 1); it must hold one scale"),
    ("scale", np.array([1.0, 1.0, -2.0, 1.0, 1.0]), "holds -2.0; scales must be positive and finite"),
    ("scale", np.array(0.0), "holds 0.0; scales must be positive and finite"),
    ("scale", np.array([np.inf]), "holds inf; scales must be positive and finite"),
    ("scale", np.ones(5, dtype=bool), "holds bool values; it must hold positive real numbers"),
    ("scale", np.array(2.0**32), "scale ratio 4294967296.0 is too large (needs a negative shift)"),
    ("scale", np.full(5, 1e8), "scale[0]: scale ratio 100000000.0 is too large (needs a negative shift)"),
    ("scale", np.full(5, 1e-30), "scale[0]: scale ratio 1e-30 is too small to represent"),
])
def test_bad_bias_and_scale_files(name, array, message, tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.ones((3, 4), dtype=np.int8))
    np.save(tmp_path / "b.npy", np.ones((4, 5), dtype=np.int8))
    np.save(tmp_path / f"{name}.npy", array)
    out = tmp_path / "c.npy"
    assert main(["sim", "gemm", *TINY, "--a", str(tmp_path / "a.npy"), "--b", str(tmp_path / "b.npy"),
                 f"--{name}", str(tmp_path / f"{name}.npy"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"bertforge: error: {name} file "), err
    assert message in err, err
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--batch", "2"], "--batch runs random operands (--m, --k, --n); leave it out with --a and --b"),
    (["--bias"], "--bias needs a file with --a and --b"),
    (["--scale"], "--scale needs a file with --a and --b"),
])
def test_user_matrices_refuse_random_extras(args, message, tmp_path, capsys):
    flags = npy_flags(tmp_path, a=np.ones((3, 4), dtype=np.int8), b=np.ones((4, 5), dtype=np.int8))
    assert main(["sim", "gemm", *TINY, *flags, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
