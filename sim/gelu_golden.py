"""Bit-exact numpy model of :class:`bertforge.rtl.gelu.Gelu`, its float
reference, and the scales of its input and output."""

import math

import numpy as np

from bertforge.rtl.gelu import (GELU_SEGMENT_BITS, GELU_SEGMENTS, GELU_X, GELU_Y,
                                gelu_tables)
from .fixed_golden import ratio_to_mult_shift, requantize, split_scale_words

__all__ = ["gelu_config_for_scales", "gelu_internal", "gelu_golden", "gelu_float"]


def gelu_config_for_scales(config, in_scale, out_scale):
    """``config`` with ``in_mult/in_shift`` and ``out_mult/out_shift`` set
    for real input and output LSBs ``in_scale`` and ``out_scale``."""
    import dataclasses
    in_mult, in_shift = ratio_to_mult_shift(in_scale * 2.0 ** GELU_X.frac_bits)
    out_mult, out_shift = ratio_to_mult_shift(2.0 ** -GELU_Y.frac_bits / out_scale)
    return dataclasses.replace(config, in_mult=in_mult, in_shift=in_shift,
                               out_mult=out_mult, out_shift=out_shift)


def gelu_internal(config, raw):
    """``(x, y)``: the input in Q8.10 and GELU(x) in Q8.14, as the hardware
    computes them before the output scale (int64 arrays, shape of ``raw``)."""
    raw = np.asarray(raw, dtype=np.int64)
    x = requantize(raw, config.in_mult, config.in_shift, GELU_X.width)
    mag = np.abs(x)
    base, slope = (np.array(t, dtype=np.int64) for t in gelu_tables())
    index = (mag >> GELU_SEGMENT_BITS) & (GELU_SEGMENTS - 1)
    frac = mag & ((1 << GELU_SEGMENT_BITS) - 1)
    h = base[index] + ((slope[index] * frac + (1 << (GELU_SEGMENT_BITS - 1))) >> GELU_SEGMENT_BITS)
    h = np.where(mag >= GELU_SEGMENTS << GELU_SEGMENT_BITS, 0, h)
    y = (np.maximum(x, 0) << (GELU_Y.frac_bits - GELU_X.frac_bits)) - h
    return x, y


def gelu_golden(config, raw, words=None):
    """The unit's output for input integers ``raw`` (int64, shape of
    ``raw``). With ``config.channel_scales``, ``words`` (the 32-bit scale
    words, one per channel: per element of ``raw``'s last axis) set the
    output scale of each channel."""
    from bertforge.rtl.errors import ParameterError
    _, y = gelu_internal(config, raw)
    if config.channel_scales != (words is not None):
        raise ParameterError("words (one scale word per channel) are required exactly when "
                             "config.channel_scales is set")
    if words is None:
        return requantize(y, config.out_mult, config.out_shift, config.out_width)
    if np.shape(words) != y.shape[-1:]:
        raise ParameterError(f"{y.shape[-1]} channels need as many scale words, not shape "
                             f"{np.shape(words)}")
    return requantize(y, *split_scale_words(words), config.out_width)


def gelu_float(x):
    """Exact GELU ``x * Phi(x)`` in float64."""
    x = np.asarray(x, dtype=np.float64)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
