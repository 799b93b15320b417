"""Integer golden model and float reference of one BERT encoder layer as
:class:`~bertforge.rtl.encoder.EncoderTop` runs it.

Weights are symmetric int8, per tensor or (``per_channel``) per output
channel; activation scales are calibrated on the float reference (or
given, as a whole model's calibration does). With biases (``b``), the
linear layers whose weight is the B operand (q, v, output projection, both
FFN GEMMs) add int32 biases at the accumulator's scale and requantize with
one scale per output channel in the GEMM engine; the k projection drops its
bias (it adds one value to a whole row of attention scores, which the
softmax ignores) and keeps one weight scale (its output channels are rows
of ``K^T``). With ``valid`` < S the keys of the padding tokens (columns
``valid`` and beyond) are masked in the softmax. With ``S`` tokens,
hidden ``H``, ``heads`` heads of ``d = H / heads`` and FFN width ``F``
(``sx``, ``sq``, ... the real value of one LSB of each tensor):

1. ``Q = rq(X Wq)``, ``V = rq(X Wv)``, ``K^T = rq(X Wk)^T`` (``rq`` is
   the engine's requantization, multiplier/shift from the scale ratio; K is
   stored transposed (the engine's ``transpose_c``) because the score
   GEMMs read it as their row-major B operand, see
   :mod:`bertforge.sim.encoder_run`).
2. Per head ``h``: scores ``Q_h K^T_h`` (int32), softmax with scale
   ``sq sk / sqrt(d)`` (:func:`softmax_golden`), then int8: ``P = min((p +
   1) >> 1, 127)`` of the uint8 ``p`` (scale 1/128: the softmax adapter's
   requantization); int16: the unit's Q1.15 ``p`` as it is (scale
   2**-15); ``ctx_h = rq(P V_h)``.
3. ``attn = rq(ctx Wo)`` at scale ``sx`` (the residual must share X's
   scale), ``ln1 = LayerNorm(attn + X)`` (the unit's fused residual add;
   int8 at the unit's output scale ``s1``).
4. ``h1 = rq(ln1 W1)`` at the GELU unit's input scale, ``g = GELU(h1)``
   (:func:`gelu_golden`), ``f = rq(g W2)`` at ``s1``,
   ``out = LayerNorm(f + ln1)``.

Activations are int8 with a width-8 GEMM engine and int16 with a width-16
one (:func:`wide`); weights are int8 either way (stored as int16 for the
width-16 engine), gamma and beta at the layernorm unit's ``param_width``.
Calibrated int16 tensors map their largest magnitude to
``2**(SPAN16[key] - 1) - 1`` (:data:`SPAN16`); the residual stream (layer
input, attention output, layernorm outputs, FFN 2 output) is at the
layernorm unit's output scale after layer 0.

The float reference runs the same graph in float64 with the unquantized
weights (exact softmax, erf GELU, LayerNorm with float gamma/beta).
"""

import math
from dataclasses import dataclass

import numpy as np

from .fixed_golden import channel_scale_words, ratio_to_mult_shift, split_scale_words
from .gelu_golden import gelu_float, gelu_golden
from .gemm_golden import gemm_golden
from .layernorm_golden import layernorm_golden
from .softmax_golden import softmax_golden
from bertforge.rtl.softmax import softmax_scale

__all__ = ["EncoderLayer", "random_layer", "encoder_float", "encoder_golden", "cosine",
           "probabilities_int8", "quantize", "calibrate", "LINEAR"]


@dataclass
class EncoderLayer:
    """Float weights and input, their integer versions and every scale."""
    seq: int                      # tokens of one sentence (S)
    hidden: int
    heads: int
    ffn: int
    x: np.ndarray                 # (batch * S) x H float input: the sentences stacked
    w: dict                       # float weights: q, k, v, o (H x H), 1 (H x F), 2 (F x H)
    gamma: tuple                  # float gamma of layernorm 1, 2
    beta: tuple
    wq: dict = None               # int8 weights
    sw: dict = None               # weight scales
    xq: np.ndarray = None         # int8 input
    scales: dict = None           # activation scales
    gamma_q: tuple = None
    beta_q: tuple = None
    rq: dict = None               # (multiplier, shift) of each GEMM's requantization (arrays per channel)
    softmax: tuple = None         # (multiplier, shift) of the softmax row scale
    b: dict = None                # float biases: q, k, v, o, 1, 2 (None: no biases)
    per_channel: bool = False     # int8 weights per output channel (q, v, o, 1, 2)
    valid: int = None             # real tokens (the rest is padding, masked); None: all
    eps: float = 0.0              # LayerNorm epsilon of the float reference
    bq: dict = None               # int32 biases at the accumulator scale (q, v, o, 1, 2)
    words: dict = None            # per-channel scale words (uint32) of q, v, o, 1, 2
    batch: int = 1                # sentences stacked along M (attention per sentence)

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def tokens(self):
        """Rows of the stacked batch: ``batch * seq``."""
        return self.batch * self.seq

    def valids(self):
        """The real tokens of each sentence (``valid``: None, an int for
        every sentence, or one per sentence); None for a sentence with no
        padding."""
        if isinstance(self.valid, (list, tuple)):
            if len(self.valid) != self.batch:
                raise ValueError(f"valid has {len(self.valid)} entries for a batch of {self.batch}")
            return list(self.valid)
        return [self.valid] * self.batch


def _q8(values, scale, bits=8):
    """Round to nearest at ``scale`` and saturate to ``bits``-bit signed."""
    top = (1 << (bits - 1)) - 1
    return np.clip(np.floor(np.asarray(values) / scale + 0.5), -top - 1, top).astype(np.int64)


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(v, gamma, beta, eps=0.0):
    c = v - v.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps) * gamma + beta


#: The linear layers that carry a bias and per-channel scales (B is a weight).
LINEAR = ("q", "v", "o", "1", "2")


def encoder_float(layer, *, trace=False):
    """The float64 layer output (S x H); with ``trace`` a dict of every stage.
    BertModel semantics: biases (all six, k's too), padding keys masked
    (additive -infinity), exact softmax, erf GELU, LayerNorm with ``eps``."""
    x, w, d = layer.x, layer.w, layer.head_dim
    b = layer.b or {}

    def lin(a, key):
        return a @ w[key] + b[key] if key in b else a @ w[key]
    q, k, v = lin(x, "q"), lin(x, "k"), lin(x, "v")
    ctx = np.zeros_like(q)
    S = layer.seq
    for sentence, valid in enumerate(layer.valids()):      # attention per sentence
        pad = np.arange(S) >= (valid or S)
        rows = slice(sentence * S, (sentence + 1) * S)
        for h in range(layer.heads):
            cols = slice(h * d, (h + 1) * d)
            p = _softmax(np.where(pad, -np.inf, q[rows, cols] @ k[rows, cols].T / math.sqrt(d)))
            ctx[rows, cols] = p @ v[rows, cols]
    attn = lin(ctx, "o")
    ln1 = _layernorm(attn + x, layer.gamma[0], layer.beta[0], layer.eps)
    h1 = lin(ln1, "1")
    g = gelu_float(h1)
    f = lin(g, "2")
    out = _layernorm(f + ln1, layer.gamma[1], layer.beta[1], layer.eps)
    if trace:
        return {"q": q, "k": k, "v": v, "ctx": ctx, "attn": attn, "ln1": ln1, "h1": h1, "g": g,
                "f": f, "out": out}
    return out


def random_layer(config, seq, hidden=64, heads=2, ffn=256, *, seed=0, weight_std=None, batch=1):
    """A random layer of realistic scale, quantized for ``config`` (an
    :class:`~bertforge.rtl.encoder.EncoderConfig`), ``batch`` sentences of
    ``seq`` tokens stacked: input ~ N(0, 1)
    (a layernormed embedding), weights ~ N(0, weight_std) with
    ``weight_std = 1/sqrt(fan_in)`` by default (activations stay near unit
    scale, as in a trained BERT), gamma ~ 1 + N(0, 0.1), beta ~ N(0, 0.1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((seq, hidden))
    if batch > 1:     # sentence 0 as with batch 1, then the others
        x = np.concatenate([x, rng.standard_normal(((batch - 1) * seq, hidden))])
    shapes = {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden),
              "o": (hidden, hidden), "1": (hidden, ffn), "2": (ffn, hidden)}
    w = {key: rng.standard_normal(shape) * (weight_std or 1.0 / math.sqrt(shape[0]))
         for key, shape in shapes.items()}
    gamma = tuple(1.0 + 0.1 * rng.standard_normal(hidden) for _ in range(2))
    beta = tuple(0.1 * rng.standard_normal(hidden) for _ in range(2))
    layer = EncoderLayer(seq=seq, hidden=hidden, heads=heads, ffn=ffn, x=x, w=w, gamma=gamma, beta=beta,
                         batch=batch)
    quantize(config, layer)
    return layer


def wide(config):
    """True if ``config`` (an EncoderConfig) runs int16 activations (a
    width-16 GEMM engine), False for int8."""
    return config.gemm.width == 16


#: int16 activations: the bits the calibrated largest magnitude of each
#: scaled tensor spans (q and k narrower, so that the int32 attention
#: scores of int16 x int16 products keep clear of saturation).
SPAN16 = {"x": 16, "q": 13, "k": 13, "v": 16, "ctx": 16}


def levels(config, key):
    """The integer the calibrated largest magnitude of tensor ``key`` maps to
    (``config`` None: int8)."""
    return (1 << (SPAN16[key] - 1)) - 1 if config is not None and wide(config) else 127


def calibrate(trace, config=None):
    """Activation scales (one LSB, real units) from a float trace (a dict
    of stage -> array, or of stage -> largest magnitude seen): the largest
    magnitude over :func:`levels` (127 for int8; ``config`` None: int8);
    ``x`` covers the layer input and ``attn`` (the residual of layernorm 1
    adds them at one scale)."""
    top = {key: float(np.abs(value).max()) for key, value in trace.items()}
    return {"x": max(top["x"], top["attn"]) / levels(config, "x"),
            **{key: max(top[key], 1e-12) / levels(config, key) for key in ("q", "k", "v", "ctx")}}


def quantize(config, layer, scales=None):
    """Fill in the int8 weights, scales and requantization constants of
    ``layer`` for ``config``'s units (in place). ``scales`` (``x``, ``q``,
    ``k``, ``v``, ``ctx``; see :func:`calibrate`) default to the layer's own
    float trace."""
    ln, gelu = config.layernorm, config.gelu
    if scales is None:
        ref = encoder_float(layer, trace=True)
        scales = calibrate({**{key: ref[key] for key in ("q", "k", "v", "ctx", "attn")}, "x": layer.x},
                           config)
    channel = set(LINEAR) if layer.per_channel else set()
    layer.sw = {key: (np.maximum(np.abs(value).max(axis=0), 1e-12) / 127 if key in channel
                      else float(np.abs(value).max()) / 127)
                for key, value in layer.w.items()}
    layer.wq = {key: _q8(value, layer.sw[key]) for key, value in layer.w.items()}
    sx = scales["x"]
    bits = config.gemm.width             # activations: int8 or int16
    s = {**scales, "p": 2.0 ** -(config.softmax.out_width - 1), "attn": sx, "ln1": ln.out_scale, "h1": gelu.in_scale,
         "g": gelu.out_scale, "f": ln.out_scale, "out": ln.out_scale}
    layer.scales = s
    layer.xq = _q8(layer.x, sx, bits)
    gq = [_q8(g, ln.gamma_scale, ln.param_width) for g in layer.gamma]
    bq = [_q8(b, ln.beta_scale, ln.param_width) for b in layer.beta]
    layer.gamma_q, layer.beta_q = tuple(gq), tuple(bq)
    pairs = {"q": ("x", "q", "q"), "k": ("x", "k", "k"), "v": ("x", "v", "v"), "ctx": ("p", None, "ctx"),
             "o": ("ctx", "o", "attn"), "1": ("ln1", "1", "h1"), "2": ("g", "2", "f")}
    layer.rq, layer.bq, layer.words = {}, {}, {}
    for key, (a, wkey, out) in pairs.items():
        b_scale = s["v"] if wkey is None else layer.sw[wkey]
        if key in channel:
            layer.words[key] = channel_scale_words(np.broadcast_to(s[a] * b_scale / s[out],
                                                                   (layer.w[key].shape[1],)))
            layer.rq[key] = split_scale_words(layer.words[key])
        else:
            layer.rq[key] = ratio_to_mult_shift(s[a] * b_scale / s[out])
        if layer.b is not None and key in LINEAR:
            acc = np.floor(layer.b[key] / (s[a] * b_scale) + 0.5)
            layer.bq[key] = np.clip(acc, -(1 << 31), (1 << 31) - 1).astype(np.int64)
    layer.softmax = softmax_scale(s["q"] * s["k"] / math.sqrt(layer.head_dim))
    return layer


def probabilities_int8(p):
    """The softmax adapter's requantization: uint8 ``p`` -> ``min((p + 1) >> 1, 127)``."""
    return np.minimum((np.asarray(p, dtype=np.int64) + 1) >> 1, 127)


def encoder_golden(config, layer):
    """Every integer stage of the layer as the hardware computes it (dict of
    int64 arrays; ``kt`` is K transposed, ``scores`` and ``p`` are
    (batch * heads) x S x S, sentence-major). The projections and the FFN
    run on the stacked batch (``batch * S`` rows), attention per sentence."""
    g, wq, d, S = config.gemm, layer.wq, layer.head_dim, layer.seq

    narrow = not wide(config)

    def mm(a, b, key):
        mult, shift = layer.rq[key]
        return gemm_golden(g, a, b, bias=(layer.bq or {}).get(key), int8=narrow, int16=not narrow,
                           multiplier=mult, shift=shift)
    x = layer.xq
    q, v = mm(x, wq["q"], "q"), mm(x, wq["v"], "v")
    kt = mm(x, wq["k"], "k").T
    heads, sentences = layer.heads, range(layer.batch)

    def rows(b):
        return slice(b * S, (b + 1) * S)
    scores = np.stack([gemm_golden(g, q[rows(b), h * d:(h + 1) * d], kt[h * d:(h + 1) * d, rows(b)])
                       for b in sentences for h in range(heads)])
    mult, shift = layer.softmax
    mask = np.concatenate([np.broadcast_to(np.arange(S) >= (valid or S), (heads * S, S))
                           for valid in layer.valids()])
    p8 = softmax_golden(config.softmax, scores.reshape(-1, S), mask, mult, shift)
    p = (probabilities_int8(p8) if config.softmax.out_width == 8 else p8).reshape(-1, S, S)
    ctx = np.concatenate([np.concatenate([mm(p[b * heads + h], v[rows(b), h * d:(h + 1) * d], "ctx")
                                          for h in range(heads)], axis=1) for b in sentences])
    attn = mm(ctx, wq["o"], "o")
    ln = config.layernorm
    ln1 = np.stack([layernorm_golden(ln, attn[t], x[t], layer.gamma_q[0], layer.beta_q[0])
                    for t in range(len(x))])
    h1 = mm(ln1, wq["1"], "1")
    gl = gelu_golden(config.gelu, h1)
    f = mm(gl, wq["2"], "2")
    out = np.stack([layernorm_golden(ln, f[t], ln1[t], layer.gamma_q[1], layer.beta_q[1])
                    for t in range(len(x))])
    return {"q": q, "kt": kt, "v": v, "scores": scores, "p": p, "ctx": ctx, "attn": attn,
            "ln1": ln1, "h1": h1, "g": gl, "f": f, "out": out}


def cosine(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
