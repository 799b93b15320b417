"""Bit-exact model of :class:`bertforge.rtl.layernorm.LayerNorm` and its
float reference.

Scale rules (real units): the input scale does not matter (LayerNorm is
scale invariant and the statistics are exact), so any input LSB works as
long as ``x + r`` fits the integers; gamma is ``gamma_raw * 2**-gamma_frac``,
beta is ``beta_raw * 2**-beta_frac`` and one output LSB is
``config.out_scale``. The float reference is
``(v - mean(v)) / sqrt(var(v)) * gamma + beta`` of the same integers
(population variance, no epsilon; ``var = 0`` gives ``beta``), rounded to
the nearest int8 and saturated.
"""

import dataclasses

import numpy as np

from bertforge.rtl.layernorm import LN_Z_FRAC, LN_Z_WIDTH
from bertforge.rtl.rsqrt import RSQRT_FRAC, rsqrt_reference
from .fixed_golden import ratio_to_mult_shift, requantize
from bertforge.rtl.errors import ParameterError

__all__ = ["layernorm_vector_stats", "layernorm_golden", "layernorm_second", "layernorm_float",
           "layernorm_reference_int8", "layernorm_config_for_scale"]


def layernorm_vector_stats(v):
    """``(H, S1, D, R, e)`` of one vector of integers ``v`` (Python ints)."""
    v = [int(value) for value in v]
    h = len(v)
    s1 = sum(v)
    s2 = sum(value * value for value in v)
    d = h * s2 - s1 * s1
    r, e = rsqrt_reference(d)
    return h, s1, d, r, e


def layernorm_golden(config, x, r=None, gamma=None, beta=None):
    """The unit's output (int8, or int16 with ``out_width = 16``) for one
    vector ``x`` (1-D, length H) and residual ``r`` (same length; required
    iff ``config.add_residual``), with per-channel ``gamma`` and ``beta`` (length >= H). Returns int64."""
    x = np.asarray(x, dtype=np.int64)
    if x.ndim != 1 or x.size < 1:
        raise ParameterError(f"x must be one non-empty vector, not shape {x.shape}")
    if config.add_residual != (r is not None):
        raise ParameterError("r is required exactly when config.add_residual is set")
    v = x + np.asarray(r, dtype=np.int64) if r is not None else x
    h, s1, _, rs, e = layernorm_vector_stats(v)
    num = v.astype(object) * h - s1
    z = requantize(num * rs, 1, RSQRT_FRAC + e - LN_Z_FRAC, LN_Z_WIDTH)
    g = np.asarray(gamma, dtype=np.int64)[:h].astype(object)
    b = np.asarray(beta, dtype=np.int64)[:h].astype(object)
    acc = z.astype(object) * g + b * (1 << config.beta_shift)
    return requantize(acc, config.out_mult, config.out_shift, config.out_width)


def layernorm_second(config, x, r, gamma2, beta2, mult2, shift2):
    """The int8 second output (``config.second_output``) for one vector:
    the same ``z`` with ``gamma2``, ``beta2`` and the run-time scale
    ``mult2``, ``shift2`` (``layernorm_golden`` at that scale and int8)."""
    second = dataclasses.replace(config, out_width=8, out_mult=mult2, out_shift=shift2)
    return layernorm_golden(second, x, r, gamma2, beta2)


def layernorm_float(config, x, r=None, gamma=None, beta=None):
    """Float64 LayerNorm of the same integers in real output units (before
    output rounding): ``(v - mean) / std * gamma_real + beta_real``."""
    v = np.asarray(x, dtype=np.float64)
    if r is not None:
        v = v + np.asarray(r, dtype=np.float64)
    h = v.size
    g = np.asarray(gamma, dtype=np.float64)[:h] * config.gamma_scale
    b = np.asarray(beta, dtype=np.float64)[:h] * config.beta_scale
    centered = v - v.mean()
    var = float(np.mean(centered * centered))
    if var == 0.0:
        return b.copy()
    return centered / np.sqrt(var) * g + b


def layernorm_reference_int8(config, x, r=None, gamma=None, beta=None):
    """The float reference rounded to the int8 output (nearest, saturated)."""
    y = layernorm_float(config, x, r, gamma, beta) / config.out_scale
    return np.clip(np.floor(y + 0.5), -128, 127).astype(np.int64)


def layernorm_config_for_scale(config, out_scale):
    """``config`` with ``out_mult/out_shift`` set for a real output LSB of
    ``out_scale``."""
    mult, shift = ratio_to_mult_shift(2.0 ** -(LN_Z_FRAC + config.gamma_frac) / out_scale)
    return dataclasses.replace(config, out_mult=mult, out_shift=shift)
