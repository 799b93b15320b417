"""Simulate the sparse GEMM engine: lay out A, the compressed weights and C
in a memory image, run :mod:`bertforge.sim.nm_sparse_gemm_tb` on the emitted
:class:`~bertforge.sim.nm_sparse_gemm_harness.SparseGemmHarness`, read the
results back."""

import functools
import sys
import tempfile
from pathlib import Path

import numpy as np

from bertforge.sim import runner
from bertforge.sim import nm_sparse_gemm_harness
from bertforge.sim.nm_sparse_gemm_harness import sparse_harness_name
from bertforge.sim.nm_sparse_golden import check_compressed, compress_nm, prune_nm

__all__ = ["sparse_harness_verilog", "layout_sparse_problems", "read_c", "simulate_sparse_engine"]

#: Verilog of the harness (memoized: emission takes seconds).
sparse_harness_verilog = functools.lru_cache(maxsize=8)(nm_sparse_gemm_harness.sparse_harness_verilog)


def _align(value, to=16):
    return -(-value // to) * to


def layout_sparse_problems(config, problems, rng=None):
    """Place the operands of ``problems`` in a memory image.

    Each problem is a dict with ``m, k, n``, the pattern ``pat_n, pat_m``
    and optional ``a`` (M x K), ``w`` (K x N weights, pruned to the pattern
    here), ``extreme`` (operands only -128 and 127 before pruning),
    ``accumulate`` (with ``c_old``, random if absent), ``int8``,
    ``multiplier``, ``shift``, ``pad`` (extra bytes per row) or ``raw``
    (command fields used as they are: for bad commands). Compressed weights
    are checked (:func:`~bertforge.sim.nm_sparse_golden.check_compressed`)
    before they are written. Returns ``(image, commands)``; each command
    also carries ``w`` (the pruned weights, for reading results).
    """
    rng = rng or np.random.default_rng(0)
    esize = config.width // 8
    lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
    size = 1 << config.addr_width
    image = np.zeros(size, dtype=np.uint8)
    cursor = 0
    commands = []

    def place(rows, cols, itemsize, pad):
        nonlocal cursor
        stride = cols * itemsize + pad
        addr = cursor
        cursor = _align(addr + rows * stride + 16)
        if cursor > size:
            raise ValueError(f"the matrices need more than the {size} bytes of a "
                             f"{config.addr_width}-bit address space; raise addr_width")
        return addr, stride

    def write(addr, stride, matrix, dtype):
        view = np.ndarray(matrix.shape, dtype=dtype, buffer=image, offset=addr,
                          strides=(stride, np.dtype(dtype).itemsize))
        view[...] = matrix

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


def read_c(image, cmd):
    """C of command ``cmd`` from a memory image (int64)."""
    dtype = np.dtype("<i1" if cmd["int8"] else "<i4")
    view = np.ndarray((cmd["m"], cmd["n"]), dtype=dtype, buffer=image, offset=cmd["c_addr"],
                      strides=(cmd["c_stride"], dtype.itemsize))
    return view.astype(np.int64)


def simulate_sparse_engine(config, image, commands, *, seed=0, lat_min=1, lat_mask=0, p_req=0,
                           p_data=0, p_wr=0, p_cmd=0, p_done=0, bw=0, waves=False, workdir=None,
                           quiet=True):
    """Run sparse ``commands`` on memory ``image`` in the emitted harness
    (Verilator). Returns the testbench's result dict (``cycles``,
    ``model_cycles``, ``ideal_cycles``, ``utilization``, ``match``, ...)
    with ``image``, the memory read back from the hardware."""
    text = sparse_harness_verilog(config)
    top = sparse_harness_name(config)
    if not runner.is_built(text, top, waves=waves) and not quiet:
        print(f"building the Verilator model of {top} (once per design; cached after)...",
              file=sys.stderr, flush=True)
    runner.build(text, top, waves=waves)
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"bertforge-{top}-"))
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "image.npy", image)
    spec = {"config": config.to_dict(), "image": str(work / "image.npy"), "commands": commands,
            "seed": seed, "lat_min": lat_min, "lat_mask": lat_mask, "p_req": p_req,
            "p_data": p_data, "p_wr": p_wr, "p_cmd": p_cmd, "p_done": p_done, "bw": bw}
    result = runner.run(text, top, "bertforge.sim.nm_sparse_gemm_tb", spec, waves=waves, workdir=work)
    path = Path(result.get("image", ""))
    result["image"] = np.load(path) if path.is_file() else None
    return result
