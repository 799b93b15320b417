"""Low-bit precisions of a BERT checkpoint (issue 36): calibration, the
quantized model (:mod:`bertforge.sim.lowbit_golden`), its sentence
embeddings, bytes moved per sentence, and the precision axis of ``bertforge
bench model --precision``.

Precisions (:data:`PRECISIONS`): ``w16a16`` is today's path (minilm.toml:
int16 activations, int8 weights stored as int16; its numerics are the
integer golden model of :mod:`bertforge.sim.bert_golden`, bit-exact with
the Verilator runs); ``w8a8`` and ``w4a8`` are the numerics model's (int8
GEMM operands with SmoothQuant smoothing, int8 or 4-bit group-quantized
weights; the residual stream, layernorm and GELU inputs int16).

Calibration uses the calibration sentences only (``generators/data/
calibration.txt``); the evaluation sentences are never seen by it.
"""

import math
from dataclasses import dataclass

import numpy as np

from bertforge.sim.bert_golden import embed, float_forward, pool
from bertforge.sim.lowbit_golden import OPERANDS, lowbit_forward, lowbit_layer

__all__ = ["Precision", "PRECISIONS", "calibration_stats", "quantize_model", "embeddings",
           "bytes_per_sentence", "quality"]


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
    weight_store_bytes: float = None   # bytes per weight in memory (default bits / 8)

    @property
    def weight_bytes(self):
        return self.weight_store_bytes or self.weight_bits / 8


PRECISIONS = {
    # today's minilm.toml: int8 weights stored as int16, int16 activations
    "w16a16": Precision("w16a16", 8, 2, weight_store_bytes=2),
    "w8a8": Precision("w8a8", 8, 1, alpha=0.75, smooth=("x", "ctx", "ln1", "g")),
    "w4a8": Precision("w4a8", 4, 1, group=32, alpha=0.75, smooth=("x", "ctx", "ln1", "g"),
                      gptq=True),
}


def calibration_stats(model, sentences, *, hessian=True):
    """Per layer: per operand of :data:`OPERANDS` the per-channel largest
    magnitude (``max``; the context also covers V, which is requantized at
    its scale) and ``X^T X`` (``xtx``, with ``hessian``); ``q``, ``k``:
    largest magnitudes. ``sentences``: token id arrays (float forward)."""
    stats = []
    for layer in model.layers:
        h, f = model.hidden, model.ffn
        stats.append({op: {"max": np.zeros(f if op == "g" else h),
                           "xtx": np.zeros((f, f) if op == "g" else (h, h)) if hessian else None}
                      for op in OPERANDS} | {"q": 0.0, "k": 0.0})
    for ids in sentences:
        _, traces = float_forward(model, ids, trace=True)
        for st, t in zip(stats, traces):
            for op in OPERANDS:
                value = t[op]
                top = np.abs(value).max(axis=0)
                if op == "ctx":
                    top = np.maximum(top, np.abs(t["v"]).max(axis=0))
                st[op]["max"] = np.maximum(st[op]["max"], top)
                if hessian:
                    st[op]["xtx"] += value.T @ value
            for key in ("q", "k"):
                st[key] = max(st[key], float(np.abs(t[key]).max()))
    return stats


def quantize_model(model, stats, precision):
    """The :class:`~bertforge.sim.lowbit_golden.LowbitLayer` s of ``model``."""
    p = PRECISIONS[precision] if isinstance(precision, str) else precision
    return [lowbit_layer(params, st, wbits=p.weight_bits, group=p.group, alpha=p.alpha,
                         smooth=p.smooth, gptq=p.gptq)
            for params, st in zip(model.layers, stats)]


def embeddings(model, layers, sentences):
    """Pooled, L2-normalized sentence embeddings (N x H) of the quantized model."""
    return np.array([pool(lowbit_forward(layers, embed(model, ids), model.heads, model.eps),
                          len(ids)) for ids in sentences])


def quality(got, ref):
    """Cosine mean and min of each row against the reference, and the
    Spearman correlation of the pairwise similarities."""
    from .model_sim import spearman
    cos = np.sum(got * ref, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    upper = np.triu_indices(len(got), 1)
    rho = spearman((got @ got.T)[upper], (ref @ ref.T)[upper]) if len(got) > 2 else None
    return {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()), "spearman": rho}


def bytes_per_sentence(model, seq, precision):
    """Bytes moved per sentence of ``seq`` tokens through all layers, each
    operand read once and each result written once (compulsory traffic of
    the encoder program: the ideal memory, no re-reads): weights at the
    precision's bytes per weight (4-bit: half a byte, plus one byte per
    group multiplier and four per channel scale word), int32 biases and
    attention scores, GEMM operands at ``act_bytes``, the residual stream
    and layernorm inputs at ``residual_bytes``. Returns a dict by kind."""
    p = PRECISIONS[precision] if isinstance(precision, str) else precision
    h, f, heads, s = model.hidden, model.ffn, model.heads, seq
    shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "o": (h, h), "1": (h, f), "2": (f, h)}
    weights = sum(k * n * p.weight_bytes for k, n in shapes.values())
    if p.group:
        weights += sum(k // p.group * n for k, n in shapes.values())
    scales = sum(4 * n for _, n in shapes.values())        # scale words
    biases = sum(4 * n for _, n in shapes.values())
    a, r = p.act_bytes, p.residual_bytes
    # reads of the operands (x for q, k, v and its transpose; P, V, ctx, ln1, g)
    operands = s * h * a * 4 + heads * s * s * a + s * h * a + s * h * a + s * h * a + s * f * a
    # writes of the GEMM results that are operands again: q, kt, v, ctx, h1 (GELU in), g
    results = s * h * a * 4 + s * f * r + s * f * a
    scores = heads * s * s * 4 * 2 + heads * s * s * a        # scores written, read; P written
    # residual path: attn and f written (int16), layernorm reads x + r, writes out (and an
    # int8 operand copy when the operands are narrower than the residual)
    residual = 2 * (s * h * r) + 2 * (2 * s * h * r) + 2 * s * h * r
    if a != r:
        residual += 2 * s * h * a
    layer = {"weights": weights + scales + biases, "activations": operands + results + scores
             + residual}
    total = {k: v * len(model.layers) for k, v in layer.items()}
    total["total"] = sum(total.values())
    return total
