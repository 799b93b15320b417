"""Low-bit numerics of a BERT encoder: int8 operands for every GEMM (W8A8)
and 4-bit weights (W4A8), in numpy.

This is the numerics model that chose the calibration of issue 36 (see
``generators/docs/lowbit.md``); it is not yet the golden model of an RTL
configuration (the hardware it describes needs a loader that unpacks
narrow weights and a layernorm unit with a second, int8 output; see the
docs). What it computes exactly, in integers:

- every GEMM: int8 activation operand x int8 (W8) or 4-bit (W4) weight,
  int32 (int64 here, checked to fit int32) accumulation, bias at the
  accumulator's scale;
- 4-bit weights per group of ``group`` input channels (along K): the group
  scale is ``col_scale[n] * mult[g, n] / 2**MULT_BITS`` with an integer
  ``mult`` (1 .. 2**MULT_BITS), so a K chunk's partial sum is multiplied by
  an integer in the accumulator (exact) and one per-output-channel scale is
  left for the requantizer, as today's per-channel requantization does.

Smoothing (SmoothQuant's migration, Xiao et al. 2023): an operand's channel
``j`` is divided by ``s_j = max|a_j|**alpha / max|w_j|**(1 - alpha)`` and
the weight's row ``j`` multiplied by it, offline; for the layer input and
the first layernorm's output this is folded into the layernorm's gamma and
beta (an int8 operand output beside the unsmoothed residual), for the
attention context into the per-channel requantization of ``P V``.

What stays outside the int8 GEMMs runs in float64 here, standing for
today's int16 units: the residual stream and layernorm inputs, the softmax
(its probabilities rounded to the int8 operand ``min(round(128 p), 127)``)
and the GELU input.
"""

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["MULT_BITS", "pack_int4", "unpack_int4", "quantize_weight", "smoothing",
           "LowbitLayer", "lowbit_layer", "lowbit_forward", "OPERANDS"]

#: Bits of a 4-bit weight group's integer multiplier.
MULT_BITS = 8
#: The activation operand of each weight GEMM: the weights it multiplies.
OPERANDS = {"x": ("q", "k", "v"), "ctx": ("o",), "ln1": ("1",), "g": ("2",)}


def pack_int4(q):
    """Signed 4-bit values (-8 .. 7, any shape with an even last axis) as
    uint8 bytes, two per byte: element ``2i`` in the low nibble, ``2i + 1``
    in the high nibble (the order a loader unpacks them in)."""
    q = np.asarray(q, dtype=np.int64)
    if q.shape[-1] % 2:
        raise ValueError(f"the last axis must have an even length, not {q.shape[-1]}")
    if q.size and (q.min() < -8 or q.max() > 7):
        raise ValueError("4-bit values must lie in -8 .. 7")
    nib = (q & 0xF).astype(np.uint8)
    return nib[..., 0::2] | (nib[..., 1::2] << 4)


def unpack_int4(b):
    """The inverse of :func:`pack_int4`: uint8 bytes -> sign-extended int64
    values (twice the last axis)."""
    b = np.asarray(b, dtype=np.uint8)
    lo, hi = (b & 0xF).astype(np.int64), (b >> 4).astype(np.int64)
    out = np.stack([lo, hi], axis=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])
    return out - ((out & 8) << 1)


def _group_scales(w, top, group):
    """Per-output-channel scale and integer group multipliers of ``w``
    (K x N) for levels ``top``; returns (col_scale (N,), mult (K/group, N))."""
    k, n = w.shape
    gmax = np.abs(w).reshape(k // group, group, n).max(axis=1)
    col = np.maximum(gmax.max(axis=0), 1e-12) / top
    mult = np.clip(np.ceil(gmax / top / col * (1 << MULT_BITS) - 1e-9), 1, 1 << MULT_BITS)
    return col, mult.astype(np.int64)


def quantize_weight(w, bits=8, *, group=None, hessian=None, damp=0.01):
    """Quantize ``w`` (K x N, ``in x out``) symmetrically to ``bits`` bits.

    ``group`` None: one scale per output channel (``levels = 2**(bits-1) - 1``);
    else per group of ``group`` input channels with integer multipliers
    (module docstring). ``hessian`` (K x K, ``X^T X`` of calibration
    inputs): GPTQ's error compensation (Frantar et al. 2023), rows in order,
    the error of each row spread over the rows not yet quantized; None:
    round to nearest.

    Returns ``(q, col_scale, mult)``: integer ``q`` (K x N), ``col_scale``
    (N,) and ``mult`` (K/group x N integers, or None); the weight is
    ``q * mult[k // group] * col_scale / 2**MULT_BITS`` (grouped) or
    ``q * col_scale``."""
    w = np.asarray(w, dtype=np.float64)
    k, n = w.shape
    top = (1 << (bits - 1)) - 1
    if group is not None and (group < 1 or k % group):
        raise ValueError(f"group must divide the {k} input channels, not {group}")
    g = group or k
    col, mult = _group_scales(w, top, g)
    if group is None:
        mult = np.full((1, n), 1 << MULT_BITS, dtype=np.int64)
    step = col * mult / (1 << MULT_BITS)               # (K/g, N) effective scales

    def rnd(row, i):
        return np.clip(np.floor(row / step[i // g] + 0.5), -top - 1, top)
    if hessian is None:
        q = np.clip(np.floor(w / np.repeat(step, g, axis=0) + 0.5), -top - 1, top)
    else:
        h = np.array(hessian, dtype=np.float64)
        dead = np.diag(h) == 0
        h[dead, dead] = 1.0
        h += damp * np.mean(np.diag(h)) * np.eye(k)
        hinv = np.linalg.cholesky(np.linalg.inv(h)).T        # upper
        work = w.copy()
        q = np.zeros_like(w)
        for i in range(k):
            q[i] = rnd(work[i], i)
            err = (work[i] - q[i] * step[i // g]) / hinv[i, i]
            work[i + 1:] -= np.outer(hinv[i, i + 1:], err)
    return q.astype(np.int64), col, (mult if group is not None else None)


def smoothing(act_max, w_max, alpha):
    """SmoothQuant factors ``act_max**alpha / w_max**(1 - alpha)`` per
    channel (clamped to a positive range)."""
    s = np.maximum(act_max, 1e-5) ** alpha / np.maximum(w_max, 1e-5) ** (1 - alpha)
    return np.clip(s, 1e-3, 1e3)


@dataclass
class LowbitLayer:
    """One layer's quantized weights and scales (from :func:`lowbit_layer`)."""
    wq: dict                      # integer weights (K x N) of q, k, v, o, 1, 2
    col: dict                     # per-output-channel scales
    mult: dict                    # group multipliers (or None)
    group: int                    # group size (K for per-channel)
    smooth: dict                  # operand -> per-channel factors (ones: not smoothed)
    a_scale: dict                 # operand (x, ctx, ln1, g, q, k, v) -> int8 LSB
    b: dict                       # float biases
    gamma: tuple
    beta: tuple
    stats: dict = field(default_factory=dict)


def lowbit_layer(params, cal, *, wbits=8, group=None, alpha=0.5, smooth=("x", "ctx", "ln1"),
                 gptq=False):
    """Quantize one layer's float ``params`` (``w``, ``b``, ``gamma``,
    ``beta`` as :class:`~bertforge.generators.checkpoint.Checkpoint` holds
    them) from calibration statistics ``cal``: per operand of
    :data:`OPERANDS` the per-channel largest magnitude (``max``) and, for
    GPTQ, ``xtx`` (``X^T X`` of the operand); ``q``, ``k``: largest
    magnitudes."""
    w = params["w"]
    wq, col, mult, sm, a_scale = {}, {}, {}, {}, {}
    for operand, keys in OPERANDS.items():
        chmax = cal[operand]["max"]
        if operand in smooth:
            wmax = np.max([np.abs(w[key]).max(axis=1) for key in keys], axis=0)
            s = smoothing(chmax, wmax, alpha)
        else:
            s = np.ones_like(chmax)
        sm[operand] = s
        a_scale[operand] = max(float((chmax / s).max()), 1e-12) / 127
        for key in keys:
            ws = w[key] * s[:, None]
            hess = None
            if gptq:
                hess = cal[operand]["xtx"] / np.outer(s, s)
            wq[key], col[key], mult[key] = quantize_weight(ws, wbits, group=group, hessian=hess)
    for key in ("q", "k"):
        a_scale[key] = max(cal[key], 1e-12) / 127
    return LowbitLayer(wq=wq, col=col, mult=mult, group=group or 0, smooth=sm, a_scale=a_scale,
                       b=params["b"], gamma=params["gamma"], beta=params["beta"])


def _q8(a, scale):
    return np.clip(np.floor(a / scale + 0.5), -128, 127).astype(np.int64)


def _gemm(a8, layer, key):
    """Exact integer GEMM of an int8 operand and a quantized weight; the
    int32 accumulator back in real units (before the bias)."""
    q, col, mult = layer.wq[key], layer.col[key], layer.mult[key]
    if mult is None:
        acc = a8 @ q
        scale = col
    else:
        g = layer.group
        k = q.shape[0]
        parts = np.einsum("sgk,gkn->sgn", a8.reshape(-1, k // g, g), q.reshape(k // g, g, -1))
        acc = np.einsum("sgn,gn->sn", parts, mult)
        scale = col / (1 << MULT_BITS)
    if np.abs(acc).max(initial=0) >= 1 << 31:
        raise OverflowError(f"the {key} accumulator leaves int32")
    return acc * scale


def _layernorm(v, gamma, beta, eps):
    c = v - v.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps) * gamma + beta


def lowbit_forward(layers, x, heads, eps, *, trace=False):
    """The last hidden state (n x H float64) of one unpadded sentence's
    embeddings ``x`` through :class:`LowbitLayer` s; with ``trace`` also the
    float value of every operand (for calibration of the next layer)."""
    from .gelu_golden import gelu_float
    d = x.shape[1] // heads
    for layer in layers:
        s, a = layer.smooth, layer.a_scale

        def lin(value, operand, key):
            a8 = _q8(value / s[operand], a[operand])
            return _gemm(a8, layer, key) * a[operand] + layer.b[key]
        q8 = _q8(lin(x, "x", "q"), a["q"])
        k8 = _q8(lin(x, "x", "k"), a["k"])
        v = lin(x, "x", "v")
        ctx = np.zeros_like(v)
        for h in range(heads):
            c = slice(h * d, (h + 1) * d)
            z = (q8[:, c] @ k8[:, c].T) * (a["q"] * a["k"] / math.sqrt(d))
            z = np.exp(z - z.max(axis=-1, keepdims=True))
            p8 = np.minimum(np.floor(z / z.sum(axis=-1, keepdims=True) * 128 + 0.5), 127)
            # V is requantized per channel at the context's smoothed scale, so
            # the context comes out of P V as the int8 operand of W_o.
            v8 = _q8(v[:, c] / s["ctx"][c], a["ctx"])
            ctx[:, c] = (p8 @ v8) * (a["ctx"] / 128) * s["ctx"][c]
        attn = lin(ctx, "ctx", "o")
        ln1 = _layernorm(attn + x, layer.gamma[0], layer.beta[0], eps)
        g = gelu_float(lin(ln1, "ln1", "1"))
        f = lin(g, "g", "2")
        x = _layernorm(f + ln1, layer.gamma[1], layer.beta[1], eps)
    return x
