"""Cycle models: predicted RTL cycle counts, as formulas.

Every model reads only a block's config dataclass. Cycles are counted from
the first input handshake to the last output handshake, both included, with
operands always valid and the result always ready.
"""

from bertforge.rtl.systolic import QUEUE_LATENCY
from bertforge.rtl.errors import ParameterError

__all__ = ["systolic_tile_period", "systolic_cycles"]


def systolic_tile_period(config, k):
    """Cycles one tile (OS) or weight block (WS) of ``k`` beats occupies in a
    stream of tiles: ``max(k, R)``, and at least 2 for a 1-row WS array."""
    floor = max(config.rows, 2) if config.dataflow == "ws" else config.rows
    return max(k, floor)


def systolic_cycles(config, ks):
    """Cycles to run tiles of streaming lengths ``ks`` back to back.

    OS: ``K_0 + sum(max(K_t, R) for t >= 1) + R + C + S + 1 + Q``.
    WS: ``R + sum(max(K_t, R) for t < T-1) + K_{T-1} + R + C + S + Q``
    (the first R cycles load the first weight block).
    ``S`` is the PE's ``multiply_stages``, ``Q`` the output queue latency
    (:data:`~bertforge.rtl.systolic.QUEUE_LATENCY`).
    """
    ks = list(ks)
    if not ks or any(k < 1 for k in ks):
        raise ParameterError("ks must be a non-empty list of positive tile lengths")
    rows, cols = config.rows, config.cols
    if config.dataflow == "os":
        body = ks[0] + sum(systolic_tile_period(config, k) for k in ks[1:])
        return body + rows + cols + config.multiply_stages + 1 + QUEUE_LATENCY
    body = rows + sum(systolic_tile_period(config, k) for k in ks[:-1]) + ks[-1]
    return body + rows + cols + config.multiply_stages + QUEUE_LATENCY
