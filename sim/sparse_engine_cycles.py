"""Cycle model of the sparse GEMM engine
(:class:`~bertforge.rtl.sparse_engine.SparseEngine`).

The dense engine's model (:mod:`bertforge.sim.gemm_cycles`) with two
changes: a tile of a chunk streams ``ceil(k_len / M) * N`` compressed beats
(occupying ``max(beats, rows)`` array cycles), and a chunk loads
``2 * ceil(k_len / M) * N`` weight rows (values and indices) instead of
``k_len``. Commands pass a 2-cycle pattern check before the scheduler
(:data:`START` is the dense engine's plus 2). Compute bound:

    cycles = START + max(lat, 2) + beats(first chunk) + sparse_cycles(all tiles)
             + END + rows(last block) * beats per output row
"""

import math

from .gemm_cycles import EXACT_MAX_LATENCY, START as DENSE_START, _write_beats, chunks, write_timeline
from .gemm_cycles import _load_beats as _dense_load_beats
from .sparse_cycles import sparse_cycles, nm_tile_beats, nm_tile_period
from .sparse_engine_golden import SPARSE_FIELDS, sparse_command_error

__all__ = ["sparse_engine_cycles", "sparse_ideal_cycles", "START"]

#: Cycles from the first command handshake to the first read request, plus
#: from the last read beat of a chunk to its first operand handshake.
START = DENSE_START + 2


def sparse_ideal_cycles(config, cmd):
    """Compressed MACs over the array's PEs: ``M * ceil(K/pat_m) * pat_n * N / (rows * cols)``."""
    return cmd["m"] * nm_tile_beats(cmd["k"], cmd["pat_n"], cmd["pat_m"]) * cmd["n"] / (
        config.rows * config.cols)


def _fields(cmd):
    return {key: int(cmd.get(key, 0)) for key in SPARSE_FIELDS}


def _load_beats(config, chunk, kc):
    return _dense_load_beats(config, chunk, 2 * kc)


def sparse_engine_cycles(config, commands, *, lat=1, bw=0):
    """Predicted cycles for sparse ``commands`` run back to back (read latency
    ``lat``, read bandwidth ``bw`` bytes per cycle, 0: a beat per cycle).

    Returns a dict: ``cycles``, ``exact`` (the compute-bound formula
    applies; the RTL must match it) and ``bound`` ("compute" or "memory").
    """
    sparse = config.sparse
    beat_time = 1.0 if bw <= 0 or bw >= config.mem_bytes else config.mem_bytes / bw
    valid = [_fields(c) for c in commands if not sparse_command_error(config, _fields(c))]
    work = []    # (chunk, compressed beats per tile)
    for c in valid:
        for ch in chunks(config, c):
            work.append((ch, nm_tile_beats(ch["k_len"], c["pat_n"], c["pat_m"])))
    if not work:
        return {"cycles": 8 * len(commands), "exact": False, "bound": "compute"}
    tiles = [kc for ch, kc in work for _ in range(ch["tiles"])]

    def busy(ch, kc):
        return ch["tiles"] * nm_tile_period(sparse, kc)

    load_end, feed = [], []
    stalled = False
    lat = max(lat, 2)
    mem_free = START + lat
    for index, (chunk, kc) in enumerate(work):
        begin = mem_free
        if index >= 2:
            begin = max(begin, feed[index - 2][1] + lat + 3)
        end = begin + math.ceil(_load_beats(config, chunk, kc) * beat_time)
        mem_free = end
        load_end.append(end)
        start = end if index == 0 else max(end, feed[index - 1][1])
        if index and end > feed[index - 1][1]:
            stalled = True
        feed.append((start, start + busy(chunk, kc)))
    stall_cycles = feed[-1][0] - feed[0][0] - sum(busy(ch, kc) for ch, kc in work[:-1])
    last_chunk = work[-1][0]
    last_write = (load_end[0] + stall_cycles + sparse_cycles(sparse, tiles)
                  - _write_beats(config, last_chunk))
    exact = beat_time == 1.0 and lat <= EXACT_MAX_LATENCY and len(valid) == len(commands)
    return write_timeline(config, [ch for ch, _ in work], feed, last_write, stalled, exact)
