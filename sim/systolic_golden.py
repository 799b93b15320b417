"""Bit-exact numpy golden models.

Each model reads only a block's config dataclass and numpy arrays, never a
component, and reproduces the hardware's overflow rule exactly.
"""

import numpy as np
from bertforge.rtl.errors import ParameterError

__all__ = ["saturating_matmul", "systolic_golden"]


def saturating_matmul(a, b, acc_width):
    """``a @ b`` with every partial sum clamped to ``signed(acc_width)``.

    The reduction runs in index order (k = 0, 1, ...), clamping after each
    step, as the PEs do. When no partial sum can leave the range (checked with
    ``|a| @ |b|``), this is the plain integer product.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ParameterError(f"cannot multiply shapes {a.shape} and {b.shape}")
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


def systolic_golden(config, a, b):
    """One tile of a :class:`~bertforge.rtl.systolic.SystolicArray`.

    OS: ``a`` is R x K, ``b`` is K x C. WS: ``a`` is K x R (activation rows),
    ``b`` is the R x C weight block. Returns the int64 result (R x C in OS,
    K x C in WS).
    """
    return saturating_matmul(a, b, config.acc_width)
