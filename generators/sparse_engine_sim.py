"""Simulate the sparse GEMM engine: lay out A, the compressed weights and C
in a memory image, run :mod:`bertforge.sim.sparse_engine_tb` on the emitted
:class:`~bertforge.sim.sparse_engine_harness.SparseEngineHarness`, read the
results back."""

import numpy as np

from bertforge.sim.sparse_engine_harness import sparse_harness_verilog
from bertforge.sim.sparse_golden import check_compressed, compress_nm, prune_nm
from .gemm_sim import MemoryImage, read_matrix, simulate_gemm

from .cli_common import CliError

__all__ = ["layout_sparse_problems", "read_c", "simulate_sparse_engine"]


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
    return simulate_gemm(config, image, commands, harness=sparse_harness_verilog,
                         testbench="bertforge.sim.sparse_engine_tb", **knobs)


def read_c(image, cmd):
    """C of command ``cmd`` from a memory image (int64)."""
    return read_matrix(None, image, cmd)


def engine_config(array, args, a, b, n, m):
    """The sparse engine config of ``sim sparse --engine``: the array's
    fields plus the engine flags, with room for the matrices."""
    from bertforge.rtl.sparse_engine import SparseEngineConfig
    from bertforge.sim.sparse_golden import compressed_rows
    if array.max_dsp is not None:
        raise CliError("--max-dsp does not apply to --engine")
    if m & (m - 1):
        raise CliError(f"the engine takes N:M with M a power of two, not {n}:{m}")
    m_rows, k = a.shape
    n_cols = b.shape[1]
    esize = array.width // 8
    need = (m_rows * k * esize + compressed_rows(k, 1, 1) * n_cols * (esize + 1)
            + m_rows * n_cols * 4 + 8 * 64 + 1024)
    width = args.addr_width or max(12, (need - 1).bit_length())
    config = SparseEngineConfig(rows=array.rows, cols=array.cols, m_max=array.m_max,
                                width=array.width, acc_width=array.acc_width,
                                mem_width=args.mem_width or 512, k_chunk=args.k_chunk or 256,
                                addr_width=width)
    limit = (1 << config.dim_width) - 1
    if max(m_rows, k, n_cols) > limit:
        raise CliError(f"M, K and N must be at most 2**dim_width - 1 = {limit}")
    return config


def run_engine(config, args, a, b, n, m, *, waves=False):
    """``a @ b`` at ``n:m`` as one command of the sparse engine ``config``;
    the result dict with ``c`` (None if the testbench wrote no image)."""
    p, s = int(args.gap * 256), int(args.stall * 256)
    image, commands = layout_sparse_problems(
        config, [dict(m=a.shape[0], k=a.shape[1], n=b.shape[1], pat_n=n, pat_m=m, a=a, w=b)])
    result = simulate_sparse_engine(config, image, commands, seed=args.seed, p_req=s, p_data=p,
                                    p_wr=s, p_cmd=p, p_done=s, quiet=args.json, waves=waves)
    got = result.pop("image")
    result["c"] = read_c(got, commands[0]) if got is not None else None
    return result
