"""Bit-exact numpy golden models.

Each model reads only a block's config dataclass and numpy arrays, never a
component, and reproduces the hardware's overflow rule exactly.
"""

import ml_dtypes
import numpy as np
from bertforge.rtl.arith import FP32_NAN
from bertforge.rtl.errors import ParameterError

__all__ = ["saturating_matmul", "bf16_matmul", "bf16_mac", "round_fp32_ftz", "systolic_golden",
           "operand_words", "operands_from_words", "result_words", "result_from_words"]

#: Smallest normal binary32 magnitude; smaller sums flush to zero.
FP32_MIN_NORMAL = 2.0 ** -126


def saturating_matmul(a, b, acc_width):
    """``a @ b`` with every partial sum clamped to ``signed(acc_width)``.

    The reduction runs in index order (k = 0, 1, ...), clamping after each
    step, as the PEs do. When no partial sum can leave the range (checked with
    ``|a| @ |b|``), this is the plain integer product.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    _check_shapes(a, b)
    hi = (1 << (acc_width - 1)) - 1
    lo = -(1 << (acc_width - 1))
    # Exact in float64: integer terms and sums stay far below 2**53 here.
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    if float(np.max(bound, initial=0.0)) <= hi:
        return a @ b
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    for k in range(a.shape[1]):
        acc = np.clip(acc + np.outer(a[:, k], b[k, :]), lo, hi)
    return acc


def _check_shapes(a, b):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ParameterError(f"cannot multiply shapes {a.shape} and {b.shape}")


def round_fp32_ftz(s):
    """float64 ``s`` rounded as :class:`~bertforge.rtl.arith.Bf16Arith`
    rounds a sum: to a 24-bit significand, nearest even (exponent
    unbounded), then a magnitude ``>= 2**128`` to infinity and one below
    ``2**-126`` to a zero of its sign. Returns float32."""
    s = np.asarray(s, dtype=np.float64)
    mantissa, exponent = np.frexp(s)
    with np.errstate(invalid="ignore"):
        r = np.ldexp(np.round(mantissa * 2.0 ** 24), exponent - 24)   # np.round: ties to even
        r = np.where(np.abs(r) >= 2.0 ** 128, np.copysign(np.inf, r), r)
        r = np.where(np.abs(r) < FP32_MIN_NORMAL, np.copysign(0.0, r), r)
    return r.astype(np.float32)


def bf16_matmul(a, b):
    """``a @ b`` of bfloat16 matrices as the bf16 PEs compute it.

    Subnormal operands count as zeros of their sign; each product is exact
    (float64 holds an 8 x 8-bit significand product at any exponent), and the
    sum runs in index order (k = 0, 1, ...) from +0, rounded after every add
    by :func:`round_fp32_ftz` (one rounding: the float64 add of two numbers
    of at most 24 significant bits, then rounding to 24 bits, equals rounding
    the exact sum, since 53 >= 2 * 24 + 1). NaN results are the one NaN
    :data:`~bertforge.rtl.arith.FP32_NAN`. Returns float32.
    """
    a, b = _flushed(a), _flushed(b)
    _check_shapes(a, b)
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for k in range(a.shape[1]):
        acc = bf16_mac(acc, a[:, k, None], b[None, k, :])
    return acc


def _flushed(x):
    """bfloat16 values as float64, subnormals as zeros of their sign."""
    with np.errstate(invalid="ignore"):
        x = np.asarray(x, dtype=ml_dtypes.bfloat16).astype(np.float64)
    return np.where(np.abs(x) < FP32_MIN_NORMAL, np.copysign(0.0, x), x)


def bf16_mac(acc, a, b):
    """One step of a bf16 PE, elementwise (broadcasting): float32 ``acc``
    (a subnormal counts as a zero of its sign, though sums never are one)
    plus the exact product of ``a`` and ``b`` (bfloat16, or float64 from
    :func:`_flushed`), rounded by :func:`round_fp32_ftz`; NaNs become
    :data:`~bertforge.rtl.arith.FP32_NAN`."""
    if np.asarray(a).dtype != np.float64:
        a, b = _flushed(a), _flushed(b)
    with np.errstate(invalid="ignore", over="ignore"):
        acc = np.asarray(acc, dtype=np.float32).astype(np.float64)
        acc = np.where(np.abs(acc) < FP32_MIN_NORMAL, np.copysign(0.0, acc), acc)
        total = round_fp32_ftz(acc + a * b)
    bits = total.view(np.uint32)
    bits[np.isnan(total)] = FP32_NAN
    return total


def systolic_golden(config, a, b):
    """One tile of a :class:`~bertforge.rtl.systolic.SystolicArray`.

    OS: ``a`` is R x K, ``b`` is K x C. WS: ``a`` is K x R (activation rows),
    ``b`` is the R x C weight block. Returns the int64 result (R x C in OS,
    K x C in WS); with ``arith="bf16"`` (``a`` and ``b`` bfloat16, or values
    that convert) the float32 result of :func:`bf16_matmul`.
    """
    if config.arith == "bf16":
        return bf16_matmul(a, b)
    return saturating_matmul(a, b, config.acc_width)


def _words(config, values, dtype, bits):
    if config.arith == "bf16":
        return np.asarray(values, dtype=dtype).view(bits).astype(np.int64)
    return np.asarray(values, dtype=np.int64)


def _values(config, words, dtype, bits):
    if config.arith == "bf16":
        return np.asarray(words, dtype=np.int64).astype(bits).view(dtype)
    return np.asarray(words, dtype=np.int64)


def operand_words(config, m):
    """A tile operand as the integers its stream carries (bf16: bit patterns)."""
    return _words(config, m, ml_dtypes.bfloat16, np.uint16)


def operands_from_words(config, m):
    """The inverse of :func:`operand_words` (bf16: ``ml_dtypes.bfloat16``)."""
    return _values(config, m, ml_dtypes.bfloat16, np.uint16)


def result_words(config, c):
    """A result as the integers ``c`` carries (bf16: binary32 bit patterns)."""
    return _words(config, c, np.float32, np.uint32)


def result_from_words(config, c):
    """The inverse of :func:`result_words` (bf16: float32)."""
    return _values(config, c, np.float32, np.uint32)
