"""Simulate the sparse GEMM engine: lay out A, the compressed weights and C
in a memory image, run :mod:`bertforge.sim.sparse_engine_tb` on the emitted
:class:`~bertforge.sim.sparse_engine_harness.SparseEngineHarness`, read the
results back."""

import functools

import numpy as np

from bertforge.sim import sparse_engine_harness
from bertforge.sim.sparse_golden import check_compressed, compress_nm, prune_nm
from .gemm_sim import MemoryImage, read_matrix, simulate_gemm

__all__ = ["sparse_harness_verilog", "layout_sparse_problems", "read_c", "simulate_sparse_engine"]

#: Verilog of the harness (memoized: emission takes seconds).
sparse_harness_verilog = functools.lru_cache(maxsize=8)(sparse_engine_harness.sparse_harness_verilog)


def layout_sparse_problems(config, problems, rng=None):
    """Place the operands of ``problems`` in a memory image.

    Each problem is a dict with ``m, k, n``, the pattern ``pat_n, pat_m``
    and optional ``a`` (M x K), ``w`` (K x N weights, pruned to the pattern
    here), ``extreme`` (operands only -128 and 127 before pruning),
    ``accumulate`` (with ``c_old``, random if absent), ``int8``,
    ``multiplier``, ``shift``, ``pad`` (extra bytes per row) or ``raw``
    (command fields used as they are: for bad commands). Compressed weights
    are checked (:func:`~bertforge.sim.sparse_golden.check_compressed`)
    before they are written. Returns ``(image, commands)``; each command
    also carries ``w`` (the pruned weights, for reading results).
    """
    rng = rng or np.random.default_rng(0)
    esize = config.width // 8
    lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
    memory = MemoryImage(config)
    place, write, image = memory.place, memory.write, memory.image
    commands = []

    for index, p in enumerate(problems):
        if "raw" in p:
            commands.append(dict(p["raw"], tag=p.get("tag", index)))
            continue
        m, k, n, pn, pm = p["m"], p["k"], p["n"], p["pat_n"], p["pat_m"]
        pad = p.get("pad", 0)
        int8 = bool(p.get("int8"))
        if "a" in p:
            a, w = np.asarray(p["a"]), np.asarray(p["w"])
        elif p.get("extreme"):
            a, w = rng.choice([lo, hi], size=(m, k)), rng.choice([lo, hi], size=(k, n))
        else:
            a, w = rng.integers(lo, hi + 1, size=(m, k)), rng.integers(lo, hi + 1, size=(k, n))
        w = prune_nm(w, pn, pm)
        values, indices = compress_nm(w, pn, pm)
        check_compressed(values, indices, pn, pm, k)
        a_addr, a_stride = place(m, k, esize, pad)
        b_addr, b_stride = place(values.shape[0], n, esize, pad)
        i_addr, i_stride = place(values.shape[0], n, 1, pad)
        write(a_addr, a_stride, a, f"<i{esize}")
        write(b_addr, b_stride, values, f"<i{esize}")
        write(i_addr, i_stride, indices, "u1")
        c_addr, c_stride = place(m, n, 1 if int8 else 4, pad)
        if p.get("accumulate"):
            c_old = p.get("c_old")
            if c_old is None:
                c_old = rng.integers(-(1 << 31), 1 << 31, size=(m, n))
            write(c_addr, c_stride, np.asarray(c_old), "<i4")
        commands.append({
            "m": m, "k": k, "n": n, "a_addr": a_addr, "b_addr": b_addr, "c_addr": c_addr,
            "a_stride": a_stride, "b_stride": b_stride, "c_stride": c_stride,
            "idx_addr": i_addr, "idx_stride": i_stride, "pat_n": pn, "pat_m": pm,
            "accumulate": int(bool(p.get("accumulate"))), "int8": int(int8),
            "multiplier": int(p.get("multiplier", 1)), "shift": int(p.get("shift", 0)),
            "tag": int(p.get("tag", index)) & 0xFF})
    return image, commands


def simulate_sparse_engine(config, image, commands, **knobs):
    """Run sparse ``commands`` on memory ``image`` in the emitted harness
    (Verilator): :func:`~bertforge.generators.gemm_sim.simulate_gemm` with
    the sparse harness and testbench (same knobs, same result dict)."""
    return simulate_gemm(config, image, commands, verilog=sparse_harness_verilog(config),
                         testbench="bertforge.sim.sparse_engine_tb", **knobs)


def read_c(image, cmd):
    """C of command ``cmd`` from a memory image (int64)."""
    return read_matrix(None, image, cmd)
