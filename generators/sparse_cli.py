"""``bertforge sim sparse`` and ``bertforge bench sparse``.

``sim sparse`` runs an M x K x N GEMM at a run-time N:M pattern, then the
same GEMM in dense mode (1:1) on the same hardware for ``speedup_vs_dense``:
by default on the N:M sparse array as a sequence of array tiles driven back
to back from the testbench (the tile loop is in Python); with ``--engine``
as one command of the sparse GEMM engine in its HDL harness (scheduler,
buffers and memory in hardware).
"""

import numpy as np

from .cli_common import (CliError, add_config_flags, add_sim_flags, check_result, config_from_args,
                         load_int_matrix, positive_int, report, save_npy_atomic)

BLOCK = "sparse"

#: Largest compressed beats a ``sim sparse`` run may stream (the tile loop is Python).
MAX_BEATS = 4_000_000


def add_sim_parser(blocks):
    sub = blocks.add_parser(BLOCK, help="an N:M sparse GEMM as tiles on the N:M sparse array, "
                                        "and the same GEMM in dense mode")
    add_config_flags(sub, BLOCK)
    sub.add_argument("--pattern", required=True, metavar="N:M",
                     help="N non-zeros in every group of M along K (M <= m_max)")
    sub.add_argument("--m", type=positive_int, help="rows of A and C")
    sub.add_argument("--k", type=positive_int, help="columns of A, rows of B")
    sub.add_argument("--n", type=positive_int, help="columns of B and C")
    add_sim_flags(sub)
    sub.add_argument("--a", metavar="A.npy", help="your A (M x K)")
    sub.add_argument("--b", metavar="B.npy", help="your B (K x N); pruned to the pattern")
    sub.add_argument("--out", metavar="C.npy", help="where to write C (with --a/--b)")
    sub.add_argument("--b-is-pruned", action="store_true",
                     help="B is already N:M sparse: refuse it if not, instead of pruning it")
    engine = sub.add_argument_group("sparse GEMM engine (with --engine)")
    engine.add_argument("--engine", action="store_true",
                        help="run the GEMM as one command of the sparse GEMM engine")
    engine.add_argument("--mem-width", type=positive_int, metavar="BITS",
                        help="engine memory width in bits (default 512)")
    engine.add_argument("--k-chunk", type=positive_int, help="engine K chunk (default 256)")
    engine.add_argument("--addr-width", type=positive_int, metavar="BITS",
                        help="engine address width (default: what the matrices need)")


def add_bench_parser(blocks):
    sub = blocks.add_parser(BLOCK, help="1:4, 2:4, 2:8, 4:8, 1:8 and dense on 8x8 (m_max 8): "
                                        "speedups, and LUTs against the dense array")
    sub.add_argument("--out", default="bench-sparse", metavar="DIR",
                     help="output directory (default bench-sparse)")
    sub.add_argument("--no-synth", action="store_true", help="skip the yosys area comparison")
    sub.add_argument("--no-engine", action="store_true", help="skip the sparse GEMM engine runs")


def _operands(config, args, n, m, rng):
    """``(a, b_pruned)`` from ``--a/--b`` or random of ``--m/--k/--n``."""
    if any((args.a, args.b, args.out)):
        if not (args.a and args.b and args.out):
            raise CliError("--a, --b and --out go together: give all three")
        a = load_int_matrix(args.a, "A", config.width)
        b = load_int_matrix(args.b, "B", config.width)
        if a.shape[1] != b.shape[0] or 0 in a.shape or 0 in b.shape:
            raise CliError(f"A is {a.shape[0]} x {a.shape[1]} and B is {b.shape[0]} x {b.shape[1]}; "
                           "A must be M x K and B K x N, all at least 1")
        if args.b_is_pruned:
            from bertforge.sim.sparse_golden import compress_nm
            try:
                compress_nm(b, n, m)
            except ValueError as error:
                raise CliError(f"B ({args.b}) breaks the {n}:{m} pattern: {error}") from None
            return a, b
        from bertforge.sim.sparse_golden import prune_nm
        return a, prune_nm(b, n, m)
    if args.b_is_pruned:
        raise CliError("--b-is-pruned goes with --b")
    if None in (args.m, args.k, args.n):
        raise CliError("--m, --k and --n are required (or give --a, --b and --out)")
    lo, hi = -(1 << (config.width - 1)), 1 << (config.width - 1)
    from bertforge.sim.sparse_golden import prune_nm
    a = rng.integers(lo, hi, (args.m, args.k))
    b = prune_nm(rng.integers(lo, hi, (args.k, args.n)), n, m)
    return a, b


def run_sim(args):
    from bertforge.sim.sparse_cycles import nm_gemm_tiles, nm_tile_beats
    from bertforge.sim.sparse_golden import check_pattern, parse_pattern
    from .sparse_sim import simulate_sparse_product
    config = config_from_args(BLOCK, args)
    n, m = parse_pattern(args.pattern)
    check_pattern(n, m, config.m_max)
    a, b = _operands(config, args, n, m, np.random.default_rng(args.seed))
    m_rows, k = a.shape
    n_cols = b.shape[1]
    tiles = nm_gemm_tiles(config, m_rows, n_cols)
    if tiles * nm_tile_beats(k, 1, 1) > MAX_BEATS:
        raise CliError(f"{m_rows}x{k}x{n_cols} streams {tiles * k} dense beats on a "
                       f"{config.rows}x{config.cols} array; at most {MAX_BEATS} per run")
    if args.engine:
        return _run_engine(args, config, a, b, n, m)
    if any(value is not None for value in (args.mem_width, args.k_chunk, args.addr_width)):
        raise CliError("--mem-width, --k-chunk and --addr-width go with --engine")
    common = dict(seed=args.seed, a_gap=args.gap, b_gap=args.gap, c_stall=args.stall, quiet=args.json)
    sparse = simulate_sparse_product(config, a, b, n, m, waves=args.waves, **common)
    dense = simulate_sparse_product(config, a, b, 1, 1, **common)
    summary = {"block": BLOCK, "design": config.name, "config": config.to_dict(),
               "pattern": f"{n}:{m}", "m": m_rows, "k": k, "n": n_cols, "seed": args.seed,
               "tiles": tiles, "tile_loop": "testbench",
               **{key: sparse[key] for key in ("cycles", "model_cycles", "ideal_cycles", "utilization",
                                                "match", "mismatches", "stalls",
                                                "sim_cycles_per_second")},
               "bound": "compute", "model_exact": True,    # the array model is exact
               "dense_cycles": dense["cycles"], "dense_model_cycles": dense["model_cycles"],
               "dense_match": dense["match"],
               "speedup_vs_dense": dense["cycles"] / sparse["cycles"]}
    if sparse.get("waves"):
        summary["waves"] = sparse["waves"]
    if args.out and sparse["match"]:
        dtype = np.int32 if config.acc_width <= 32 else np.int64
        save_npy_atomic(args.out, sparse["c"].astype(dtype))
        summary["out"] = str(args.out)
    report(summary, args.json, f"{config.name}: {m_rows}x{k}x{n_cols} at {n}:{m} ({tiles} tiles)",
           keys=("cycles", "model_cycles", "ideal_cycles", "dense_cycles", "speedup_vs_dense"))
    return check_result(sparse) or check_result(dense)


def _run_engine(args, array, a, b, n, m):
    """``sim sparse --engine``: the GEMM as one command of the sparse GEMM
    engine, then as one dense-mode (1:1) command on the same engine."""
    from bertforge.rtl.sparse_engine import SparseEngineConfig
    from bertforge.sim.sparse_golden import compressed_rows
    from .sparse_engine_sim import layout_sparse_problems, read_c, simulate_sparse_engine
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
    p, s = int(args.gap * 256), int(args.stall * 256)
    knobs = dict(seed=args.seed, p_req=s, p_data=p, p_wr=s, p_cmd=p, p_done=s, quiet=args.json)
    runs = {}
    for label, (pn, pm) in (("sparse", (n, m)), ("dense", (1, 1))):
        image, commands = layout_sparse_problems(
            config, [dict(m=m_rows, k=k, n=n_cols, pat_n=pn, pat_m=pm, a=a, w=b)])
        result = simulate_sparse_engine(config, image, commands,
                                        waves=args.waves and label == "sparse", **knobs)
        got = result.pop("image")
        result["c"] = read_c(got, commands[0]) if got is not None else None
        runs[label] = result
    sparse, dense = runs["sparse"], runs["dense"]
    summary = {"block": BLOCK, "design": config.name, "config": config.to_dict(),
               "pattern": f"{n}:{m}", "m": m_rows, "k": k, "n": n_cols, "seed": args.seed,
               "tile_loop": "engine",
               **{key: sparse[key] for key in ("cycles", "model_cycles", "ideal_cycles", "utilization",
                                                "match", "mismatches", "stalls", "bound", "model_exact",
                                                "sim_cycles_per_second")},
               "dense_cycles": dense["cycles"], "dense_model_cycles": dense["model_cycles"],
               "dense_match": dense["match"],
               "speedup_vs_dense": dense["cycles"] / sparse["cycles"]}
    if sparse.get("waves"):
        summary["waves"] = sparse["waves"]
    if args.out and sparse["match"] and sparse["c"] is not None:
        save_npy_atomic(args.out, sparse["c"].astype(np.int32))
        summary["out"] = str(args.out)
    report(summary, args.json, f"{config.name}: {m_rows}x{k}x{n_cols} at {n}:{m} (engine)",
           keys=("cycles", "model_cycles", "ideal_cycles", "dense_cycles", "speedup_vs_dense"))
    for result in (sparse, dense):
        if not result["match"]:
            return check_result(result)
        if result["model_exact"] and not result["stalls"] and check_result(result):
            return 1
    return 0


def run_bench(args):
    from .sparse_bench import bench_sparse
    engine = None
    if not args.no_engine:
        from bertforge.rtl.sparse_engine import SparseEngineConfig
        engine = SparseEngineConfig(rows=8, cols=8, m_max=8, m_tile=16, addr_width=22)
    bench_sparse(args.out, synth=not args.no_synth, engine=engine)
    return 0
