"""W4A8 on the low-bit encoder top (issue 36): 4-bit weights in groups of
32 along K with their multiplier codes, on an engine with group
multipliers (``[gemm] weight_group``), run as ``sim model --hw
tiny_w4a8.toml`` on the small random checkpoint (one Verilator build):
bit-exact per layer against the W4A8 integer golden model
(``IntegerLowbit``), every operation's cycles equal to ``analyze``'s; with
random memory latency and stalls on every stream, still bit-exact. Then
the refusals (one line each) and the bytes ``analyze`` counts for
minilm_w4a8.toml. The real all-MiniLM-L6-v2 runs under ``-m slow``."""

import copy
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from bertforge.generators.analyze import load_hardware
from bertforge.generators.cli import main
from bertforge.generators.encoder_sim import TINY_INT8_HW, encoder_config
from bertforge.rtl.errors import ParameterError

from checkpoint_helpers import TEXTS, low_bit_stalled, sim_model_low_bit, write_checkpoint

TINY_W4A8_HW = TINY_INT8_HW.with_name("tiny_w4a8.toml")
MINILM_W4A8_HW = TINY_INT8_HW.with_name("minilm_w4a8.toml")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("w4a8-top") / "random-bert")


@pytest.fixture(scope="module")
def w4_model(checkpoint):
    """The W4A8 integer model of the random checkpoint on tiny_w4a8.toml
    (GPTQ on the Hessians of the last texts) and its token ids."""
    from bertforge.generators.checkpoint import load_checkpoint, tokenize
    from bertforge.generators.lowbit import calibration_stats, integer_model, quantize_model
    model = load_checkpoint(checkpoint)
    ids = tokenize(model, TEXTS, 64)
    stats = calibration_stats(model, ids[2:])
    config = encoder_config(load_hardware(TINY_W4A8_HW), TINY_W4A8_HW)
    return model, ids, config, integer_model(model, config, quantize_model(model, stats, "w4a8"),
                                              stats)


def test_sim_model_w4a8_on_a_random_checkpoint(checkpoint, tmp_path, capsys):
    result = sim_model_low_bit(checkpoint, TINY_W4A8_HW, tmp_path / "emb.npy", capsys)
    assert result["design"].endswith("_w4a8")
    assert result["cosine_min"] > 0.95


def test_w4a8_layers_with_memory_stalls(w4_model):
    """Both layers of two sentences in one run behind random memory latency
    and stalls: every stage bit-exact, the weights 4-bit with codes."""
    model, ids, config, imodel = w4_model
    plan = imodel.plan[0]
    assert set(plan["q4"]) == {"q", "k", "v", "o", "1", "2"}
    q, codes, group = plan["q4"]["2"]
    assert group == 32 and q.min() >= -8 and q.max() <= 7 and codes.shape == (256 // 32, 64)
    assert len(np.unique(codes)) > 4            # the groups use several multipliers
    low_bit_stalled(config, model, imodel, ids, seed=6)


def test_w4a8_program_refuses(w4_model):
    from bertforge.sim.encoder_run import lowbit_program
    _, _, config, imodel = w4_model
    w8 = encoder_config(load_hardware(TINY_INT8_HW), TINY_INT8_HW)
    with pytest.raises(ParameterError, match=r"^4-bit weights \(W4A8\) need a GEMM engine with "
                                             r"group multipliers: set \[gemm\] weight_group = 32 "
                                             r"and k_chunk = 32$"):
        lowbit_program(w8, imodel, 8)
    g16 = dataclasses.replace(config, gemm=dataclasses.replace(config.gemm, k_chunk=16,
                                                               weight_group=16))
    with pytest.raises(ParameterError, match=r"^the 4-bit weights come in groups of 32 along K, "
                                             r"but \[gemm\] weight_group is 16$"):
        lowbit_program(g16, imodel, 8)
    free = copy.copy(imodel)
    free.plan = [dict(p, q4={k: (q, None, g) for k, (q, _, g) in p["q4"].items()})
                 for p in imodel.plan]
    with pytest.raises(ParameterError, match=r"^the 4-bit weights' group multipliers are not codes"):
        lowbit_program(config, free, 8)


def _toml(tmp_path, text, **gemm):
    lines = []
    for line in text.splitlines():
        key = line.split("=")[0].strip()
        lines.append(f"{key} = {gemm.pop(key)}" if key in gemm else line)
    path = tmp_path / "hw.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("gemm, message", [
    (dict(k_chunk=64), r"\[gemm\] k_chunk must equal weight_group = 32 \(a chunk's sums take one "
                       r"multiplier\), not 64"),
    (dict(weight_group=24, k_chunk=24), r"\[gemm\] k_chunk must be a multiple of mem_width // "
                                        r"width = 16, not 24"),
    (dict(k_chunk=16, weight_group=16), r"W4A8's 4-bit weights come in groups of 32 along K: set "
                                        r"\[gemm\] weight_group and k_chunk to 32, not 16"),
])
def test_sim_model_bad_group_config(checkpoint, tmp_path, capsys, gemm, message):
    path = _toml(tmp_path, TINY_W4A8_HW.read_text(), **gemm)
    assert main(["sim", "model", "--checkpoint", str(checkpoint), "--hw", str(path),
                 "--text", "a"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("bertforge: error: ")
    assert re.search(message, err), err


def test_analyze_counts_the_w4a8_bytes():
    """MiniLM at 16 tokens on minilm_w4a8.toml: the weight GEMMs read packed
    4-bit weights and half a byte of codes per group and column; FFN 1
    writes the int8 g through GELU on its writer."""
    from bertforge.generators.analyze import analyze
    from bertforge.generators.model_sim import MINILM_HW
    from bertforge.generators.workload import BertModel
    shape = BertModel("minilm", 384, 12, 6, 1536)
    w4 = analyze(shape, 16, load_hardware(MINILM_W4A8_HW), bias=True, transpose=True)
    w8 = analyze(shape, 16, load_hardware(MINILM_HW.with_name("minilm_int8.toml")), bias=True,
                 transpose=True)
    H, F = 384, 1536
    ops4 = {op["operation"]: op["bytes"] for op in w4["operations"]}
    ops8 = {op["operation"]: op["bytes"] for op in w8["operations"]}
    assert ops4["ffn 2"]["weights"] == F // 2 * H + F // 32 * H // 2 + 8 * H
    assert ops8["ffn 2"]["weights"] == F * H + 8 * H
    assert ops4["ffn 1"]["outputs"] == ops8["ffn 1"]["outputs"] == 16 * F     # int8 g, GELU fused
    # q and v one GEMM ([Wq | Wv], N = 2H): the int8 x operand read once by it, not twice
    qv = {op["operation"]: op for op in w4["operations"]}["q, v projections"]
    assert (qv["count"], qv["shape"]) == (1, f"16x{H}x{2 * H}")
    assert ops4["q, v projections"] == {"weights": H // 2 * 2 * H + H // 32 * H + 8 * 2 * H,
                                        "activations": 16 * H, "outputs": 16 * 2 * H}
    # 29.92% of minilm.toml's 24,274,944 (7,299,072 with q and v two GEMMs; 7,888,896 also with
    # GELU from memory)
    assert w4["totals"]["bytes_per_sentence"] == 7_262_208
    assert w8["totals"]["bytes_per_sentence"] == 12_404_736


@pytest.mark.slow
def test_all_minilm_l6_v2_w4a8_end_to_end():
    """The real checkpoint on minilm_w4a8.toml, the 24 evaluation sentences:
    bit-exact; every class's cycles, and FFN 1 with GELU on its writer
    (memory latency 8, a 32-byte word), as analyze predicts (706,728 a
    sentence); W4A8's Spearman target (>= 0.97) against the float64 model (its
    cosine min stays under the 0.98 target: lowbit.md)."""
    from bertforge.generators.model_sim import EVALUATION, encode, read_sentences
    result = encode(read_sentences(EVALUATION), hw=Path(MINILM_W4A8_HW))
    print({key: result[key] for key in ("match", "cosine_mean", "cosine_min", "spearman", "cycles",
                                        "predicted_cycles", "classes", "operations", "seconds",
                                        "sim_seconds")})
    assert result["match"]
    for c in result["classes"]:
        assert c["cycles"] == c["predicted"], c
    ffn1 = next(op for op in result["operations"] if op["operation"] == "ffn 1")
    assert ffn1["cycles"] == ffn1["predicted"], ffn1
    assert result["spearman"] >= 0.97 and result["cosine_min"] >= 0.974, (
        f"cosine mean {result['cosine_mean']:.4f}, min {result['cosine_min']:.4f}, "
        f"spearman {result['spearman']:.4f}")
