"""Host side of the N:M sparse board top (:mod:`bertforge.boards.sparse_top`):
the memory images of a tile, its ``RUN`` arguments and result, and a run
over the link."""

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.sim.payload_np import pack_bytes, unpack_bytes
from .host import vector_layout

__all__ = ["sparse_tile_bytes", "sparse_run_args", "sparse_result_from_bytes", "run_sparse"]


def sparse_tile_bytes(top_config, a, w, n, m):
    """Memory images of A and B for one tile of the N:M sparse top
    (:mod:`bertforge.boards.sparse_top`), and its counts.

    ``a`` is R x K activations, ``w`` K x C weights with at most N non-zeros
    in every group of M rows of K per column (:func:`~bertforge.sim.sparse_golden.prune_nm`
    makes such weights). Returns ``(mem_a, mem_b, groups, beats)``:
    ``groups = ceil(K / M)`` words of A, ``beats = groups * N`` words of B.
    Raises ``ValueError`` (one line) for a bad pattern, bad shapes, values
    outside ``signed(width)``, weights that are not N:M sparse (naming the
    group and column) or a tile longer than ``k_max``.
    """
    from bertforge.rtl.sparse import a_layout, b_layout
    from bertforge.sim.sparse_golden import check_pattern, compress_nm, compressed_rows, sparse_columns
    array = top_config.array
    n, m = check_pattern(n, m, array.m_max)
    a, w = np.asarray(a), np.asarray(w)
    for name, matrix in (("A", a), ("W", w)):
        if matrix.ndim != 2 or matrix.dtype.kind not in "iu":
            raise ParameterError(f"{name} must be a 2-D integer matrix, not {matrix.dtype} of "
                             f"shape {matrix.shape}")
    rows, cols = array.rows, array.cols
    if a.shape[0] != rows or w.shape[1] != cols or a.shape[1] != w.shape[0] or a.shape[1] < 1:
        raise ParameterError(f"A is {a.shape[0]} x {a.shape[1]} and W is {w.shape[0]} x {w.shape[1]}; "
                         f"the {rows}x{cols} array takes A as {rows} x K and W as K x {cols}")
    lo, hi = -(1 << (array.width - 1)), (1 << (array.width - 1)) - 1
    for name, matrix in (("A", a), ("W", w)):
        if matrix.min() < lo or matrix.max() > hi:
            raise ParameterError(f"{name} holds values in [{matrix.min()}, {matrix.max()}]; "
                             f"int{array.width} values must lie in [{lo}, {hi}]")
    k = a.shape[1]
    groups, beats = compressed_rows(k, 1, m), compressed_rows(k, n, m)
    if beats > top_config.k_max:
        raise ParameterError(f"K = {k} at {n}:{m} is {beats} compressed beats; this bitstream "
                         f"holds k_max = {top_config.k_max} (build with a larger --k-max)")
    try:
        values, indices = compress_nm(w, n, m)
    except ValueError as error:
        raise ParameterError(f"W breaks the {n}:{m} pattern: {error}") from None
    a_value, b_value, _ = sparse_columns(array, [(a.astype(np.int64), values, indices, n, m)])
    a_bytes, b_bytes, _ = top_config.word_bytes()
    # Memory A holds the data of each a beat (the top makes ``last``), B whole b beats.
    mem_a = pack_bytes(a_layout(array)["data"].shape, a_value["data"], stride=a_bytes)
    mem_b = pack_bytes(b_layout(array), b_value, stride=b_bytes)
    return mem_a, mem_b, groups, beats


def sparse_run_args(groups, beats):
    """The sparse top's ``RUN`` arguments: groups, then beats, 2 bytes each."""
    return groups.to_bytes(2, "little") + beats.to_bytes(2, "little")


def sparse_result_from_bytes(top_config, raw):
    """The R x C result from the bytes of memory C."""
    array = top_config.array
    layout = vector_layout(array.acc_width, array.cols)
    return unpack_bytes(layout, raw, top_config.word_bytes()[2])[:array.rows]


def run_sparse(link, top_config, a, w, n, m):
    """``A @ W`` at N:M on a sparse board: write A and B, run, read C back.
    Returns ``(C, cycles)``. ``link`` is a :class:`protocol.HostLink`."""
    mem_a, mem_b, groups, beats = sparse_tile_bytes(top_config, a, w, n, m)
    link.write(0, 0, mem_a)
    link.write(1, 0, mem_b)
    cycles = link.run(sparse_run_args(groups, beats))
    data = link.read(2, 0, top_config.word_bytes()[2] * top_config.array.rows)
    return sparse_result_from_bytes(top_config, data), cycles
