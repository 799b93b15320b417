"""Bit-exact golden model of the sparse GEMM engine
(:class:`~bertforge.rtl.sparse_engine.SparseEngine`): the dense
engine's model (:func:`bertforge.sim.gemm_golden.gemm_golden`, K chunks of
``k_chunk``) on the decompressed weights."""

import numpy as np

from .gemm_golden import FIELDS, matrix_view, command_fields, command_rejected, write_result
from .sparse_golden import compressed_rows, decompress_nm

__all__ = ["sparse_command_error", "run_sparse_commands", "SPARSE_FIELDS"]

#: Fields of a sparse command (those of a dense command with its bias and
#: per-channel scales, the pattern, the indices).
SPARSE_FIELDS = FIELDS + ("pat_n", "pat_m", "idx_addr", "idx_stride")


def sparse_command_error(config, c):
    """True if the engine rejects command ``c`` (a dict of :data:`SPARSE_FIELDS`):
    what the dense engine rejects (B checked as one row; bias and
    per-channel scales as there), a pattern that is not
    ``1 <= pat_n <= pat_m`` with ``pat_m`` a power of two up to ``m_max``, or
    compressed values or indices (``ceil(k / pat_m) * pat_n`` rows) that
    leave the address space."""
    if command_rejected(config, dict(c, b_stride=0)):
        return True
    pn, pm = c["pat_n"], c["pat_m"]
    if pm < 1 or pm > config.m_max or pm & (pm - 1) or not 1 <= pn <= pm:
        return True
    rows = compressed_rows(c["k"], pn, pm)
    limit = 1 << config.addr_width
    return (c["b_addr"] + (rows - 1) * c["b_stride"] + c["n"] * (config.width // 8) > limit
            or c["idx_addr"] + (rows - 1) * c["idx_stride"] + c["n"] > limit)


def run_sparse_commands(config, image, commands):
    """Run sparse ``commands`` in order on a byte image of memory (``uint8``,
    updated in place) as the engine does. Compressed weights that break
    their pattern raise ``ValueError`` (see
    :func:`~bertforge.sim.sparse_golden.check_compressed`). Returns the
    error flags."""
    operand = f"<i{config.width // 8}"
    errors = []
    for cmd in commands:
        c = command_fields(cmd, SPARSE_FIELDS)
        bad = sparse_command_error(config, c)
        errors.append(bool(bad))
        if bad:
            continue
        rows = compressed_rows(c["k"], c["pat_n"], c["pat_m"])
        a = matrix_view(image, c["a_addr"], c["a_stride"], c["m"], c["k"], operand).astype(np.int64)
        values = matrix_view(image, c["b_addr"], c["b_stride"], rows, c["n"], operand).astype(np.int64)
        indices = matrix_view(image, c["idx_addr"], c["idx_stride"], rows, c["n"], "u1").astype(np.int64)
        w = decompress_nm(values, indices, c["pat_n"], c["pat_m"], c["k"])
        write_result(config, image, c, a, w)
    return errors
