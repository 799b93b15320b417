"""Simulate the sparse GEMM engine: lay out A, the compressed weights and C
in a memory image, run :mod:`bertforge.sim.sparse_engine_tb` on the emitted
:class:`~bertforge.sim.sparse_engine_harness.SparseEngineHarness`, read the
results back."""

from bertforge.sim.sparse_engine_harness import sparse_harness_verilog
from bertforge.sim.sparse_golden import check_compressed, compress_nm, prune_nm
from .cli_common import CliError
from .gemm_sim import layout_problems, read_matrix, simulate_gemm

__all__ = ["layout_sparse_problems", "read_c", "simulate_sparse_engine"]


def _place_compressed(memory, p, w, pad):
    """W pruned to the problem's ``pat_n:pat_m``, compressed and checked
    (:func:`~bertforge.sim.sparse_golden.check_compressed`): values then
    indices, after A; their command fields."""
    pn, pm = p["pat_n"], p["pat_m"]
    esize = memory.config.width // 8
    values, indices = compress_nm(prune_nm(w, pn, pm), pn, pm)
    check_compressed(values, indices, pn, pm, w.shape[0])
    b_addr, b_stride = memory.place(*values.shape, esize, pad)
    i_addr, i_stride = memory.place(*indices.shape, 1, pad)
    memory.write(b_addr, b_stride, values, f"<i{esize}")
    memory.write(i_addr, i_stride, indices, "u1")
    return {"b_addr": b_addr, "b_stride": b_stride, "idx_addr": i_addr, "idx_stride": i_stride,
            "pat_n": pn, "pat_m": pm}


def layout_sparse_problems(config, problems, rng=None):
    """Place the operands of ``problems`` in a memory image:
    :func:`~bertforge.generators.gemm_sim.layout_problems` with ``pat_n,
    pat_m`` in each problem and ``w`` (K x N weights, pruned to the pattern
    and compressed here) for ``b``. Returns ``(image, commands)``."""
    return layout_problems(config, problems, rng, b_key="w", place_b=_place_compressed)


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
                                multiply_stages=array.multiply_stages,
                                multiplier_cell=array.multiplier_cell,
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
