"""Workload mapping and `bertforge analyze`."""

import json

import pytest

from bertforge.generators.analyze import analyze, load_hardware
from bertforge.generators.analyze_cli import DEFAULT_HW
from bertforge.generators.cli import main
from bertforge.generators.presets import ConfigError
from bertforge.generators.workload import encoder_layer
from bertforge.sim.encoder_cycles import operation_gap
from bertforge.sim.softmax_cycles import softmax_cycles


def test_bert_base_layer_operations():
    ops = encoder_layer("bert-base", 128)
    macs = sum(op.macs for op in ops if op.kind == "gemm")
    assert [op.count for op in ops if "projection" in op.name] == [2, 1, 1]
    assert macs == 4 * 128 * 768 * 768 + 2 * 128 * 768 * 3072 + 2 * 12 * 128 * 128 * 64
    softmax = [op for op in ops if op.kind == "softmax"][0]
    assert (softmax.count, softmax.rows, softmax.length) == (12, 128, 128)
    assert sum(op.count for op in ops if op.kind == "layernorm") == 2
    training = encoder_layer("bert-base", 128, training=True)
    assert sum(op.macs for op in training if op.kind == "gemm") == 3 * macs
    assert any(op.kind == "other" and "dropout" in op.name for op in training)
    with pytest.raises(ValueError, match=r"^unknown model 'gpt'"):
        encoder_layer("gpt", 128)


def test_analysis_uses_the_unit_cycle_models():
    hw = load_hardware(DEFAULT_HW)
    result = analyze("bert-base", 128, hw, batch=2)
    softmax = next(r for r in result["operations"] if r["class"] == "softmax")
    assert softmax["cycles"] == (softmax_cycles(hw.softmax, [128] * (2 * 12 * 128))
                                 + operation_gap("softmax", hw.mem_latency))
    assert result["total_cycles"] == sum(c["cycles"] for c in result["classes"])
    assert sum(c["share"] for c in result["classes"]) == pytest.approx(1.0)
    gemm = next(c for c in result["classes"] if c["class"] == "gemm")
    assert 0.5 < gemm["utilization"] <= 1.0


def test_sequence_longer_than_the_softmax_unit(tmp_path, capsys):
    path = tmp_path / "hw.toml"
    path.write_text("[softmax]\nl_max = 64\n")
    assert main(["analyze", "--seq", "128", "--hw", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "l_max = 64" in err and len(err.strip().splitlines()) == 1


def test_analyze_cli_writes_json_csv_png_and_compares(tmp_path, capsys):
    compare = DEFAULT_HW.parent / "softmax_1lane.toml"
    assert main(["analyze", "--model", "bert-large", "--seq", "512", "--compare", str(compare),
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "gemm" in out and "softmax" in out and "1-lane units" in out
    results = json.loads((tmp_path / "analysis.json").read_text())
    assert [r["hardware"] for r in results] == ["default-16x16", "1-lane units"]
    assert results[1]["total_cycles"] > results[0]["total_cycles"]
    assert (tmp_path / "analysis.csv").read_text().startswith("hardware,operation,class")
    assert (tmp_path / "breakdown.png").read_bytes()[:4] == b"\x89PNG"


def test_sparse_engine_runs_the_weight_gemms_pruned():
    from bertforge.sim.sparse_engine_cycles import sparse_engine_cycles
    dense = analyze("bert-base", 128, load_hardware(DEFAULT_HW))
    hw = load_hardware(DEFAULT_HW.parent / "sparse_2of4.toml")
    assert hw.pattern == (2, 4) and hw.sparse.m_max == 8
    sparse = analyze("bert-base", 128, hw)
    ops = {r["operation"]: r for r in sparse["operations"]}
    base = {r["operation"]: r for r in dense["operations"]}
    ffn = ops["ffn 1"]
    assert ffn["cycles"] == sparse_engine_cycles(
        hw.sparse, [dict(m=128, k=768, n=3072, int8=1, bias=1, per_channel=1, pat_n=2, pat_m=4)],
        lat=8, bw=64)["cycles"]
    for name in ("ffn 1", "ffn 2", "output projection", "q, v projections"):
        assert 0.49 < ops[name]["cycles"] / base[name]["cycles"] < 0.52, name
    for name in ("k projection", "attention scores", "attention context"):   # dense mode
        assert 0.99 < ops[name]["cycles"] / base[name]["cycles"] < 1.01, name


def test_linear_layers_read_their_bias_and_per_channel_scales():
    """The weight GEMMs (B a weight matrix) add a bias and requantize per
    channel; the k projection and the attention GEMMs do neither. Costed
    with them, a linear layer reads a bias and a scale row more in each
    block's first chunk."""
    from bertforge.sim.gemm_cycles import gemm_cycles
    ops = {op.name: op for op in encoder_layer("bert-base", 128)}
    linear = ("q, v projections", "output projection", "ffn 1", "ffn 2")
    assert all(ops[name].bias and ops[name].per_channel and ops[name].int8_out for name in linear)
    for name in ("k projection", "attention scores", "attention context"):
        assert not ops[name].bias and not ops[name].per_channel
    assert not any(op.bias for op in encoder_layer("bert-base", 128, bias=False))
    assert not any(op.bias for op in encoder_layer("bert-base", 128, training=True)
                   if "grad" in op.name)
    hw = load_hardware(DEFAULT_HW)
    real = {r["operation"]: r["cycles"] for r in analyze("bert-base", 128, hw)["operations"]}
    bare = {r["operation"]: r["cycles"] for r in analyze("bert-base", 128, hw, bias=False)["operations"]}
    assert real["ffn 1"] == gemm_cycles(hw.gemm, [dict(m=128, k=768, n=3072, int8=1, bias=1,
                                                       per_channel=1)], lat=8, bw=64,
                                        done_always_ready=True)["cycles"]
    assert bare["ffn 1"] == gemm_cycles(hw.gemm, [dict(m=128, k=768, n=3072, int8=1)],
                                        lat=8, bw=64, done_always_ready=True)["cycles"]
    # the first block's bias and scale rows (64-column panel); later blocks'
    # (and a second command's) load while the array computes
    beats = 2 * 64 * 4 // hw.gemm.mem_bytes
    for name in linear:
        assert real[name] - bare[name] == beats, name
    for name in ("k projection", "attention scores", "attention context", "softmax"):
        assert real[name] == bare[name], name


@pytest.mark.parametrize("text, message", [
    ("[gemm]\nrows = 0\n", "[gemm] rows must be a positive integer, not 0"),
    ("[gemmm]\n", "unknown section [gemmm]"),
    ("[softmax]\nwidth = 3\n", "unknown softmax field 'width'"),
    ("[hardware]\nclock_mhz = -5\n", "clock_mhz must be a positive number, not -5"),
    ("x = [", "is not valid TOML"),
    ('[sparse]\nm_max = 8\n', '[sparse] needs a pattern, like pattern = "2:4"'),
    ('[sparse]\npattern = "2:16"\n', "[sparse] m must be at most m_max = 8, not 16"),
    ('[sparse]\npattern = "2:6"\n', "the sparse engine takes M a power of two, not 6"),
    ('[sparse]\npattern = "two"\n', "a pattern is N:M with integers"),
    ('[sparse]\npattern = "1:2"\ndensity = 1\n', "unknown sparse field 'density'"),
    ('[gemm]\ndataflow = "ws"\n[sparse]\npattern = "1:2"\n', "dataflow must be 'os' for the sparse engine"),
])
def test_bad_hardware_config(text, message, tmp_path):
    path = tmp_path / "hw.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_hardware(path)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bf16_training_breakdown_by_class_and_phase():
    """bf16 training: forward and backward GEMMs on a bf16 engine (16-bit
    operands, 32-bit results), the optimizer step as its own memory-bound
    class, the memory-bound share."""
    import dataclasses
    import math
    from bertforge.sim.gemm_cycles import gemm_cycles
    from bertforge.generators.workload import MODELS, OPTIMIZER_BYTES, parameters_per_layer
    hw = load_hardware(DEFAULT_HW)
    result = analyze("bert-base", 128, hw, training=True, precision="bf16")
    classes = {c["class"]: c for c in result["classes"]}
    assert list(classes) == ["gemm", "gemm backward", "softmax", "layernorm", "gelu", "other",
                             "optimizer"]
    assert classes["gemm backward"]["work"] == 2 * classes["gemm"]["work"]
    params = parameters_per_layer(MODELS["bert-base"])
    assert params * 12 == 108_891_648      # BERT-base without the pooler
    assert classes["optimizer"]["cycles"] == math.ceil(params * OPTIMIZER_BYTES["adam", "bf16"] / 64)
    ops = {r["operation"]: r for r in result["operations"]}
    engine = dataclasses.replace(hw.gemm, width=16)
    assert ops["ffn 1"]["cycles"] == gemm_cycles(
        engine, [dict(m=128, k=768, n=3072, int8=0, bias=1, per_channel=0)], lat=8, bw=64,
        done_always_ready=True)["cycles"]
    assert ops["ffn 1 weight grad"]["class"] == "gemm backward"
    assert ops["ffn 1 weight grad"]["phase"] == "backward"
    memory = sum(c["share"] for name, c in classes.items() if name not in ("gemm", "gemm backward"))
    assert result["memory_bound_share"] == pytest.approx(memory)
    assert sum(result["phases"].values()) == result["total_cycles"]
    lamb = analyze("bert-base", 128, hw, training=True, precision="bf16", optimizer="lamb")
    assert lamb["phases"]["optimizer"] > result["phases"]["optimizer"]
    assert lamb["phases"]["forward"] == result["phases"]["forward"]


def test_bf16_bytes_cost_more_when_memory_bound(tmp_path):
    path = tmp_path / "slow.toml"
    path.write_text("[hardware]\nmem_bytes_per_cycle = 8\n")
    hw = load_hardware(path)
    int8 = {r["operation"]: r["cycles"] for r in analyze("bert-base", 128, hw, training=True)["operations"]}
    bf16 = {r["operation"]: r["cycles"]
            for r in analyze("bert-base", 128, hw, training=True, precision="bf16")["operations"]}
    # operands of 2 bytes instead of 1 (the backward GEMMs write 32-bit results in both)
    for name in ("ffn 1", "q, v projections", "dropout ffn output", "ffn 1 data grad"):
        assert bf16[name] > int8[name], name


def test_training_cli_charts_next_to_int8_inference(tmp_path, capsys):
    assert main(["analyze", "--model", "bert-base", "--seq", "128", "--training", "--precision",
                 "bf16", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "bf16, training (adam)" in out and "memory-bound share" in out
    assert "gemm backward" in out and "optimizer" in out
    results = json.loads((tmp_path / "analysis.json").read_text())
    assert [(r["precision"], r["training"]) for r in results] == [("int8", False), ("bf16", True)]
    assert results[1]["memory_bound_share"] > results[0]["memory_bound_share"]
    assert (tmp_path / "breakdown.png").read_bytes()[:4] == b"\x89PNG"


def test_bf16_needs_a_dense_engine(tmp_path, capsys):
    code = main(["analyze", "--hw", str(DEFAULT_HW.parent / "sparse_2of4.toml"), "--precision", "bf16",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the sparse engine is int8 only" in err


@pytest.mark.parametrize("text, in_width", [
    ("[gemm]\nwidth = 8\n", 8),                                      # int8 activations
    ("[gemm]\nwidth = 16\n", 16),                                    # int16 activations
    ("[gemm]\nwidth = 8\n[layernorm]\nsecond_output = true\n", 16),  # the low-bit top's residual stream
    ("[gemm]\nwidth = 8\n[layernorm]\nin_width = 32\n", 32),         # as written
])
def test_layernorm_input_width_follows_the_activations(tmp_path, text, in_width):
    """A config that does not set [layernorm] in_width gets its
    activations' width, so a minimal int8 config forms an encoder top."""
    path = tmp_path / "hw.toml"
    path.write_text(text)
    assert load_hardware(path).layernorm.in_width == in_width
