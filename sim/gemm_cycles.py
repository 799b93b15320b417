"""Cycle model of the GEMM engine (:class:`~bertforge.rtl.gemm.GemmEngine`;
:func:`gemm_cycles` hands a serial config to :func:`serial_cycles`, the
model of the :class:`~bertforge.rtl.serial_engine.SerialGemmEngine`).

Cycles count from the first command handshake to the last completion
handshake, both included, as the harness measures them.

The model walks the chunks of every command (the scheduler's order) and
tracks three resources (:func:`timeline`): the memory, which returns one
beat per cycle (or ``bw / mem_bytes`` beats per cycle with a bandwidth
limit) after a latency ``lat`` (a block's first chunk also reads its old C,
bias and scale words: :func:`load_beats`); the array, busy ``max(k_len,
rows)`` cycles per OS tile or ``max(m_len, rows)`` per WS weight block
(:func:`~bertforge.sim.systolic_cycles.systolic_tile_period`); and the
writer. A chunk is fed once it is loaded; a chunk loads once the chunk two
before it has been fed (double buffering, :data:`SLOT_FREE`), once the
loader has issued the previous chunk's requests, a row a cycle, and gone
idle a cycle (:data:`ISSUE_GAP`), and, if it reads old C, bias or
scales, once the writer has written the block two before it (the block
buffers hold two blocks; :data:`RELEASE`).

*Compute bound* (every chunk loaded before the array needs it, every block
written out before its accumulator slot is needed again, fixed latency of at
most :data:`EXACT_MAX_LATENCY`, no stalls) the count is exact:

    cycles = start_cycles + max(lat, 2) + beats(first chunk) + systolic_cycles(all tiles)
             + END + rows(last block) * ceil(n_len(last block) / Q)

where the writer takes ``ceil(n_len / Q)`` cycles per output row, int32,
int16 or int8, ``Q = mem_bytes // 4`` (:func:`write_cycles`); a command that
stores C transposed (``transpose_c``) writes an element a cycle instead.

Otherwise (memory bound) the same walk estimates it. With the harness's
memory (fixed latency, a beat a cycle) it is exact for small commands back
to back whose rows are one beat each, such as the attention GEMMs of a 16 x
16 engine (issues 35/36: the loader's idle cycle between chunks and the
operand slot's release came 2 cycles later than modelled: 11 cycles per
12 heads, of the score GEMMs and of the context GEMMs alike, at
all-MiniLM's 16 tokens); ``exact`` stays False there, as no general
bound is known.

A bf16 engine (``GemmConfig(arith="bf16")``) has the same cycles, with no
extra: its PEs keep the integer PE's pipeline (a one-cycle rounded add after
the ``multiply_stages`` product registers), its accumulator adds in the
integer one's stage and its writer keeps the requantizer's latency
(rounding to bf16 instead), and its loads (2-byte A and B, 4-byte old C
and bias) and writes (float32 as int32, bf16 output as int16) are the
integer engine's beats.

With 4-bit weights (``GemmConfig(weight_bits=4)``) B is packed two K rows
to a byte row (:func:`~bertforge.sim.gemm_golden.packed_b_view`): a chunk
reads ``ceil(k_len / 2)`` beats of B instead of ``k_len``
(:func:`b_rows`); the rest is unchanged. On an engine with group
multipliers (``GemmConfig(weight_group=...)``) a command with ``w4`` reads
``ceil(k_len / 2)`` beats of B and one beat of multiplier codes a chunk
(one group); its other commands run as dense ones.
"""

import math

from bertforge.sim.systolic_cycles import systolic_cycles, systolic_tile_period

__all__ = ["gemm_cycles", "serial_cycles", "scheduler_offsets", "SERIAL_SUM_WAIT", "ideal_cycles", "chunks",
           "load_beats", "load_requests", "b_rows", "write_cycles", "timeline", "START", "END",
           "DONE_QUEUE", "RELEASE", "ISSUE_GAP", "SLOT_FREE", "SLOT_FREE_CALLBACK",
           "EXACT_MAX_LATENCY", "start_cycles"]

#: Cycles from the first command handshake to the first read request, plus
#: from the last read beat of a chunk to its first operand handshake, not
#: counting the scheduler's range check (``dim_width`` cycles: :func:`start_cycles`).
START = 18
#: Cycles from the array's last result row to the block's first write beat,
#: plus from the last write beat to the completion.
END = 17
#: Of :data:`END`, the cycles a completion spends in the writer's
#: completion queue (2: a payload into an empty
#: :class:`~bertforge.rtl.stream.Queue`); an engine built with
#: ``done_always_ready`` (the encoder top's) has no such queue and completes
#: with its last write beat, these cycles sooner.
DONE_QUEUE = 2
#: Cycles from a block's last write beat leaving the writer, less the read
#: latency, until the first beat of a later block's old C, bias or scales
#: (which reuse its block buffer) can arrive.
RELEASE = 8
#: Longest fixed read latency the exact model covers (the harness keeps 32
#: requests in flight).
EXACT_MAX_LATENCY = 16


_FLAGS = ("accumulate", "int8", "bias", "per_channel")


def start_cycles(config):
    """:data:`START` (with a command queue of depth 2 or more) plus the
    scheduler's ``dim_width`` cycles of range check, less what a shallower
    command queue saves: 2 cycles with none (``command_queue`` 0), 1 with a
    queue of depth 1."""
    return START + config.dim_width - (2 - min(config.command_queue, 2))


def ideal_cycles(config, cmd):
    """``M * K * N / (rows * cols)``, not rounded."""
    return cmd["m"] * cmd["k"] * cmd["n"] / (config.rows * config.cols)


def chunks(config, cmd):
    """The scheduler's chunks of one command: dicts with ``m_len, n_len,
    k_len, tiles, kblocks, first, last``, the chunk's origin ``m0, n0, k0``
    and the command's flags ``accumulate, int8, bias, per_channel``,
    ``int16`` (int16 or bf16 output) and ``transpose_c`` (on an engine with
    ``config.transpose_c``)."""
    flags = {**{flag: bool(cmd.get(flag)) for flag in _FLAGS},
             "int16": bool(cmd.get("int16") or cmd.get("bf16_out")),
             "transpose_c": bool(cmd.get("transpose_c") and config.transpose_c),
             "w4": bool(cmd.get("w4") and getattr(config, "weight_group", 0))}
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
                            "m0": m0, "n0": n0, "k0": k0,
                            "tiles": -(-n_len // config.cols), "kblocks": kblocks,
                            "first": k0 == 0, "last": k0 + config.k_chunk >= cmd["k"],
                            **flags})
    return out


def load_beats(config, chunk, b_rows=None):
    """Read beats of a chunk: A rows, ``b_rows`` B rows (default ``k_len``;
    the sparse engine loads values and indices) and, in a block's first
    chunk, old C (accumulate: ``m_len`` rows), the bias and the per-channel
    scale words (one row of ``n_len`` 4-byte values each, when used)."""
    b_rows = chunk["k_len"] if b_rows is None else b_rows
    beats = chunk["m_len"] * -(-chunk["k_len"] // config.lanes) + b_rows
    if chunk["first"]:
        row = -(-chunk["n_len"] * 4 // config.mem_bytes)
        rows = chunk["m_len"] * chunk["accumulate"] + chunk["bias"] + chunk["per_channel"]
        beats += rows * row
    return beats


def load_requests(config, chunk, b_rows=None):
    """Read requests of a chunk, one per row of each loader job (a row of
    A, B, old C, bias or scales, whatever its beats): ``m_len + b_rows``
    plus the block rows of :func:`load_beats` in a block's first chunk."""
    b_rows = chunk["k_len"] if b_rows is None else b_rows
    rows = chunk["m_len"] + b_rows
    if chunk["first"]:
        rows += chunk["m_len"] * chunk["accumulate"] + chunk["bias"] + chunk["per_channel"]
    return rows


def b_rows(config, chunk):
    """B's read beats of a dense chunk: ``k_len``, or ``ceil(k_len / 2)``
    with packed 4-bit weights (two K rows a beat), plus the beat of
    multiplier codes of a ``w4`` chunk."""
    if chunk.get("w4"):
        return -(-chunk["k_len"] // 2) + 1
    return -(-chunk["k_len"] // 2) if config.weight_bits == 4 else chunk["k_len"]


def write_cycles(config, chunk):
    """Cycles the writer takes for a block: ``ceil(n_len / Q)`` per output
    row, ``Q = mem_bytes // 4`` (int32 values per beat; int8 and int16 rows
    take as long, the requantizer has Q lanes).

    Transposed (``transpose_c``): a write per element, ``m_len * n_len``,
    after the pieces of the block's first beat (an int8 row's pieces, two
    of an int16 row's, one int32 piece) less one, which the others overlap:
    the writer reads a piece a cycle, faster than the elements leave."""
    pieces = -(-chunk["n_len"] // (config.mem_bytes // 4))
    if not chunk.get("transpose_c"):
        return chunk["m_len"] * pieces
    first = pieces if chunk["int8"] else min(pieces, 2) if chunk.get("int16") else 1
    return chunk["m_len"] * chunk["n_len"] + first - 1


def _streams(config, chunk):
    """Streaming lengths of the chunk's tiles (OS) or weight blocks (WS)."""
    k = chunk["k_len"] if config.dataflow == "os" else chunk["m_len"]
    return [k] * (chunk["tiles"] * chunk["kblocks"])


def gemm_cycles(config, commands, *, lat=1, bw=0, memory=None, writes=None,
                done_always_ready=False):
    """Predicted cycles for ``commands`` (dicts with ``m, k, n`` and the
    flags) run back to back, read latency ``lat`` and read bandwidth ``bw``
    bytes per cycle (0: one beat per cycle); ``memory``, ``writes``: another
    memory (see :func:`timeline`; the staged engine only);
    ``done_always_ready``: the staged engine built so (no completion queue:
    :data:`DONE_QUEUE` cycles fewer).

    Returns a dict: ``cycles`` (int), ``exact`` (the compute-bound formula
    applies, and the RTL must match it) and ``bound`` ("compute" or "memory").
    """
    from .gemm_golden import command_rejected
    if config.serial:
        return serial_cycles(config, commands, lat=lat, bw=bw)
    sysconfig = config.systolic
    valid = [c for c in commands if not command_rejected(config, c)]
    all_chunks = [ch for c in valid for ch in chunks(config, c)]
    emitted = scheduler_offsets(config, [len(chunks(config, c)) for c in valid])
    if not all_chunks:
        return {"cycles": 8 * len(commands), "exact": False, "bound": "compute"}
    busy = [sum(systolic_tile_period(sysconfig, k) for k in _streams(config, ch))
            for ch in all_chunks]
    ks = [k for ch in all_chunks for k in _streams(config, ch)]
    result = timeline(config, all_chunks, busy,
                      [load_beats(config, ch, b_rows(config, ch)) for ch in all_chunks],
                      systolic_cycles(sysconfig, ks) - sum(busy), start=start_cycles(config),
                      lat=lat, bw=bw, exact=len(valid) == len(commands), emitted=emitted,
                      memory=memory, writes=writes,
                      requests=[load_requests(config, ch, b_rows(config, ch)) for ch in all_chunks])
    if done_always_ready:
        result["cycles"] -= DONE_QUEUE
    return result


def _block_jobs(chunk):
    """The chunk reads into the block buffers (old C, bias, scales)."""
    return chunk["first"] and (chunk["accumulate"] or chunk["bias"] or chunk["per_channel"])


def scheduler_offsets(config, counts):
    """Cycles the tile scheduler needs between each chunk of commands of
    ``counts`` chunks each and the one before (0 for the first): a
    descriptor every :data:`SCHEDULER_CHUNK` cycles within a command; the
    next command's first descriptor :data:`SCHEDULER_COMMAND` ``+
    dim_width`` cycles after the previous command's last (it takes the
    command once its output register is empty, then multiplies for the
    range check). :func:`timeline` adds when the stage queues have room
    (:data:`SCHEDULER_ROOM`)."""
    offsets = []
    for count in counts:
        for index in range(count):
            offsets.append(0 if not offsets else SCHEDULER_CHUNK if index
                           else SCHEDULER_COMMAND + config.dim_width)
    return offsets


#: Cycles from a block's last row leaving the writer to the scheduler's
#: emitting a block that waited for room in the writer's stage queue.
WRITER_POP = 5
#: Cycles from the end of chunk ``i``'s feed until the stage queues (and the
#: scheduler's output register) take the descriptor of chunk ``i +
#: stage_queue + 1``: the queues hold ``stage_queue`` chunks each and pop a
#: chunk once its stage is done with it (measured: commands of many short
#: chunks, e.g. H x 1 x 1 commands, to a few cycles; the encoder's program
#: has none since its k projection stores K^T itself).
SCHEDULER_ROOM = 29
#: Cycles between two descriptors of one command (the scheduler's output register).
SCHEDULER_CHUNK = 2
#: Cycles between a command's last descriptor and the next command's first, less ``dim_width``.
SCHEDULER_COMMAND = 5
#: Cycles from the loader's last read request of a chunk to the first of the
#: next chunk: the issuer goes idle after a chunk's last request and takes
#: the next descriptor the cycle after (:class:`~bertforge.rtl.loader.Loader`).
#: It shows when the memory serves requests as fast as they come (rows of one
#: beat, as in the attention GEMMs of a 16 x 16 engine) and the chunks are
#: memory bound: a cycle per chunk.
ISSUE_GAP = 2
#: Cycles from the end of chunk ``i``'s feed until chunk ``i + 2`` (same
#: operand buffer slot) can issue its first read request. It binds only
#: when chunks are memory bound, every other chunk waiting for a slot (was 3;
#: measured 5 on the 16 x 16 int8 engine's attention context GEMMs, on
#: ``minilm.toml``'s int16 q projection with bias and scales and on a 4 x 4
#: engine's m=4, k=16, n=4 commands back to back).
SLOT_FREE = 5
#: :data:`SLOT_FREE` of the walk with a ``memory`` callback (the AXI
#: master's and LiteDRAM's estimates): those callbacks were fitted with the
#: old 3 and stay within 2% of their measured runs with it (with 5, the AXI
#: top's memory-bound programs came 3.3% over); not re-derived.
SLOT_FREE_CALLBACK = 3


def timeline(config, chunks, busy, loads, drain, *, start, lat, bw, exact, emitted=None,
             memory=None, writes=None, requests=None):
    """The walk of the module docstring (shared with the sparse engine's
    model) over ``chunks``, chunk ``i`` busy on the array ``busy[i]`` cycles
    after reading ``loads[i]`` beats; ``drain``: cycles from the end of a
    block's feeding to its first write (the array's pipeline); ``start``:
    cycles before the first read request.

    A chunk loads once the chunk two before it has been fed (double
    buffering) and, if it reads old C, bias or scales, once the writer has
    released the block buffer of the block two before
    (:data:`RELEASE`); a block's rows leave the writer (:func:`write_cycles`)
    once it is complete; blocks queue behind each other. Returns the cycle
    model's dict; ``exact`` only if ``exact`` is given, memory answers a
    beat per cycle after at most :data:`EXACT_MAX_LATENCY` cycles, no chunk
    waited for its data and no block for the writer.

    ``emitted``: :func:`scheduler_offsets` of the chunks (None: not
    applied); a chunk is not requested before the scheduler has emitted it.

    ``memory``: another memory than the harness's, a callable ``(index,
    ready) -> end``: chunk ``index``'s reads may be requested from cycle
    ``ready`` on; its last beat has arrived by ``end`` (exclusive; e.g.
    :class:`~bertforge.sim.axi_cycles.AxiReads`). ``lat`` is then the
    engine's own (2). ``writes``: the cycles a block's rows take to leave
    the writer, a callable ``(chunk) -> cycles`` of its last chunk (default
    :func:`write_cycles`: a piece a cycle, every write taken at once).

    ``requests``: the read requests of each chunk (:func:`load_requests`;
    None: not applied). The loader issues one a cycle and a chunk's first
    :data:`ISSUE_GAP` cycles after the previous chunk's last, so with
    ``memory`` None a chunk's data cannot begin before that.
    """
    writes = writes or (lambda chunk: write_cycles(config, chunk))
    beat_time = 1.0 if bw <= 0 or bw >= config.mem_bytes else config.mem_bytes / bw
    exact = exact and beat_time == 1.0 and lat <= EXACT_MAX_LATENCY
    lat = max(lat, 2)   # a request reaches the head of the memory's queue in 2 cycles
    mem_free = start + lat
    issue_free = start  # the loader's issuer: the first request of the next chunk
    feed = []           # (start, end) of each chunk on the array
    written = []        # per block: (its chunk index, the cycle its last row has left the writer)
    stalled = False
    last_rows = writes(chunks[-1])
    for index, chunk in enumerate(chunks):
        ready = start
        if emitted is not None:     # not before the scheduler has emitted it
            emit = start if index == 0 else emit + emitted[index]
            room = index - config.stage_queue - 1     # the stage queues hold stage_queue chunks
            if room >= 0:
                emit = max(emit, feed[room][1] + SCHEDULER_ROOM)
            ready = max(ready, emit)
        if index >= 2:   # its buffer slot frees once chunk index-2 is fed
            ready = max(ready, feed[index - 2][1]
                        + (SLOT_FREE if memory is None else SLOT_FREE_CALLBACK))
        if _block_jobs(chunk) and len(written) >= 2:
            ready = max(ready, written[-2][1] + RELEASE)
        if memory is None:
            if requests is not None:
                ready = max(ready, issue_free)
                issue_free = ready + requests[index] - 1 + ISSUE_GAP
            begin = max(mem_free, ready + lat)
            end = begin + math.ceil(loads[index] * beat_time)
        else:
            end = memory(index, ready)
        mem_free = end
        if index and end > feed[-1][1]:
            stalled = True
        first = end if index == 0 else max(end, feed[-1][1])
        feed.append((first, first + busy[index]))
        if chunk["last"]:
            ready = feed[-1][1] + drain
            if written and written[-1][1] + 8 > ready - last_rows:
                stalled = True      # the writer may hold the accumulator slot the block needs
            write_begin = ready if not written else max(ready, written[-1][1])
            if write_begin > ready:
                stalled = True
            written.append((index, write_begin + writes(chunk), write_begin))
    return {"cycles": int(written[-1][1] + END), "exact": exact and not stalled,
            "bound": "memory" if stalled else "compute",
            "write_begins": [begin for _, _, begin in written]}


#: Serial engine: cycles from a tile's last beat to its first result row,
#: less ``cols + multiply_stages`` (see :func:`serial_cycles`).
SERIAL_SUM_WAIT = 3


def serial_cycles(config, commands, *, lat=1, bw=0):
    """Cycles of the :class:`~bertforge.rtl.serial_engine.SerialGemmEngine`
    for ``commands`` run back to back (the same dicts as
    :func:`gemm_cycles`'s), with the harness's memory of latency ``lat``.

    The engine does one thing at a time, so the count is a sum. A read of
    one beat takes ``read = max(lat, 2) + 4`` cycles (the harness serves a
    request ``lat`` cycles after its handshake, at least 2 (its request
    queue), reads the word in a cycle and passes a 2-cycle queue; the
    engine takes the beat and moves on). Per
    command: the scheduler's range check and the hand-over, ``dim_width +
    4`` cycles, 1 more after the first command (a rejected command then
    completes 2 cycles later); the
    first command passes the command queue, if any, in 1 cycle more (a
    queue of 1) or 2 (the others wait at its head). Per
    chunk 2 cycles, 3 after a command's first (the scheduler refills its
    output register the cycle after the engine takes it, for a new
    command too), and per k ``2 + (m_len + 1) * read + (rows - m_len)``
    (a read per valid row of A and one for B's row, a cycle per other row,
    the beat into the array); after a tile's last beat ``cols +
    multiply_stages +`` :data:`SERIAL_SUM_WAIT` cycles until its first
    result row, then a cycle per PE to add its sum. A block's first chunk
    reads old C when it accumulates: ``read`` cycles per valid element, 1
    per other PE. A block's last chunk writes each valid element in ``3``
    cycles, ``+ read`` with a bias, ``+`` the requantizer's ``LATENCY +
    1`` for int8 and int16 (``+ read - 1`` to read a per-channel scale
    first), 1 per other PE.

    Exact for that memory when it never stalls and ``bw`` is 0 or at
    least a beat a cycle; ``bound`` is "memory".
    """
    from bertforge.rtl.serial_engine import SerialRequantizer
    from .gemm_golden import command_rejected
    R, C = config.rows, config.cols
    requant = SerialRequantizer.LATENCY + 1
    read = max(lat, 2) + 4
    total = min(config.command_queue, 2) if commands else 0    # the first through the queue
    for number, cmd in enumerate(commands):
        total += config.dim_width + 4 + (number > 0)
        if command_rejected(config, cmd):
            total += 2
            continue
        for index, chunk in enumerate(chunks(config, cmd)):
            m_len, n_len = chunk["m_len"], chunk["n_len"]
            inside = m_len * n_len
            total += 2 if index == 0 else 3
            if chunk["first"] and chunk["accumulate"]:
                total += inside * read + (R * C - inside)
            total += chunk["k_len"] * (2 + (m_len + 1) * read + (R - m_len))
            total += C + config.multiply_stages + SERIAL_SUM_WAIT + R * C
            if chunk["last"]:
                element = 3 + chunk["bias"] * read
                if cmd.get("int8") or cmd.get("int16"):
                    element += requant + (read - 1 if chunk["per_channel"] else 0)
                total += inside * element + (R * C - inside)
    exact = bw == 0 or bw >= config.mem_bytes
    return {"cycles": total, "exact": exact, "bound": "memory"}
