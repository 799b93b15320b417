"""Low-bit precisions of a BERT checkpoint (issue 36): calibration, the
quantized model (:mod:`bertforge.sim.lowbit_golden`), its sentence
embeddings, bytes moved per sentence, and the precision axis of ``bertforge
bench model --precision``.

Precisions (:data:`PRECISIONS`): ``w16a16`` is today's path (minilm.toml:
int16 activations, int8 weights stored as int16; its numerics are the
integer golden model of :mod:`bertforge.sim.bert_golden`, bit-exact with
the Verilator runs); ``w8a8`` and ``w4a8``: int8 GEMM operands with
SmoothQuant smoothing, int8 or 4-bit group-quantized weights, the residual
stream, layernorm and GELU inputs int16, in the numerics model
(:func:`embeddings`) and the integer golden model on today's int16 units
(:func:`integer_model`).

Calibration uses the calibration sentences only (``generators/data/
calibration.txt`` for the activation scales, and ``calibration_hessian.txt``
beside it for the 4-bit weights' GPTQ Hessians); the evaluation sentences
are never seen by it.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertforge.sim.bert_golden import embed, float_forward, pool, similarity_spearman
from bertforge.sim.lowbit_golden import OPERANDS, lowbit_forward, lowbit_layer

__all__ = ["Precision", "PRECISIONS", "CALIBRATION_HESSIAN", "calibration_stats", "quantize_model", "embeddings",
           "bytes_per_sentence", "layer_tensors", "quality", "integer_model",
           "integer_embeddings", "bench_precisions",
           "write_bench_precisions", "ULX3S", "LOWBIT_HW", "ulx3s_hardware"]


@dataclass(frozen=True)
class Precision:
    """One precision: weight bits and bytes, activation bytes in memory
    (the GEMM operands and the int16 residual), and its quantizer."""
    name: str
    weight_bits: int
    act_bytes: int               # bytes of a GEMM activation operand in memory
    residual_bytes: int = 2      # the residual stream and layernorm inputs
    group: int = None            # 4-bit: group size along K
    alpha: float = 0.5           # smoothing migration strength
    smooth: tuple = ("x", "ctx", "ln1")
    gptq: bool = False
    damp: float = 1.0            # GPTQ damping (fraction of the mean Hessian diagonal)
    act_order: bool = False      # GPTQ: rows in order of decreasing Hessian diagonal
    mult_codes: bool = False     # 4-bit group multiplier codes (MULT_CODES), else 8-bit multipliers
    code_search: int = 0         # codes by least Hessian-weighted error: this many below the covering one
    gelu_fused: bool = False     # GELU on FFN 1's writer: its int16 input never goes to memory
    weight_store_bytes: float = None   # bytes per weight in memory (default bits / 8)

    @property
    def weight_bytes(self):
        return self.weight_store_bytes or self.weight_bits / 8


PRECISIONS = {
    # today's minilm.toml: int8 weights stored as int16, int16 activations
    "w16a16": Precision("w16a16", 8, 2, weight_store_bytes=2),
    "w8a8": Precision("w8a8", 8, 1, alpha=0.75, smooth=("x", "ctx", "ln1", "g"), gelu_fused=True),
    "w4a8": Precision("w4a8", 4, 1, group=32, alpha=0.75, smooth=("x", "ctx", "ln1", "g"),
                      gptq=True, damp=0.1, act_order=True, mult_codes=True, code_search=3,
                      gelu_fused=True),
}

#: Sentences whose operands only add to the GPTQ Hessians (``X^T X``),
#: beside the calibration sentences (which alone set the activation scales).
CALIBRATION_HESSIAN = Path(__file__).parent / "data" / "calibration_hessian.txt"


def calibration_stats(model, sentences, *, hessian=True, hessian_sentences=()):
    """Per layer: per operand of :data:`OPERANDS` the per-channel largest
    magnitude (``max``; the context also covers V, which is requantized at
    its scale) and ``X^T X`` (``xtx``, with ``hessian``, over ``sentences``
    and ``hessian_sentences``); ``q``, ``k``: largest magnitudes (over
    ``sentences`` only). Sentences: token id arrays (float forward)."""
    stats = []
    for layer in model.layers:
        h, f = model.hidden, model.ffn
        stats.append({op: {"max": np.zeros(f if op == "g" else h),
                           "xtx": np.zeros((f, f) if op == "g" else (h, h)) if hessian else None}
                      for op in OPERANDS} | {"q": 0.0, "k": 0.0})
    extra = list(hessian_sentences) if hessian else []
    for index, ids in enumerate(list(sentences) + extra):
        scales = index < len(sentences)
        _, traces = float_forward(model, ids, trace=True)
        for st, t in zip(stats, traces):
            for op in OPERANDS:
                value = t[op]
                if hessian:
                    st[op]["xtx"] += value.T @ value
                if not scales:
                    continue
                top = np.abs(value).max(axis=0)
                if op == "ctx":
                    top = np.maximum(top, np.abs(t["v"]).max(axis=0))
                st[op]["max"] = np.maximum(st[op]["max"], top)
            for key in ("q", "k"):
                if scales:
                    st[key] = max(st[key], float(np.abs(t[key]).max()))
    return stats


def quantize_model(model, stats, precision):
    """The :class:`~bertforge.sim.lowbit_golden.LowbitLayer` s of ``model``."""
    p = PRECISIONS[precision] if isinstance(precision, str) else precision
    return [lowbit_layer(params, st, wbits=p.weight_bits, group=p.group, alpha=p.alpha,
                         smooth=p.smooth, gptq=p.gptq, damp=p.damp,
                         act_order=p.act_order, codes=p.mult_codes, code_search=p.code_search)
            for params, st in zip(model.layers, stats)]


def embeddings(model, layers, sentences):
    """Pooled, L2-normalized sentence embeddings (N x H) of the quantized model."""
    return np.array([pool(lowbit_forward(layers, embed(model, ids), model.heads, model.eps),
                          len(ids)) for ids in sentences])


def integer_model(model, config, layers, stats):
    """The :class:`~bertforge.sim.lowbit_golden.IntegerLowbit` of quantized
    ``layers`` on ``config``'s int16 units (an EncoderConfig); layer 0's
    int16 input scale from the calibration maxima ``stats``."""
    from bertforge.sim.lowbit_golden import IntegerLowbit
    x_scale = float(stats[0]["x"]["max"].max()) / ((1 << 15) - 1)
    return IntegerLowbit(config, layers, model.heads, x_scale)


def integer_embeddings(model, imodel, sentences):
    """Pooled embeddings (N x H) of the integer golden model ``imodel``."""
    scale = imodel.config.layernorm.out_scale
    return np.array([pool(imodel.forward(embed(model, ids))[-1]["out"] * scale, len(ids))
                     for ids in sentences])


#: The bench tables' quality columns (``bench model`` and ``--precision``).
QUALITY_COLUMNS = (("cos mean", "cosine_mean", "{:.4f}"), ("cos min", "cosine_min", "{:.4f}"),
                   ("spearman", lambda r: "-" if r["spearman"] is None else f"{r['spearman']:.4f}"))


def quality_note(checkpoint):
    """The bench tables' note on what the :data:`QUALITY_COLUMNS` measure."""
    return (f"{Path(str(checkpoint)).name}: evaluation sentences "
            "(generators/data/evaluation.txt); cosine of each sentence embedding against the "
            "float64 model; spearman of the pairwise similarities")


def quality(got, ref):
    """Cosine mean and min of each row against the reference, and the
    Spearman correlation of the pairwise similarities."""
    cos = np.sum(got * ref, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    return {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()),
            "spearman": similarity_spearman(got, ref)}


def layer_tensors(model, seq, precision):
    """The tensors one encoder layer moves for one sentence of ``seq``
    tokens: ``(name, elements, bytes per element, times moved)``, each
    written once and read once per consumer (the encoder program's order:
    the layer input's operand copy is read by the q, v and k projections;
    the k projection stores ``K^T`` itself). With
    operands narrower than the residual, each layernorm writes two copies:
    the residual (``residual_bytes``) and the smoothed int8 operand, and
    the low-bit program runs the q and v projections as one GEMM (``[Wq |
    Wv]``), so that operand is read twice, by it and the k projection. 4-bit
    group multipliers take a byte each, or half a byte as codes
    (``mult_codes``); with ``gelu_fused`` the GELU unit takes FFN 1's
    results on the writer's way out, so its int16 input is not moved."""
    p = PRECISIONS[precision] if isinstance(precision, str) else precision
    h, f, heads, s = model.hidden, model.ffn, model.heads, seq
    a, r = p.act_bytes, p.residual_bytes
    shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "o": (h, h), "1": (h, f), "2": (f, h)}
    weights = sum(k * n for k, n in shapes.values())
    rows = [("weights", weights, p.weight_bytes, 1),
            ("scale words and int32 biases", sum(n for _, n in shapes.values()), 8, 1)]
    if p.group:
        rows.append(("group multipliers", sum(k // p.group * n for k, n in shapes.values()),
                     0.5 if p.mult_codes else 1, 1))
    two = a != r
    # written by the last layernorm, read by q and v (one GEMM when two copies) and k;
    # one copy: also the residual
    rows += [("x operand", s * h, a, 3 if two else 5),
             ("q", s * h, a, 2), ("k^T", s * h, a, 2), ("v", s * h, a, 2),
             ("scores (int32)", heads * s * s, 4, 2), ("p", heads * s * s, a, 2),
             ("ctx", s * h, a, 2), ("attn", s * h, r, 2), ("ln1", s * h, r, 3 if not two else 2),
             ("h1 (GELU input)", s * f, r, 0 if p.gelu_fused else 2), ("g", s * f, a, 2),
             ("f", s * h, r, 2),
             ("out", s * h, r, 1)]
    if two:
        rows += [("x residual", s * h, r, 1), ("ln1 operand", s * h, a, 2)]
    else:
        rows[-1] = ("out", s * h, r, 0)       # the next layer's x (counted there)
    return rows


def bytes_per_sentence(model, seq, precision):
    """Bytes moved per sentence of ``seq`` tokens through all layers
    (:func:`layer_tensors`: compulsory traffic, as an ideal memory sees it,
    no re-reads of tiles): ``weights`` (with scales, biases and group
    multipliers), ``activations`` and ``total``."""
    rows = layer_tensors(model, seq, precision)
    layers = len(model.layers)
    weights = sum(n * b * t for name, n, b, t in rows
                  if name in ("weights", "scale words and int32 biases", "group multipliers")) * layers
    total = sum(n * b * t for _, n, b, t in rows) * layers
    weights, total = int(weights), int(total)         # whole bytes (codes pair up in bytes)
    return {"weights": weights, "activations": total - weights, "total": total}


# ---- bench model --precision

#: The ULX3S the bench's sentences per second are for: ``analyze``'s
#: memory-aware model of its SDRAM (``[memory] board = "ulx3s"``:
#: MT48LC16M16, the simple controller) at ``clock_mhz``, the controller's
#: pipeline ``mem_latency`` cycles (the CAS latency is added), as
#: minilm_ulx3s.toml has it.
ULX3S = {"clock_mhz": 100.0, "mem_latency": 4, "memory": {"board": "ulx3s"}}
#: The hardware config of each precision's sentences per second: today's
#: (the bench's ``--hw``) and the low-bit tops ``sim model`` runs bit-exact.
LOWBIT_HW = {"w8a8": Path(__file__).parent / "configs" / "minilm_int8.toml",
             "w4a8": Path(__file__).parent / "configs" / "minilm_w4a8.toml"}


def ulx3s_hardware(path):
    """``analyze``'s :class:`~bertforge.generators.analyze.Hardware` of the
    config at ``path`` on the ULX3S's SDRAM (:data:`ULX3S`): its units, the
    clock and memory of :data:`ULX3S`."""
    import tomllib
    from .analyze import hardware_from_table
    from .userfiles import read_text
    path = Path(path)
    table = tomllib.loads(read_text(path, "hardware config"))
    hw = {key: value for key, value in table.get("hardware", {}).items()
          if key != "mem_bytes_per_cycle"}
    hw.update(clock_mhz=ULX3S["clock_mhz"], mem_latency=ULX3S["mem_latency"])
    return hardware_from_table({**table, "hardware": hw, "memory": ULX3S["memory"]}, path,
                               path.stem)


def _w16a16_embeddings(model, hw, cal_ids, ids):
    """Today's path (``hw``: minilm.toml): the integer golden model, which
    the Verilator runs of ``sim model`` match bit for bit."""
    from bertforge.sim.bert_golden import QuantizedModel, calibrate_model, integer_forward
    from .analyze import load_hardware
    from .encoder_sim import encoder_config
    config = encoder_config(load_hardware(hw), hw)
    step = config.gemm.mem_bytes // 4
    seq = max(step, -(-max(len(i) for i in ids) // step) * step)
    qmodel = QuantizedModel(config, model, calibrate_model(model, cal_ids), seq)
    scale = config.layernorm.out_scale
    return np.array([pool(integer_forward(qmodel, i)[-1]["out"] * scale, len(i)) for i in ids]), seq


def bench_precisions(checkpoint, texts, hw, calibration, hessian=()):
    """One row per precision of :data:`PRECISIONS`: quality of the
    evaluation ``texts`` against the float64 model, bytes per sentence,
    and sentences per second on the ULX3S's SDRAM at batch 1 and 8
    (``analyze`` of the precision's hardware, ``hw`` or :data:`LOWBIT_HW`,
    on :func:`ulx3s_hardware`).
    ``hessian``: sentences that only add to the GPTQ Hessians (``bench
    model --precision``: those of :data:`CALIBRATION_HESSIAN`)."""
    from .analyze import analyze, load_hardware
    from .checkpoint import load_checkpoint
    from .workload import BertModel
    model = load_checkpoint(checkpoint)
    ids, cal_ids = tokenize_all(model, texts), tokenize_all(model, calibration)
    ref = np.array([pool(float_forward(model, i), len(i)) for i in ids])
    stats = calibration_stats(model, cal_ids, hessian_sentences=tokenize_all(model, hessian))
    hardware = load_hardware(hw)
    got16, seq = _w16a16_embeddings(model, hw, cal_ids, ids)
    from .encoder_sim import encoder_config
    config = encoder_config(hardware, hw)
    rows = []
    for name, p in PRECISIONS.items():
        numerics = None
        if name == "w16a16":
            got = got16
            source = "integer golden model (bit-exact with Verilator)"
        else:
            layers = quantize_model(model, stats, p)
            numerics = quality(embeddings(model, layers, ids), ref)
            got = integer_embeddings(model, integer_model(model, config, layers, stats), ids)
            source = ("low-bit integer golden model (bit-exact with Verilator on "
                      f"minilm_{'int8' if name == 'w8a8' else 'w4a8'}.toml)")
        moved = bytes_per_sentence(model, seq, p)
        shape = BertModel(Path(str(model.path)).name, model.hidden, model.heads,
                          len(model.layers), model.ffn)
        rate = {}
        board = ulx3s_hardware(LOWBIT_HW.get(name, hw))
        for batch in (1, 8):
            result = analyze(shape, seq, board, batch=batch, bias=True, transpose=True)
            rate[batch] = result["totals"]["sentences_per_second"]
            bound = sum(r["cycles"] for r in result["operations"] if r["bound"] == "memory")
            rate[f"bound_{batch}"] = "memory" if 2 * bound > result["total_cycles"] else "compute"
        rows.append({"precision": name, "source": source, "texts": len(ids), "seq": seq,
                     **quality(got, ref), "bytes_per_sentence": moved["total"],
                     "weight_bytes": moved["weights"], "activation_bytes": moved["activations"],
                     "sentences_per_s_b1": rate[1], "sentences_per_s_b8": rate[8],
                     "bound_b1": rate["bound_1"], "bound_b8": rate["bound_8"],
                     "weight_bits": p.weight_bits, "group": p.group, "alpha": p.alpha,
                     "smooth": list(p.smooth), "gptq": p.gptq, "damp": p.damp,
                     "act_order": p.act_order, "mult_codes": p.mult_codes,
                     "gelu_fused": p.gelu_fused, "hessian_texts": len(hessian) if p.gptq else 0,
                     "numerics": numerics})
    base = rows[0]["bytes_per_sentence"]
    for row in rows:
        row["bytes_vs_w16a16"] = row["bytes_per_sentence"] / base
    return rows


def tokenize_all(model, texts):
    from .checkpoint import tokenize
    return tokenize(model, texts, 512)


def write_bench_precisions(out, checkpoint, rows):
    """``bench.json``, ``bench.md`` and ``cosine_bytes.png``."""
    from .bench import columns, write_results
    table = columns(("precision", "precision", "{}"), ("texts", "texts", "{}"),
                    *QUALITY_COLUMNS,
                    ("bytes/sentence", "bytes_per_sentence", "{:,.0f}"),
                    ("vs w16a16", "bytes_vs_w16a16", "{:.1%}"),
                    ("sent/s b1", "sentences_per_s_b1", "{:.2f}"),
                    ("sent/s b8", "sentences_per_s_b8", "{:.2f}"),
                    ("source", "source", "{}"))
    write_results(out, "model-precision", rows, table, "bertforge bench model --precision", notes=[
        quality_note(checkpoint), "calibration on generators/data/calibration.txt only "
        "(activation scales), plus calibration_hessian.txt for w4a8's GPTQ Hessians",
        "bytes/sentence: compulsory traffic of one sentence through all layers (each operand "
        "read once, each result written once), weights included; w8a8 and w4a8 with the GELU "
        "on FFN 1's writer (its int16 input not stored)",
        "sent/s: analyze's memory-aware model on the ULX3S's SDRAM ([memory] board = "
        "\"ulx3s\", the simple controller, 100 MHz) of each precision's hardware config: "
        "w16a16 the --hw one, w8a8 minilm_int8.toml, w4a8 minilm_w4a8.toml; at batch 8 the "
        "engine still reads the weights once per block of rows. The low-bit tops have run in "
        "Verilator on ideal memory only",
        "w8a8 and w4a8: the low-bit integer golden model (sim/lowbit_golden.py, IntegerLowbit: "
        "int16 residual stream and units, int8 GEMM operands), bit-exact with the RTL "
        "(sim model --hw minilm_int8.toml, minilm_w4a8.toml): see generators/docs/lowbit.md"])
    _plot(Path(out) / "cosine_bytes.png", rows)


def _plot(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for row in rows:
        x = row["bytes_per_sentence"] / 1e6
        ax.errorbar([x], [row["cosine_mean"]], yerr=[[row["cosine_mean"] - row["cosine_min"]], [0]],
                    fmt="o", capsize=4)
        ax.annotate(row["precision"], (x, row["cosine_mean"]), textcoords="offset points",
                    xytext=(6, 4), fontsize=9)
    ax.set_xlabel("MB moved per sentence (all layers)")
    ax.set_ylabel("cosine vs float64 (mean, bar to min)")
    ax.grid(alpha=0.3)
    tmp = path.with_name(path.name + ".tmp.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
