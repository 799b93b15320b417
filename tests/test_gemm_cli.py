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
    assert result["match"] is True
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
