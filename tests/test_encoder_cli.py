"""``bertforge generate|sim encoder``: JSON keys, the one-line errors for bad
hardware files and shapes, and deterministic emission (the simulation uses
the tiny.toml build of test_encoder_verilator.py)."""

import json

import pytest

from bertforge.generators.cli import main
from bertforge.generators.encoder_sim import TINY_HW

from helpers import tiny_encoder_config as tiny_config


def test_sim_encoder_cli_json(capsys):
    assert main(["sim", "encoder", "--seed", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("cycles", "predicted_cycles", "max_error", "cosine", "match", "classes"):
        assert key in result
    assert result["match"] and abs(result["difference"]) <= 0.03


@pytest.mark.parametrize("text, args, message", [
    ("[gemm]\nwidth = 16\n", [], "the encoder top with gemm width 16 (int16 activations) needs "
                                "softmax out_width 16, not 8"),
    ("[gemm]\nmem_width = 128\n[softmax]\nl_max = 16\n", [],
     "sequence length 32 exceeds the softmax unit's l_max = 16"),
    ("[gemm]\nmem_width = 128\n", ["--seq", "30"], "must be a multiple of 4"),
])
def test_sim_encoder_bad_input(text, args, message, tmp_path, capsys):
    path = tmp_path / "hw.toml"
    path.write_text(text + "[layernorm]\nh_max = 64\n")
    assert main(["sim", "encoder", "--hw", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_generate_encoder_is_deterministic(tmp_path, capsys):
    for out in ("a", "b"):
        assert main(["generate", "encoder", "--hw", str(TINY_HW), "-o", str(tmp_path / out)]) == 0
    name = tiny_config().name
    first = (tmp_path / "a" / f"{name}.v").read_bytes()
    assert first == (tmp_path / "b" / f"{name}.v").read_bytes()
    assert b"module " + name.encode() in first
    sidecar = json.loads((tmp_path / "a" / f"{name}.json").read_text())
    assert {p["name"] for p in sidecar["ports"]} >= {"cmd__payload", "rd_req__valid", "wr_req__ready"}
