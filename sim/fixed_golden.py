"""Numpy twins of :mod:`bertforge.rtl.fixed`."""

import numpy as np

__all__ = ["requantize", "to_q", "from_q"]


def requantize(x, multiplier, shift, out_bits=8, out_signed=True):
    """``clamp((x * multiplier + 2**(shift-1)) >> shift)``: round to nearest,
    ties toward +infinity, saturate to ``out_bits``. Exact (Python ints)."""
    x = np.asarray(x, dtype=object)
    rounding = (1 << shift) >> 1
    shifted = (x * int(multiplier) + rounding) >> shift
    lo = -(1 << (out_bits - 1)) if out_signed else 0
    hi = (1 << (out_bits - 1)) - 1 if out_signed else (1 << out_bits) - 1
    return np.clip(shifted, lo, hi).astype(np.int64)


def to_q(real, q):
    """Reals -> raw integers of format ``q`` (round to nearest, saturate)."""
    raw = np.floor(np.asarray(real, dtype=np.float64) * (1 << q.frac_bits) + 0.5)
    return np.clip(raw, q.min_raw, q.max_raw).astype(np.int64)


def from_q(raw, q):
    """Raw integers of format ``q`` -> reals."""
    return np.asarray(raw, dtype=np.float64) * q.scale
