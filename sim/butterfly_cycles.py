"""Cycle model of :class:`~bertforge.rtl.butterfly.ButterflyEngine`.

Counted from the first ``x`` handshake of a command to its last ``y``
handshake, both included, with ``x`` always valid and ``y`` always ready.
"""

from bertforge.rtl.butterfly import stage_period
from .butterfly_golden import log2_length

__all__ = ["PIPELINE_CYCLES", "butterfly_groups", "butterfly_cycles", "butterfly_ideal_cycles"]

#: Fixed cycles around the stream: compute start after the last load beat,
#: result writes, drain read and output queue.
PIPELINE_CYCLES = 8


def butterfly_groups(config, batch):
    """Groups of ``lanes`` vectors a batch occupies: ``ceil(batch / lanes)``."""
    return -(-batch // config.lanes)


def butterfly_cycles(config, n, batch):
    """Cycles of one command of ``batch`` vectors of length ``n``:
    ``2n + G m T - (T - n/2) + PIPELINE_CYCLES`` with ``G`` groups, ``m =
    log2 n`` stages of ``T = max(n/2, n/4 + 4)`` cycles (the last stage of the
    last group needs only its ``n/2`` issues). The first ``n`` are loading the
    first group, the other ``n`` draining the last; compute of one group
    overlaps loading the next and draining the previous."""
    m = log2_length(config, n)
    groups = butterfly_groups(config, batch)
    period = stage_period(n)
    return 2 * n + groups * m * period - (period - n // 2) + PIPELINE_CYCLES


def butterfly_ideal_cycles(config, n, batch):
    """``batch * (n/2) * log2(n) / lanes``: every lane busy every cycle."""
    return batch * (n // 2) * log2_length(config, n) / config.lanes
