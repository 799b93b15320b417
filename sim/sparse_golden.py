"""N:M structured sparsity: pruning, the compressed layout the hardware reads,
its loader checks, and bit-exact golden models of the sparse array.

Weights ``W`` are K x C (the B operand of ``A @ B``: K along the reduction).
Groups are M consecutive rows of K (``g = k // M``); the last group is
partial when K is not a multiple of M. N:M sparse means at most N non-zeros
per column in every group.

Compressed layout (:func:`compress_nm`): ``values`` and ``indices``, both
``ceil(K / M) * N`` x C; rows ``g*N .. g*N + N - 1`` hold group ``g``: the
kept values of each column and their positions inside the group
(``0 <= index < M``, strictly increasing down the group's N rows). A group
with fewer than N non-zeros is filled with zero values at unused positions,
so every group has exactly N rows; positions past K (in a partial last
group) may only hold zeros.
"""

import numpy as np

from .systolic_golden import saturating_matmul
from bertforge.rtl.errors import ParameterError, ParameterTypeError
from bertforge.sim.payload_np import pack_beats
from bertforge.rtl.sparse import a_layout, b_layout

__all__ = ["prune_nm", "compress_nm", "decompress_nm", "check_compressed", "check_pattern",
           "parse_pattern", "is_nm_sparse", "nm_tile_golden", "compressed_rows",
           "sparse_columns", "sparse_beats"]


def check_pattern(n, m, m_max=None):
    """Raise ``TypeError``/``ValueError`` unless ``1 <= n <= m (<= m_max)``."""
    for name, value in (("n", n), ("m", m)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ParameterTypeError(f"{name} must be an integer, not {value!r}")
    if m < 1:
        raise ParameterError(f"m must be a positive integer, not {m}")
    if not 1 <= n <= m:
        raise ParameterError(f"n must be in 1..m = {m}, not {n}")
    if m_max is not None and m > m_max:
        raise ParameterError(f"m must be at most m_max = {m_max}, not {m}")
    return int(n), int(m)


def parse_pattern(text):
    """``"2:4"`` -> ``(2, 4)``; raises ``ValueError`` with a one-line message."""
    parts = str(text).split(":")
    try:
        n, m = (int(p) for p in parts)
    except ValueError:
        raise ParameterError(f"a pattern is N:M with integers, like 2:4, not {text!r}") from None
    return check_pattern(n, m)


def compressed_rows(k, n, m):
    """Rows of the compressed matrices for K rows of weights: ``ceil(K/M) * N``."""
    return -(-k // m) * n


def _weights(weights):
    w = np.asarray(weights)
    if w.ndim != 2:
        raise ParameterError(f"weights must be a 2-D K x C matrix, not shape {w.shape}")
    if w.dtype.kind not in "iu":
        raise ParameterError(f"weights must be integers, not {w.dtype}")
    return w.astype(np.int64)


def _grouped(w, m):
    """``w`` (K x C) zero-padded to a multiple of M rows, as (G, M, C)."""
    k, c = w.shape
    groups = -(-k // m)
    padded = np.zeros((groups * m, c), dtype=np.int64)
    padded[:k] = w
    return padded.reshape(groups, m, c)


def prune_nm(weights, n, m):
    """Keep the N largest magnitudes of each column in every group of M rows
    (ties go to the lower row); the rest become 0. Returns int64, same shape."""
    n, m = check_pattern(n, m)
    w = _weights(weights)
    g = _grouped(w, m)
    # Stable sort on -|w|: equal magnitudes keep row order, so ties keep the lower row.
    order = np.argsort(-np.abs(g), axis=1, kind="stable")
    keep = np.zeros_like(g, dtype=bool)
    np.put_along_axis(keep, order[:, :n, :], True, axis=1)
    return np.where(keep, g, 0).reshape(-1, w.shape[1])[:w.shape[0]]


def is_nm_sparse(weights, n, m):
    """True if every group of M rows has at most N non-zeros per column."""
    n, m = check_pattern(n, m)
    g = _grouped(_weights(weights), m)
    return bool(np.all(np.count_nonzero(g, axis=1) <= n))


def compress_nm(weights, n, m):
    """``(values, indices)`` of N:M sparse ``weights`` (see the module doc).

    Raises ``ValueError`` if a group has more than N non-zeros in a column
    (prune first with :func:`prune_nm`). ``values`` keep the weights' integer
    values (int64); ``indices`` are uint8.
    """
    n, m = check_pattern(n, m)
    w = _weights(weights)
    k, c = w.shape
    g = _grouped(w, m)
    counts = np.count_nonzero(g, axis=1)
    if np.any(counts > n):
        grp, col = (int(x[0]) for x in np.nonzero(counts > n))
        raise ParameterError(f"weights are not {n}:{m} sparse: group {grp} (rows {grp * m}.."
                         f"{min(k, grp * m + m) - 1}) of column {col} has {int(counts[grp, col])} "
                         f"non-zeros; prune with prune_nm first")
    # Positions to keep: non-zeros first, then the lowest zero positions, then sort.
    rank = np.where(g != 0, 0, 1) * m + np.arange(m)[None, :, None]
    chosen = np.sort(np.argsort(rank, axis=1, kind="stable")[:, :n, :], axis=1)
    values = np.take_along_axis(g, chosen, axis=1)
    groups = g.shape[0]
    return (values.reshape(groups * n, c),
            chosen.reshape(groups * n, c).astype(np.uint8))


def check_compressed(values, indices, n, m, k):
    """The loader's checks of compressed weights for K rows; returns
    ``(values, indices)`` as int64 arrays. Raises ``ValueError`` (one line)
    for a wrong shape, an index >= M, a repeated index in a group, indices
    out of order in a group, or a non-zero value placed past row K-1."""
    n, m = check_pattern(n, m)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ParameterError(f"k must be a positive integer, not {k!r}")
    values, indices = np.asarray(values), np.asarray(indices)
    rows = compressed_rows(k, n, m)
    if values.ndim != 2 or values.shape[0] != rows:
        raise ParameterError(f"compressed values must have ceil(K/M)*N = {rows} rows for K = {k} "
                         f"at {n}:{m}, not shape {values.shape}")
    if indices.shape != values.shape:
        raise ParameterError(f"compressed indices have shape {indices.shape}; "
                         f"the values have {values.shape}")
    for name, array in (("values", values), ("indices", indices)):
        if array.dtype.kind not in "iu":
            raise ParameterError(f"compressed {name} must be integers, not {array.dtype}")
    idx = indices.astype(np.int64)
    val = values.astype(np.int64)
    groups = rows // n
    bad = np.argwhere((idx < 0) | (idx >= m))
    if bad.size:
        r, col = (int(x) for x in bad[0])
        raise ParameterError(f"index {int(idx[r, col])} out of range 0..{m - 1} (M = {m}) at "
                         f"compressed row {r}, column {col} (group {r // n})")
    g = idx.reshape(groups, n, -1)
    if n > 1:
        # A repeated index anywhere in a group (not only next to each other).
        ordered = np.sort(g, axis=1)
        hit = np.argwhere(np.diff(ordered, axis=1) == 0)
        if hit.size:
            grp, slot, col = (int(x) for x in hit[0])
            raise ParameterError(f"repeated index in group {grp} of column {col}: index "
                             f"{int(ordered[grp, slot, col])} appears twice (each position "
                             f"of a group holds at most one value)")
        hit = np.argwhere(np.diff(g, axis=1) < 0)
        if hit.size:
            grp, slot, col = (int(x) for x in hit[0])
            raise ParameterError(f"indices out of order in group {grp} of column {col}: index "
                             f"{int(g[grp, slot + 1, col])} follows {int(g[grp, slot, col])} "
                             f"(indices must increase within a group)")
    pos = (np.arange(groups) * m)[:, None, None] + g
    past = np.argwhere((pos >= k) & (val.reshape(groups, n, -1) != 0))
    if past.size:
        grp, slot, col = (int(x) for x in past[0])
        raise ParameterError(f"non-zero value at row {int(pos[grp, slot, col])} >= K = {k} "
                         f"(group {grp}, column {col})")
    return val, idx


def decompress_nm(values, indices, n, m, k):
    """The K x C weights that ``(values, indices)`` encode (checked with
    :func:`check_compressed` first). Returns int64."""
    val, idx = check_compressed(values, indices, n, m, k)
    groups, cols = val.shape[0] // n, val.shape[1]
    dense = np.zeros((groups, m, cols), dtype=np.int64)
    g_idx = idx.reshape(groups, n, cols)
    np.put_along_axis(dense, g_idx, val.reshape(groups, n, cols), axis=1)
    return dense.reshape(groups * m, cols)[:k]


def nm_tile_golden(config, a, values, indices, n, m):
    """One tile of :class:`~bertforge.rtl.sparse.SparseArray`: ``a`` (R x K
    activations) times the weights the compressed ``(values, indices)``
    encode (C columns), summed in the order the PEs do (group by group,
    slots in stored order, which is K order) with every partial sum clamped
    to ``signed(acc_width)``: the saturating product of ``a`` and the
    decompressed weights."""
    a = np.asarray(a, dtype=np.int64)
    dense = decompress_nm(values, indices, n, m, a.shape[1])
    return saturating_matmul(a, dense, config.acc_width)


# ---- wire format of the array's a and b streams (and the board's memories) ----

def sparse_columns(config, tiles):
    """The ``a`` and ``b`` beats of ``tiles`` (``(a, values, indices, n, m)``
    each, see :func:`compress_nm`) as column-wise values of
    :func:`~bertforge.rtl.sparse.a_layout` and
    :func:`~bertforge.rtl.sparse.b_layout` (:mod:`bertforge.rtl.payload`),
    and the compressed beats per tile.

    ``a``: one beat per group, per row the group's M activations (zeros past
    K and past M up to ``m_max``), ``last`` on the tile's last group. ``b``:
    one beat per compressed row (C values, C indices, ``group_end`` on the
    group's N-th)."""
    rows, mm = config.rows, config.m_max
    windows, a_last, b_data, b_index, b_end, beats = [], [], [], [], [], []
    for a, values, indices, n, m in tiles:
        k = a.shape[1]
        groups = values.shape[0] // n
        padded = np.zeros((rows, groups * m), dtype=np.int64)
        padded[:, :k] = a
        window = np.zeros((groups, rows, mm), dtype=np.int64)
        window[:, :, :m] = padded.reshape(rows, groups, m).transpose(1, 0, 2)
        windows.append(window)
        a_last.append(np.arange(groups) == groups - 1)
        b_data.append(np.asarray(values, dtype=np.int64))
        b_index.append(np.asarray(indices, dtype=np.int64))
        b_end.append(np.arange(values.shape[0]) % n == n - 1)
        beats.append(values.shape[0])
    a_value = {"data": np.concatenate(windows), "last": np.concatenate(a_last)}
    b_value = {"data": np.concatenate(b_data), "index": np.concatenate(b_index),
               "group_end": np.concatenate(b_end)}
    return a_value, b_value, beats


def sparse_beats(config, tiles):
    """Payload ints of the ``a`` and ``b`` streams (:func:`sparse_columns`),
    and the compressed beats per tile."""
    a_value, b_value, beats = sparse_columns(config, tiles)
    return (pack_beats(a_layout(config), a_value, len(a_value["last"])),
            pack_beats(b_layout(config), b_value, len(b_value["group_end"])), beats)
