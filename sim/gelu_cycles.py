"""Cycle model of :class:`bertforge.rtl.gelu.Gelu`.

Cycles count from the first input handshake to the last output handshake,
both included, with the input always valid and the output always ready.
"""

from bertforge.rtl.gelu import GELU_LATENCY
from bertforge.rtl.errors import ParameterError

__all__ = ["gelu_cycles"]


def gelu_cycles(config, beats):
    """``beats + GELU_LATENCY``: one beat per cycle, 6 cycles of latency."""
    if beats < 1:
        raise ParameterError("beats must be a positive integer")
    return beats + GELU_LATENCY
