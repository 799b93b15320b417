"""A small random BERT checkpoint in Hugging Face format (config.json,
model.safetensors, tokenizer.json), written by the tests themselves: the
tiny model's shape (hidden 64, 2 heads, FFN 256), 2 layers, a word-level
vocabulary of the test sentences."""

import json
from pathlib import Path

import numpy as np

WORDS = ("the a man is playing guitar dog runs in park cat sleeps on warm mat "
         "rain falls city quiet sun shines over hills music plays loud").split()
TEXTS = ["a man is playing the guitar", "the dog runs in the park",
         "the cat sleeps on the warm mat", "rain falls on the quiet city"]


def bert_config(hidden=64, heads=2, layers=2, ffn=256, vocab=None, **extra):
    return {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": hidden,
            "num_attention_heads": heads, "num_hidden_layers": layers, "intermediate_size": ffn,
            "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 64,
            "type_vocab_size": 2, "vocab_size": vocab or len(WORDS) + 5, **extra}


def write_checkpoint(path, seed=0, **shape):
    """Write a random checkpoint to ``path`` (a directory); returns it."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = bert_config(**shape)
    (path / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(seed)
    H, F, V = config["hidden_size"], config["intermediate_size"], config["vocab_size"]

    def normal(*shape_, std=1.0):
        return (rng.standard_normal(shape_) * std).astype(np.float32)
    tensors = {"embeddings.word_embeddings.weight": normal(V, H),
               "embeddings.position_embeddings.weight": normal(64, H, std=0.3),
               "embeddings.token_type_embeddings.weight": normal(2, H, std=0.1),
               "embeddings.LayerNorm.weight": 1 + normal(H, std=0.1),
               "embeddings.LayerNorm.bias": normal(H, std=0.1)}
    linear = {"attention.self.query": (H, H), "attention.self.key": (H, H),
              "attention.self.value": (H, H), "attention.output.dense": (H, H),
              "intermediate.dense": (F, H), "output.dense": (H, F)}
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        for name, (out, inp) in linear.items():
            tensors[p + name + ".weight"] = normal(out, inp, std=1 / np.sqrt(inp))
            tensors[p + name + ".bias"] = normal(out, std=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[p + name + ".weight"] = 1 + normal(H, std=0.1)
            tensors[p + name + ".bias"] = normal(H, std=0.1)
    save_file(tensors, str(path / "model.safetensors"))

    vocab = {token: index for index, token in
             enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.save(str(path / "tokenizer.json"))
    return path


def sim_model_low_bit(checkpoint, hw, out, capsys):
    """``sim model --json`` of two texts (8 and 4 tokens) on the low-bit
    top of ``hw``, the embeddings written to ``out``: its JSON, checked
    (bit-exact, both layers at sequence 8, every operation's cycles and the
    total as ``analyze`` predicts, the embeddings' shape)."""
    from bertforge.generators.cli import main
    argv = ["sim", "model", "--checkpoint", str(checkpoint), "--hw", str(hw), "--json",
            "--out", str(out), "--text", TEXTS[0], "--text", "rain falls"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["match"] and result["layers"] == 2 and result["seq"] == 8
    for op in result["operations"]:
        assert op["cycles"] == op["predicted"], op
    assert result["cycles"] == result["predicted_cycles"]
    assert np.load(out).shape == (2, 64)
    return result


def low_bit_stalled(config, model, imodel, ids, seed):
    """The first two sentences of ``ids``, both layers of ``imodel`` in one
    run of the low-bit top behind random memory latency and stalls on every
    stream: ``(result, runs)``, every stage of every layer checked bit-exact
    (q, k, v, ctx, attn, both layernorm outputs, g (GELU on FFN 1's writer:
    there is no int16 h1 in memory), f, out)."""
    from bertforge.generators.encoder_sim import simulate_lowbit
    from bertforge.sim.bert_golden import embed
    runs = []
    for tokens in ids[:2]:
        x = np.zeros((12, model.hidden))
        x[:len(tokens)] = embed(model, tokens)
        runs.append((*imodel.input(x), len(tokens)))
    result = simulate_lowbit(config, imodel, runs, mem_latency=2, lat_mask=7, p_req=0.3,
                             p_data=0.3, p_wr=0.3, seed=seed)
    for run in result["runs"]:
        assert len(run) == 2
        for layer in run:
            assert layer["passed"] and layer["match"], layer["mismatches"]
            assert set(layer["mismatches"]) >= {"q", "k", "v", "ctx", "attn", "ln1", "ln1_8", "g",
                                                "f", "out"}
            assert "h1" not in layer["stages"]
    return result, runs
