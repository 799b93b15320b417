"""Cycle model of the N:M sparse array (:class:`~bertforge.rtl.sparse.SparseArray`).

Counted as every cycle model here: from the first input handshake to the
last output handshake, both included, operands always valid and the result
always ready. A tile streams one compressed weight beat per cycle, so it
is the dense output-stationary array's model over *compressed* beats:
``B = ceil(K / M) * N`` beats per tile instead of K.
"""

from bertforge.rtl.systolic import QUEUE_LATENCY
from bertforge.rtl.errors import ParameterError

__all__ = ["nm_tile_beats", "nm_tile_period", "sparse_cycles", "nm_gemm_tiles", "nm_gemm_cycles"]


def nm_tile_beats(k, n, m):
    """Compressed beats of a tile with reduction length ``k`` at N:M:
    ``ceil(k / m) * n`` (the last group is partial when M does not divide K)."""
    if k < 1 or not 1 <= n <= m:
        raise ParameterError(f"need k >= 1 and 1 <= n <= m, not k={k}, n={n}, m={m}")
    return -(-k // m) * n


def nm_tile_period(config, beats):
    """Cycles a tile of ``beats`` compressed beats occupies in a stream of
    tiles: ``max(beats, R)``."""
    return max(beats, config.rows)


def sparse_cycles(config, beats):
    """Cycles to run tiles of ``beats`` compressed beats each back to back:
    ``B_0 + sum(max(B_t, R) for t >= 1) + R + C + S + 1 + Q`` (``S`` is the
    PEs' ``multiply_stages``, ``Q`` :data:`~bertforge.rtl.systolic.QUEUE_LATENCY`),
    the dense OS formula over compressed beats."""
    beats = list(beats)
    if not beats or any(b < 1 for b in beats):
        raise ParameterError("beats must be a non-empty list of positive tile lengths")
    body = beats[0] + sum(nm_tile_period(config, b) for b in beats[1:])
    return body + config.rows + config.cols + config.multiply_stages + 1 + QUEUE_LATENCY


def nm_gemm_tiles(config, m_rows, n_cols):
    """Array tiles of an ``m_rows`` x K x ``n_cols`` GEMM: ``ceil(M/R) * ceil(N/C)``."""
    return -(-m_rows // config.rows) * -(-n_cols // config.cols)


def nm_gemm_cycles(config, m_rows, k, n_cols, n, m):
    """Cycles of an M x K x N GEMM at N:M run as array tiles back to back
    (every tile streams the whole K): :func:`sparse_cycles` of
    ``nm_gemm_tiles`` tiles of ``nm_tile_beats(k, n, m)`` beats."""
    tiles = nm_gemm_tiles(config, m_rows, n_cols)
    return sparse_cycles(config, [nm_tile_beats(k, n, m)] * tiles)
