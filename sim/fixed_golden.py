"""Numpy twins of :mod:`bertforge.rtl.fixed`, and the conversion of real
scales to the (multiplier, shift) pairs the hardware requantizes with."""

import math

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.rtl.tile_scheduler import CHANNEL_MULT_BITS

__all__ = ["requantize", "to_q", "from_q", "ratio_to_mult_shift", "command_scale",
           "channel_scale_words", "scale_words", "split_scale_words"]

#: Largest shift of a GEMM command or per-channel scale word (6 bits).
MAX_SHIFT = 63


def _exact(values):
    """Integers as an object array of Python ints (no int64 overflow)."""
    array = np.asarray(values)
    return array if array.dtype == object else array.astype(np.int64).astype(object)


def requantize(x, multiplier, shift, out_bits=8, out_signed=True):
    """``clamp((x * multiplier + 2**(shift-1)) >> shift)``: round to nearest,
    ties toward +infinity, saturate to ``out_bits``. Exact (Python ints).

    ``multiplier`` and ``shift`` are scalars or arrays that broadcast
    against ``x`` (one per column of a matrix: length ``x.shape[-1]``)."""
    x, multiplier, shift = _exact(x), _exact(multiplier), _exact(shift)
    rounding = (1 << shift) >> 1
    shifted = (x * multiplier + rounding) >> shift
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


def ratio_to_mult_shift(ratio, mult_bits=16, max_shift=62):
    """``(mult, shift)`` with ``mult / 2**shift`` closest to ``ratio`` for
    ``mult < 2**mult_bits`` and ``shift <= max_shift`` (trailing zero bits
    of ``mult`` dropped, so powers of two stay small; a ratio that needs a
    larger shift keeps fewer bits of ``mult``). :class:`ParameterError` if
    ``ratio`` is not a positive finite number, needs a negative shift or
    rounds to ``mult`` 0."""
    if (isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.integer, np.floating))
            or not math.isfinite(ratio) or ratio <= 0):
        raise ParameterError(f"scale ratio must be a positive finite number, not {ratio!r}")
    ratio = float(ratio)
    shift = min(mult_bits - 1 - math.floor(math.log2(ratio)), max_shift)
    mult = round(ratio * 2.0 ** shift)
    if mult >= 1 << mult_bits:
        mult, shift = (mult + 1) >> 1, shift - 1
    if shift < 0:
        raise ParameterError(f"scale ratio {ratio!r} is too large (needs a negative shift)")
    while mult % 2 == 0 and shift > 0:
        mult, shift = mult >> 1, shift - 1
    if mult < 1:
        raise ParameterError(f"scale ratio {ratio!r} is too small to represent "
                             f"(below 2**-{max_shift + 1})")
    return mult, shift


def command_scale(scale):
    """A GEMM command's ``(multiplier, shift)`` fields for a real ``scale``:
    32-bit multiplier, shift up to 63."""
    return ratio_to_mult_shift(scale, 32, MAX_SHIFT)


def channel_scale_words(scales):
    """Per-channel real ``scales`` (1-D) -> the GEMM engine's 32-bit scale
    words (``uint32``): multiplier in the low
    :data:`~bertforge.rtl.tile_scheduler.CHANNEL_MULT_BITS` bits, shift
    (up to 63) above. A bad scale is a :class:`ParameterError` naming its index."""
    scales = np.asarray(scales)
    if scales.ndim != 1 or scales.dtype.kind not in "iuf":
        raise ParameterError(f"per-channel scales must be a 1-D array of real numbers, "
                             f"not {scales.dtype} of shape {scales.shape}")
    pairs = []
    for index, scale in enumerate(scales.tolist()):
        try:
            pairs.append(ratio_to_mult_shift(scale, CHANNEL_MULT_BITS, MAX_SHIFT))
        except ParameterError as error:
            raise ParameterError(f"scale[{index}]: {error}") from None
    pairs = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return scale_words(pairs[:, 0], pairs[:, 1])


def scale_words(multipliers, shifts):
    """Per-channel ``multipliers`` (``0 .. 2**CHANNEL_MULT_BITS - 1``) and
    ``shifts`` (``0 .. 63``), 1-D of one length -> scale words (``uint32``)."""
    multipliers = np.asarray(multipliers)
    shifts = np.asarray(shifts)
    if (multipliers.ndim != 1 or multipliers.shape != shifts.shape
            or multipliers.dtype.kind not in "iu" or shifts.dtype.kind not in "iu"):
        raise ParameterError(f"multipliers and shifts must be 1-D integer arrays of one length, "
                             f"not shapes {multipliers.shape} and {shifts.shape}")
    if multipliers.size and (multipliers.min() < 0 or multipliers.max() >> CHANNEL_MULT_BITS):
        raise ParameterError(f"per-channel multipliers must be in 0..2**{CHANNEL_MULT_BITS}-1")
    if shifts.size and (shifts.min() < 0 or shifts.max() > MAX_SHIFT):
        raise ParameterError(f"per-channel shifts must be in 0..{MAX_SHIFT}")
    words = multipliers.astype(np.uint64) | shifts.astype(np.uint64) << CHANNEL_MULT_BITS
    return words.astype(np.uint32)


def split_scale_words(words):
    """Scale words -> ``(multipliers, shifts)`` (int64 arrays)."""
    words = np.asarray(words, dtype=np.int64)
    return words & ((1 << CHANNEL_MULT_BITS) - 1), words >> CHANNEL_MULT_BITS
