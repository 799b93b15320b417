"""Simulate the N:M sparse array: the Python API behind ``bertforge sim
sparse`` and ``bertforge bench sparse``.

A GEMM ``A @ B`` (A: M x K activations, B: K x N weights, N:M sparse along K)
runs as a sequence of R x C array tiles driven back to back by the
testbench (:mod:`bertforge.sim.sparse_tb`): the tile loop is in Python,
not in hardware; each tile streams the whole compressed K.
"""

import tempfile
from pathlib import Path

import numpy as np

from bertforge.sim import runner
from bertforge.sim.sparse_golden import check_compressed, check_pattern, compress_nm, prune_nm
from .simulate import build_design
from bertforge.rtl.errors import ParameterError

__all__ = ["random_sparse_tile", "check_tile", "simulate_sparse", "gemm_tiles", "simulate_sparse_product"]


def _operand_range(config):
    return -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1


def random_sparse_tile(config, k, n, m, rng, *, extreme=None):
    """One random tile ``(a, values, indices, n, m)``: ``a`` R x K, weights
    K x C pruned to N:M and compressed. ``extreme``: ``(a_value, w_value)``
    fills every operand with those values instead (then pruned)."""
    lo, hi = _operand_range(config)
    if extreme is None:
        a = rng.integers(lo, hi + 1, (config.rows, k))
        w = rng.integers(lo, hi + 1, (k, config.cols))
    else:
        a = np.full((config.rows, k), extreme[0])
        w = np.full((k, config.cols), extreme[1])
    values, indices = compress_nm(prune_nm(w, n, m), n, m)
    return a, values, indices, n, m


def check_tile(config, tile):
    """Raise ``ValueError`` (one line) unless ``tile`` fits the array:
    pattern within ``m_max``, ``a`` R x K, compressed weights valid for K
    (:func:`~bertforge.sim.sparse_golden.check_compressed`) with C
    columns, operands within ``signed(width)``."""
    a, values, indices, n, m = tile
    n, m = check_pattern(n, m, config.m_max)
    a = np.asarray(a)
    if a.ndim != 2 or a.shape[0] != config.rows or a.shape[1] < 1:
        raise ParameterError(f"a tile's activations must be {config.rows} x K, not shape {a.shape}")
    values, indices = check_compressed(values, indices, n, m, a.shape[1])
    if values.shape[1] != config.cols:
        raise ParameterError(f"a tile's compressed weights must have {config.cols} columns, "
                         f"not {values.shape[1]}")
    lo, hi = _operand_range(config)
    for name, array in (("activations", a), ("weights", values)):
        if array.size and (array.min() < lo or array.max() > hi):
            raise ParameterError(f"{name} must lie in [{lo}, {hi}] (int{config.width}), "
                             f"not [{array.min()}, {array.max()}]")
    return np.asarray(a, dtype=np.int64), values, indices, n, m


def simulate_sparse(config, tiles, *, seed=0, a_gap=0.0, b_gap=0.0, c_stall=0.0,
                    waves=False, workdir=None, quiet=True):
    """Run ``tiles`` (``(a, values, indices, n, m)`` each; the pattern may
    change from tile to tile) back to back through the emitted Verilog of
    ``config`` in Verilator. Every tile is checked (:func:`check_tile`)
    before anything is built.

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles`` (compressed beats), ``utilization``, ``match``, ...)
    with ``outputs``, the R x C results read from the hardware.
    """
    tiles = [check_tile(config, tile) for tile in tiles]
    if not tiles:
        raise ParameterError("tiles must not be empty")
    verilog = build_design(config, waves, quiet)
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"bertforge-{config.name}-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "tiles.npz"
    arrays = {}
    for t, (a, values, indices, _, _) in enumerate(tiles):
        arrays.update({f"a_{t}": a, f"v_{t}": values, f"i_{t}": indices})
    np.savez(data, **arrays)
    spec = {"config": config.to_dict(), "data": str(data), "seed": seed,
            "patterns": [[n, m] for *_, n, m in tiles],
            "a_gap": a_gap, "b_gap": b_gap, "c_stall": c_stall}
    result = runner.run(verilog, config.name, "bertforge.sim.sparse_tb", spec,
                        waves=waves, workdir=work)
    with np.load(result["outputs"]) as saved:
        result["outputs"] = [saved[f"arr_{t}"] for t in range(len(saved.files))]
    return result


def gemm_tiles(config, a, b, n, m):
    """The array tiles of ``a @ b`` (A: M x K, B: K x N already N:M sparse),
    row-block major: ``ceil(M/R) * ceil(N/C)`` tiles, edges padded with zeros."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    rows, cols = config.rows, config.cols
    m_rows, k = a.shape
    n_cols = b.shape[1]
    tiles = []
    for i in range(0, m_rows, rows):
        a_tile = np.zeros((rows, k), dtype=np.int64)
        a_tile[:min(rows, m_rows - i)] = a[i:i + rows]
        for j in range(0, n_cols, cols):
            b_tile = np.zeros((k, cols), dtype=np.int64)
            b_tile[:, :min(cols, n_cols - j)] = b[:, j:j + cols]
            values, indices = compress_nm(b_tile, n, m)
            tiles.append((a_tile, values, indices, n, m))
    return tiles


def simulate_sparse_product(config, a, b, n, m, **options):
    """``a @ b`` at N:M on the array, as tiles back to back (:func:`gemm_tiles`;
    ``b`` must already be N:M sparse, see
    :func:`~bertforge.sim.sparse_golden.prune_nm`). Returns the result
    dict with ``c``, the M x N product read from the hardware, in place of
    ``outputs``."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    result = simulate_sparse(config, gemm_tiles(config, a, b, n, m), **options)
    outputs = result.pop("outputs")
    rows, cols = config.rows, config.cols
    m_rows, n_cols = a.shape[0], b.shape[1]
    grid = np.zeros((-(-m_rows // rows) * rows, -(-n_cols // cols) * cols), dtype=np.int64)
    per_row = grid.shape[1] // cols
    for t, out in enumerate(outputs):
        i, j = divmod(t, per_row)
        grid[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols] = out
    result["c"] = grid[:m_rows, :n_cols]
    return result
