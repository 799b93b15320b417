"""Cycle model of the GEMM engine (:class:`~bertforge.rtl.gemm.GemmEngine`).

Cycles count from the first command handshake to the last completion
handshake, both included, as the harness measures them.

The model walks the chunks of every command (the scheduler's order) and
tracks two resources: the memory, which returns one beat per cycle (or
``bw / mem_bytes`` beats per cycle with a bandwidth limit) after a latency
``lat``, and the array, busy ``max(k_len, rows)`` cycles per OS tile or
``max(m_len, rows)`` per WS weight block
(:func:`~bertforge.sim.systolic_cycles.systolic_tile_period`). A chunk is
fed once it is loaded; a chunk loads once the chunk two before it has been
fed (double buffering).

*Compute bound* (every chunk loaded before the array needs it, every block
written out before its accumulator slot is needed again, fixed latency of at
most :data:`EXACT_MAX_LATENCY`, no stalls) the count is exact:

    cycles = START + max(lat, 2) + beats(first chunk) + systolic_cycles(all tiles)
             + END + rows(last block) * beats per output row

Otherwise (memory bound) the same walk estimates it.
"""

import math

from bertforge.sim.systolic_cycles import systolic_cycles, systolic_tile_period

__all__ = ["gemm_cycles", "ideal_cycles", "chunks", "START", "END", "EXACT_MAX_LATENCY"]

#: Cycles from the first command handshake to the first read request, plus
#: from the last read beat of a chunk to its first operand handshake.
START = 14
#: Cycles from the array's last result row to the block's first write beat,
#: plus from the last write beat to the completion.
END = 5
#: Longest fixed read latency the exact model covers (the harness keeps 32
#: requests in flight).
EXACT_MAX_LATENCY = 16


def ideal_cycles(config, cmd):
    """``M * K * N / (rows * cols)``, not rounded."""
    return cmd["m"] * cmd["k"] * cmd["n"] / (config.rows * config.cols)


def chunks(config, cmd):
    """The scheduler's chunks of one command: dicts with ``m_len, n_len,
    k_len, tiles, kblocks, first, last``."""
    out = []
    for m0 in range(0, cmd["m"], config.block_rows):
        for n0 in range(0, cmd["n"], config.panel):
            for k0 in range(0, cmd["k"], config.k_chunk):
                m_len = min(config.block_rows, cmd["m"] - m0)
                n_len = min(config.panel, cmd["n"] - n0)
                k_len = min(config.k_chunk, cmd["k"] - k0)
                if config.dataflow == "ws":
                    full, rest = divmod(k_len, config.lanes)
                    kblocks = full * config.blocks_per_seg + -(-rest // config.rows)
                else:
                    kblocks = 1
                out.append({"m_len": m_len, "n_len": n_len, "k_len": k_len,
                            "tiles": -(-n_len // config.cols), "kblocks": kblocks,
                            "first": k0 == 0, "last": k0 + config.k_chunk >= cmd["k"],
                            "accumulate": bool(cmd.get("accumulate")),
                            "int8": bool(cmd.get("int8"))})
    return out


def _load_beats(config, chunk, b_rows=None):
    """Read beats of a chunk: A rows, ``b_rows`` B rows (default ``k_len``;
    the sparse engine loads values and indices) and old C when accumulating."""
    b_rows = chunk["k_len"] if b_rows is None else b_rows
    beats = chunk["m_len"] * -(-chunk["k_len"] // config.lanes) + b_rows
    if chunk["first"] and chunk["accumulate"]:
        beats += chunk["m_len"] * -(-chunk["n_len"] * 4 // config.mem_bytes)
    return beats


def _write_beats(config, chunk):
    per_row = 1 if chunk["int8"] else -(-chunk["n_len"] * 4 // config.mem_bytes)
    return chunk["m_len"] * per_row


def _streams(config, chunk):
    """Streaming lengths of the chunk's tiles (OS) or weight blocks (WS)."""
    k = chunk["k_len"] if config.dataflow == "os" else chunk["m_len"]
    return [k] * (chunk["tiles"] * chunk["kblocks"])


def gemm_cycles(config, commands, *, lat=1, bw=0):
    """Predicted cycles for ``commands`` (dicts with ``m, k, n`` and the
    flags) run back to back, read latency ``lat`` and read bandwidth ``bw``
    bytes per cycle (0: one beat per cycle).

    Returns a dict: ``cycles`` (int), ``exact`` (the compute-bound formula
    applies, and the RTL must match it) and ``bound`` ("compute" or "memory").
    """
    from .gemm_golden import command_error
    sysconfig = config.systolic
    beat_time = 1.0 if bw <= 0 or bw >= config.mem_bytes else config.mem_bytes / bw
    valid = [c for c in commands if not command_error(
        config, c["m"], c["k"], c["n"], c.get("a_addr", 0), c.get("b_addr", 0), c.get("c_addr", 0),
        c.get("a_stride", 0), c.get("b_stride", 0), c.get("c_stride", 0),
        bool(c.get("accumulate")), bool(c.get("int8")))]
    all_chunks = [ch for c in valid for ch in chunks(config, c)]
    if not all_chunks:
        return {"cycles": 8 * len(commands), "exact": False, "bound": "compute"}
    ks = [k for ch in all_chunks for k in _streams(config, ch)]

    # Walk over chunks, times in one frame: load_end[c] is when chunk c could
    # start on the array, feed[c] its (start, end) there.
    load_end = []
    feed = []
    stalled = False
    lat = max(lat, 2)   # a request reaches the head of the memory's queue in 2 cycles
    mem_free = START + lat
    for index, chunk in enumerate(all_chunks):
        begin = mem_free
        if index >= 2:   # its buffer slot frees once chunk index-2 is fed
            begin = max(begin, feed[index - 2][1] + lat + 3)
        end = begin + math.ceil(_load_beats(config, chunk) * beat_time)
        mem_free = end
        load_end.append(end)
        busy = sum(systolic_tile_period(sysconfig, k) for k in _streams(config, chunk))
        start = end if index == 0 else max(end, feed[index - 1][1])
        if index and end > feed[index - 1][1]:
            stalled = True
        feed.append((start, start + busy))
    stall_cycles = feed[-1][0] - feed[0][0] - sum(
        sum(systolic_tile_period(sysconfig, k) for k in _streams(config, ch)) for ch in all_chunks[:-1])
    last_write = (load_end[0] + stall_cycles + systolic_cycles(sysconfig, ks)
                  - _write_beats(config, all_chunks[-1]) + 0)
    exact = beat_time == 1.0 and lat <= EXACT_MAX_LATENCY and len(valid) == len(commands)
    return write_timeline(config, all_chunks, feed, last_write, stalled, exact)


def write_timeline(config, chunks, feed, last_write, stalled, exact):
    """The writer's end of an engine's timeline (shared with the sparse
    engine's model): a block's rows leave one beat per cycle once it is
    complete; blocks queue behind each other. ``feed`` holds each chunk's
    (start, end) of feeding, ``last_write`` the cycle the last block's write
    ends when nothing queues. Returns the cycle model's dict; ``exact``
    only if the inputs allow it and no block waited for the writer."""
    block_ends = [i for i, ch in enumerate(chunks) if ch["last"]]
    write_free = None
    for number, index in enumerate(block_ends):
        ready_at = feed[index][1] - feed[-1][1] + last_write + _write_beats(config, chunks[-1])
        begin = ready_at if write_free is None else max(ready_at, write_free)
        if begin > ready_at:
            stalled = True
        write_free = begin + _write_beats(config, chunks[index])
        if number + 1 < len(block_ends):
            following = block_ends[number + 1]
            if write_free + 8 > feed[following][1] - feed[-1][1] + last_write:
                stalled = True
    cycles = write_free + END
    return {"cycles": int(cycles), "exact": exact and not stalled,
            "bound": "memory" if stalled else "compute"}
