"""One BERT encoder layer on EncoderTop: configs, golden model, the emitted
Verilog in Verilator against the integer golden model and ``analyze``'s
prediction, and ``bertforge sim encoder``.

The Verilator runs share one build (tiny.toml, seq 32): the layer without
stalls (every operation's cycles equal the prediction), and with random
memory latency and stalls on every stream (still bit-exact)."""

import json

import numpy as np
import pytest

from bertforge.generators.analyze import analyze, load_hardware
from bertforge.generators.cli import main
from bertforge.generators.encoder_sim import TINY_HW, run_encoder
from bertforge.generators.workload import encoder_layer
from bertforge.rtl.encoder import EncoderConfig, EncoderTop
from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.encoder_cycles import operation_gap
from bertforge.sim.encoder_golden import cosine, encoder_float, encoder_golden, random_layer
from bertforge.sim.encoder_run import OPERATIONS, check_shape, encoder_program
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.softmax_cycles import softmax_cycles


def tiny_config():
    hw = load_hardware(TINY_HW)
    return EncoderConfig(gemm=hw.gemm, softmax=hw.softmax, layernorm=hw.layernorm, gelu=hw.gelu)


def test_program_operations_are_the_workload_operations():
    ops = encoder_layer("tiny", 32)
    assert [(op.name, op.kind) for op in ops] == OPERATIONS
    config = tiny_config()
    layer = random_layer(config, 32)
    _, commands, _, groups, _ = encoder_program(config, layer)
    # one command per GEMM of each operation, one per elementwise operation
    assert [len(g) for g in groups] == [op.count if op.kind == "gemm" else 1 for op in ops]
    assert len(commands) == sum(len(g) for g in groups)


@pytest.mark.parametrize("change, error, message", [
    (dict(gemm=SoftmaxConfig()), TypeError, r"^gemm must be a GemmConfig, not SoftmaxConfig\("),
    (dict(gemm=GemmConfig(width=16)), ValueError, r"^the encoder top needs gemm width 8, not 16$"),
    (dict(softmax=SoftmaxConfig(in_width=16, out_width=16)), ValueError,
     r"^the encoder top needs softmax in_width 32 and out_width 8$"),
    (dict(layernorm=LayerNormConfig(add_residual=False)), ValueError,
     r"^the encoder top needs layernorm add_residual = true$"),
    (dict(gelu=GeluConfig(out_width=16)), ValueError, r"^the encoder top needs gelu in_width 8 and out_width 8$"),
    (dict(gelu=GeluConfig(lanes=32)), ValueError,
     r"^gelu beats of 32 bytes must divide the 16-byte memory word; change \[gelu\] lanes or \[gemm\] mem_width$"),
])
def test_bad_encoder_config(change, error, message):
    base = tiny_config()
    fields = {name: getattr(base, name) for name in ("gemm", "softmax", "layernorm", "gelu")}
    with pytest.raises(error, match=message):
        EncoderConfig(**{**fields, **change})


def test_top_needs_an_encoder_config():
    with pytest.raises(TypeError, match=r"^config must be an EncoderConfig, not 3$"):
        EncoderTop(3)


@pytest.mark.parametrize("seq, hidden, heads, ffn, message", [
    (256, 64, 2, 256, r"^sequence length 256 exceeds the softmax unit's l_max = 128$"),
    (32, 128, 2, 256, r"^hidden 128 exceeds the layernorm unit's h_max = 64$"),
    (30, 64, 2, 256, r"^sequence length 30 must be a multiple of 4 "),
    (32, 64, 2, 200, r"^ffn 200 must be a multiple of the 16-byte memory word$"),
    (32, 48, 5, 256, r"^hidden 48 is not a multiple of heads 5$"),
])
def test_shapes_the_adapters_cannot_take(seq, hidden, heads, ffn, message):
    with pytest.raises(ValueError, match=message):
        check_shape(tiny_config(), seq, hidden, heads, ffn)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_integer_layer_is_close_to_the_float_layer(seed):
    layer = random_layer(tiny_config(), 32, seed=seed)
    out = encoder_golden(tiny_config(), layer)["out"] * layer.scales["out"]
    reference = encoder_float(layer)
    assert cosine(out, reference) >= 0.99
    assert np.abs(out - reference).max() < 8 * layer.scales["out"]


def test_prediction_adds_the_adapter_fill_to_the_unit_models():
    hw = load_hardware(TINY_HW)
    rows = {r["operation"]: r["cycles"] for r in analyze("tiny", 32, hw)["operations"]}
    lat = hw.mem_latency
    assert rows["softmax"] == softmax_cycles(hw.softmax, [32] * 64) + operation_gap("softmax", lat)
    assert rows["residual + layernorm 1"] == (layernorm_cycles(hw.layernorm, [64] * 32)
                                              + operation_gap("layernorm", lat, layernorm=hw.layernorm,
                                                              length=64))


def test_layer_in_verilator_matches_golden_and_prediction():
    result = run_encoder(TINY_HW, seq=32, seed=0)
    assert result["passed"] and result["match"], result["mismatches"]
    assert all(count == 0 for count in result["mismatches"].values())
    # every operation, and so the layer, takes the predicted cycles exactly
    for op in result["operations"]:
        assert op["cycles"] == op["predicted"], op
    assert result["cycles"] == result["predicted_cycles"]
    assert {c["class"] for c in result["classes"]} == {"gemm", "softmax", "layernorm", "gelu"}
    assert result["cosine"] >= 0.99


def test_layer_with_random_memory_stalls_is_still_exact():
    result = run_encoder(TINY_HW, seq=32, seed=5, gap=0.3, stall=0.3)
    assert result["passed"] and result["match"], result["mismatches"]
    assert result["cycles"] > result["predicted_cycles"]


def test_sim_encoder_cli_json(capsys):
    assert main(["sim", "encoder", "--seed", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("cycles", "predicted_cycles", "max_error", "cosine", "match", "classes"):
        assert key in result
    assert result["match"] and abs(result["difference"]) <= 0.03


@pytest.mark.parametrize("text, args, message", [
    ("[gemm]\nwidth = 16\n", [], "the encoder top needs gemm width 8, not 16"),
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
