"""A whole BERT model as :class:`~bertforge.rtl.encoder.EncoderTop` runs it:
the float64 reference, calibration, and the integer golden model, layer by
layer (each layer is :mod:`bertforge.sim.encoder_golden`).

``model`` is any object with ``hidden``, ``heads``, ``ffn``, ``eps``,
``embeddings`` (``word``, ``position``, ``type``, ``gamma``, ``beta``) and
``layers`` (dicts of float ``w`` (``in x out``), ``b``, ``gamma``,
``beta``), as :class:`bertforge.generators.checkpoint.Checkpoint` is.

- Embeddings run on the host in float64 (token + position + type 0, then
  their LayerNorm); the sentence is padded with zero rows to the run's
  sequence length ``S``; padding keys are masked in the softmax.
- Layer 0's input is quantized at its calibrated scale; every later layer
  takes the previous layer's output (int8 or int16, as the config's
  activations are) as it is (scale: the layernorm unit's ``out_scale``).
- Sentence embedding (sentence-transformers' mean pooling): the mean of the
  last layer's real-token rows, L2-normalized.

The float reference is BertModel's forward of the unpadded sentence: biases
everywhere, exact softmax, erf GELU, LayerNorm with ``eps`` from config.json.
"""

import math

import numpy as np

from .encoder_golden import (EncoderLayer, _layernorm, _q8, calibrate, encoder_float, encoder_golden,
                             quantize)

__all__ = ["embed", "float_forward", "pool", "calibrate_model", "QuantizedModel", "spearman",
           "similarity_spearman",
           "integer_forward", "STAGES"]

#: Tensors whose largest magnitude calibration records, per layer.
STAGES = ("x", "q", "k", "v", "ctx", "attn")


def embed(model, ids):
    """Float64 embeddings (n x H) of token ids: word + position + type 0, LayerNorm."""
    e = model.embeddings
    ids = np.asarray(ids)
    x = e["word"][ids] + e["position"][:ids.size] + e["type"][0]
    return _layernorm(x, e["gamma"], e["beta"], model.eps)


def _float_layer(model, index, x, valid=None):
    p = model.layers[index]
    return EncoderLayer(seq=x.shape[0], hidden=model.hidden, heads=model.heads, ffn=model.ffn, x=x,
                        w=p["w"], gamma=p["gamma"], beta=p["beta"], b=p["b"], per_channel=True,
                        valid=valid, eps=model.eps)


def float_forward(model, ids, *, trace=False):
    """BertModel's last hidden state (n x H, float64) of one sentence; with
    ``trace`` also a list of per-layer stage dicts (:func:`encoder_float`)."""
    x = embed(model, ids)
    traces = []
    for index in range(len(model.layers)):
        stages = encoder_float(_float_layer(model, index, x), trace=True)
        traces.append({"x": x, **stages})
        x = stages["out"]
    return (x, traces) if trace else x


def pool(hidden, n):
    """Mean over the first ``n`` rows, L2-normalized (float64)."""
    v = np.asarray(hidden, dtype=np.float64)[:n].mean(axis=0)
    return v / max(np.linalg.norm(v), 1e-12)


def calibrate_model(model, sentences):
    """Per layer, the largest magnitude of each of :data:`STAGES` over the
    float forward of ``sentences`` (lists of token ids)."""
    top = [dict.fromkeys(STAGES, 0.0) for _ in model.layers]
    for ids in sentences:
        _, traces = float_forward(model, ids, trace=True)
        for index, stages in enumerate(traces):
            for key in STAGES:
                top[index][key] = max(top[index][key], float(np.abs(stages[key]).max()))
    return top


class QuantizedModel:
    """The integer layers of ``model`` for ``config`` (an EncoderConfig) and
    calibration maxima ``top`` (:func:`calibrate_model`), for runs of
    ``seq`` tokens: ``layers`` (EncoderLayer, per-channel weights, int32
    biases) and ``x_scale`` (layer 0's input LSB)."""

    def __init__(self, config, model, top, seq):
        self.config, self.model, self.seq = config, model, seq
        ln = config.layernorm
        self.layers = []
        for index in range(len(model.layers)):
            t = top[index]
            # Layer 0 takes the host's embeddings; later layers the previous
            # layer's output at the layernorm unit's scale. attn shares it.
            scales = calibrate(t, config)
            if index:
                scales["x"] = ln.out_scale
            layer = _float_layer(model, index, np.zeros((seq, model.hidden)))
            quantize(config, layer, scales)
            self.layers.append(layer)
        self.x_scale = self.layers[0].scales["x"]

    def input(self, ids):
        """Layer 0's input (S x H, int8 or int16): embeddings quantized, zero padding rows."""
        x = np.zeros((self.seq, self.model.hidden))
        x[:len(ids)] = embed(self.model, ids)
        return _q8(x, self.x_scale, self.config.gemm.width)


def integer_forward(qmodel, ids, *, inputs=None):
    """Every layer's integer stages (a list of :func:`encoder_golden` dicts)
    for one sentence padded to ``qmodel.seq``. ``inputs`` (optional, one
    S x H integer array per layer) replaces each layer's input (to check a layer of
    a hardware run on the hardware's own input)."""
    x = qmodel.input(ids)
    out = []
    for index, layer in enumerate(qmodel.layers):
        layer.valid = len(ids)
        layer.xq = x if inputs is None else np.asarray(inputs[index], dtype=np.int64)
        stages = encoder_golden(qmodel.config, layer)
        out.append(stages)
        x = stages["out"]
    return out


def spearman(a, b):
    """Spearman rank correlation of two 1-D arrays (ranks by argsort; ties
    broken by position)."""
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    return float(ra @ rb / math.sqrt((ra @ ra) * (rb @ rb)))


def similarity_spearman(got, ref):
    """Spearman correlation of the pairwise similarities of the rows of
    ``got`` and ``ref`` (None under three rows)."""
    if len(got) < 3:
        return None
    upper = np.triu_indices(len(got), 1)
    return spearman((got @ got.T)[upper], (ref @ ref.T)[upper])
