"""Bit-exact numpy golden model of :class:`~bertforge.rtl.softmax.Softmax`,
and the float reference its accuracy is measured against.

Rows are given as 2-D arrays padded to a common length, with a boolean
``mask`` (True = excluded: padding or a masked token).
"""

import numpy as np

from bertforge.rtl.softmax import T_FRAC, T_HI_BITS, T_INT, softmax_scale
from bertforge.sim.fixed_golden import requantize
from bertforge.rtl.errors import ParameterError

__all__ = ["softmax_golden", "softmax_float", "row_scales", "softmax_errors"]


def _rows(x, mask):
    x = np.asarray(x, dtype=np.int64)
    if x.ndim == 1:
        x = x[None, :]
    mask = np.zeros(x.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if mask.ndim == 1:
        mask = mask[None, :]
    if mask.shape != x.shape:
        raise ParameterError(f"mask shape {mask.shape} differs from x shape {x.shape}")
    return x, mask


def row_scales(scales, rows):
    """Per-row ``(multipliers, shifts)`` int64 arrays from one real scale or
    one per row (see :func:`~bertforge.rtl.softmax.softmax_scale`)."""
    scales = np.broadcast_to(np.asarray(scales, dtype=np.float64), (rows,))
    pairs = [softmax_scale(float(s)) for s in scales]
    return (np.array([p[0] for p in pairs], dtype=np.int64),
            np.array([p[1] for p in pairs], dtype=np.int64))


def softmax_golden(config, x, mask, multipliers, shifts):
    """The hardware's output for rows ``x`` (R x L ints of ``in_width``),
    ``mask`` (R x L bools or None), per-row ``multipliers`` and ``shifts``.

    Returns an R x L int64 array of raw outputs (U0.8 for uint8, Q1.15 for
    int16); masked elements and fully masked rows give 0.
    """
    x, mask = _rows(x, mask)
    rows = x.shape[0]
    multipliers = np.broadcast_to(np.asarray(multipliers, dtype=np.int64), (rows,))
    shifts = np.broadcast_to(np.asarray(shifts, dtype=np.int64), (rows,))
    lowest = -(1 << (config.in_width - 1))
    row_max = np.where(mask, lowest, x).max(axis=1, initial=lowest)
    u = np.where(mask, 0, row_max[:, None] - x)

    # t = requantize(u, multiplier, shift), one call per distinct row scale.
    t = np.zeros(x.shape, dtype=np.int64)
    pairs = np.stack([multipliers, shifts], axis=1)
    for mult, shift in np.unique(pairs, axis=0):
        rows_here = np.all(pairs == (mult, shift), axis=1)
        t[rows_here] = requantize(u[rows_here], int(mult), int(shift),
                                  out_bits=T_FRAC + T_INT, out_signed=False)

    coarse, fine = (np.array(table, dtype=np.int64) for table in config.exp_tables())
    lo_bits = T_FRAC - T_HI_BITS
    f = coarse[(t >> lo_bits) & ((1 << T_HI_BITS) - 1)] * fine[t & ((1 << lo_bits) - 1)]
    drop = 2 * config.table_frac - config.exp_frac
    mant = (f + (1 << (drop - 1))) >> drop
    n = t >> T_FRAC
    e = (mant + ((1 << n) >> 1)) >> n
    e[(n >= config.exp_frac + 2) | mask] = 0

    total = e.sum(axis=1)
    k = config.recip_shift
    recip = np.where(total > 0, (1 << k) // np.maximum(total, 1), (1 << config.recip_width) - 1)
    product = e * recip[:, None]
    return requantize(product, 1, k - config.out_q.frac_bits, out_bits=config.out_width,
                      out_signed=config.out_width == 16)


def softmax_float(x, mask, scales):
    """Float64 softmax of the dequantized rows ``x * scale`` over the unmasked
    elements (0 where masked; all 0 for a fully masked row)."""
    x, mask = _rows(x, mask)
    scales = np.broadcast_to(np.asarray(scales, dtype=np.float64), (x.shape[0],))
    real = x.astype(np.float64) * scales[:, None]
    real = np.where(mask, -np.inf, real)
    top = real.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    ex = np.where(mask, 0.0, np.exp(real - top))
    total = ex.sum(axis=1, keepdims=True)
    return np.where(total > 0, ex / np.where(total > 0, total, 1.0), 0.0)


def softmax_errors(config, raw, x, mask, scales):
    """``(max_abs_err, mean_abs_err)`` of raw outputs against
    :func:`softmax_float`, in probability units, over unmasked elements
    (masked ones are checked too: they must be exactly 0)."""
    x, mask = _rows(x, mask)
    got = np.asarray(raw, dtype=np.float64).reshape(x.shape) * config.out_q.scale
    err = np.abs(got - softmax_float(x, mask, scales))
    return float(err.max(initial=0.0)), float(err[~mask].mean()) if (~mask).any() else 0.0
