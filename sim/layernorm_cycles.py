"""Cycle model of :class:`bertforge.rtl.layernorm.LayerNorm`.

Cycles count from the first ``x`` handshake to the last ``y`` handshake,
both included, with inputs always valid (vectors back to back) and the
output always ready; gamma and beta are loaded before.
"""

from bertforge.rtl.layernorm import LN_OUT_LATENCY, LN_STATS_LATENCY
from bertforge.rtl.errors import ParameterError

__all__ = ["layernorm_cycles"]


def layernorm_cycles(config, lengths):
    """Cycles to normalize vectors of lengths ``lengths`` back to back.

    With ``n_k = H_k / lanes`` beats, vector k's last beat is taken at
    ``a_k = n_0 + ... + n_k - 1``; its normalize pass reads its first beat
    at ``s_k = max(a_k + LN_STATS_LATENCY, f_{k-1} + 1)`` and its last at
    ``f_k = s_k + n_k - 1``; the last output leaves ``LN_OUT_LATENCY``
    cycles after ``f_{K-1}``. Total: ``f_{K-1} + LN_OUT_LATENCY + 1``, which
    is ``sum(n_k) + n_{K-1} + LN_STATS_LATENCY + LN_OUT_LATENCY - 1`` when
    no vector is shorter than the one before (one beat per cycle in and out,
    22 cycles between a vector's last input beat and its first output beat).
    """
    lengths = list(lengths)
    if not lengths:
        raise ParameterError("lengths must be a non-empty list of vector lengths")
    taken = -1
    finish = None
    for h in lengths:
        if h < config.lanes or h % config.lanes or h > config.h_max:
            raise ParameterError(f"vector length {h} is not a multiple of lanes={config.lanes} "
                             f"in [{config.lanes}, {config.h_max}]")
        beats = h // config.lanes
        taken += beats
        start = taken + LN_STATS_LATENCY
        if finish is not None:
            start = max(start, finish + 1)
        finish = start + beats - 1
    return finish + LN_OUT_LATENCY + 1
