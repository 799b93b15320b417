"""Cycle model of the sparse GEMM engine
(:class:`~bertforge.rtl.sparse_engine.SparseEngine`).

The dense engine's model (:mod:`bertforge.sim.gemm_cycles`) with two
changes: a tile of a chunk streams ``ceil(k_len / M) * N`` compressed beats
(occupying ``max(beats, rows)`` array cycles), and a chunk loads
``2 * ceil(k_len / M) * N`` weight rows (values and indices) instead of
``k_len`` (plus, as there, old C, bias and scale words in a block's first
chunk). Commands pass a 6-cycle pattern check before the scheduler, and chunk
descriptors a register after it (:data:`START` is the dense engine's plus 7). Compute bound:

    cycles = START + max(lat, 2) + beats(first chunk) + sparse_cycles(all tiles)
             + END + rows(last block) * ceil(n_len(last block) / Q)
"""

from .gemm_cycles import START as DENSE_START, chunks, load_beats, load_requests, timeline
from .gemm_golden import command_fields
from .sparse_cycles import sparse_cycles, nm_tile_beats, nm_tile_period
from .sparse_engine_golden import SPARSE_FIELDS, sparse_command_error

__all__ = ["sparse_engine_cycles", "sparse_ideal_cycles", "START"]

#: Cycles from the first command handshake to the first read request, plus
#: from the last read beat of a chunk to its first operand handshake.
START = DENSE_START + 7


def sparse_ideal_cycles(config, cmd):
    """Compressed MACs over the array's PEs: ``M * ceil(K/pat_m) * pat_n * N / (rows * cols)``."""
    return cmd["m"] * nm_tile_beats(cmd["k"], cmd["pat_n"], cmd["pat_m"]) * cmd["n"] / (
        config.rows * config.cols)


def sparse_engine_cycles(config, commands, *, lat=1, bw=0):
    """Predicted cycles for sparse ``commands`` run back to back (read latency
    ``lat``, read bandwidth ``bw`` bytes per cycle, 0: a beat per cycle).

    Returns a dict: ``cycles``, ``exact`` (the compute-bound formula
    applies; the RTL must match it) and ``bound`` ("compute" or "memory").
    """
    sparse = config.sparse
    fields = [command_fields(c, SPARSE_FIELDS) for c in commands]
    valid = [c for c in fields if not sparse_command_error(config, c)]
    work = []    # (chunk, compressed beats per tile)
    for c in valid:
        for ch in chunks(config, c):
            work.append((ch, nm_tile_beats(ch["k_len"], c["pat_n"], c["pat_m"])))
    if not work:
        return {"cycles": 8 * len(commands), "exact": False, "bound": "compute"}
    tiles = [kc for ch, kc in work for _ in range(ch["tiles"])]
    busy = [ch["tiles"] * nm_tile_period(sparse, kc) for ch, kc in work]
    return timeline(config, [ch for ch, _ in work], busy,
                    [load_beats(config, ch, 2 * kc) for ch, kc in work],
                    sparse_cycles(sparse, tiles) - sum(busy), start=START + config.dim_width,
                    lat=lat, bw=bw, exact=len(valid) == len(commands),
                    requests=[load_requests(config, ch, 2 * kc) for ch, kc in work])
