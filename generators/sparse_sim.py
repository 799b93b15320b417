"""The N:M sparse array's own parts: tiles, the simulation of a GEMM as tiles,
and ``bertforge sim sparse`` (with ``--engine``: the sparse GEMM engine).

A GEMM ``A @ B`` (A: M x K activations, B: K x N weights, N:M sparse along K)
runs as a sequence of R x C array tiles driven back to back by the
testbench (:mod:`bertforge.sim.sparse_tb`): the tile loop is in Python,
not in hardware; each tile streams the whole compressed K.
"""

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.sim.sparse_golden import check_compressed, check_pattern, compress_nm, prune_nm
from bertforge.rtl.sparse import SparseArray
from .cli_common import CliError, add_operand_files, load_int_matrix, positive_int
from .simulate import add_phases, simulate

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
    arrays = {}
    for t, (a, values, indices, _, _) in enumerate(tiles):
        arrays.update({f"a_{t}": a, f"v_{t}": values, f"i_{t}": indices})
    spec = {"data": arrays, "seed": seed, "patterns": [[n, m] for *_, n, m in tiles],
            "a_gap": a_gap, "b_gap": b_gap, "c_stall": c_stall}
    from bertforge.sim.sparse_cycles import sparse_cycles
    result = simulate(config, "bertforge.sim.sparse_tb", spec, design=SparseArray, waves=waves,
                      workdir=workdir, quiet=quiet, cycles=sparse_cycles(config, [len(v) for _, v, *_ in tiles]))
    saved = result["outputs"]
    result["outputs"] = [saved[f"arr_{t}"] for t in range(len(saved))]
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


# ---- bertforge sim sparse

#: Largest compressed beats a ``sim sparse`` run may stream (the tile loop is Python).
MAX_BEATS = 4_000_000


def add_sim_args(sub):
    sub.add_argument("--pattern", required=True, metavar="N:M",
                     help="N non-zeros in every group of M along K (M <= m_max)")
    sub.add_argument("--m", type=positive_int, help="rows of A and C")
    sub.add_argument("--k", type=positive_int, help="columns of A, rows of B")
    sub.add_argument("--n", type=positive_int, help="columns of B and C")
    add_operand_files(sub, "your A (M x K)", "your B (K x N); pruned to the pattern",
                      "where to write C (with --a/--b)")
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


def _pattern(config, args):
    from bertforge.sim.sparse_golden import parse_pattern
    n, m = parse_pattern(args.pattern)
    check_pattern(n, m, config.m_max)
    return n, m


def user_stimulus(config, args):
    from .gemm_sim import check_product_shapes
    n, m = _pattern(config, args)
    if not (args.a and args.b and args.out):
        raise CliError("--a, --b and --out go together: give all three")
    a = load_int_matrix(args.a, "A", config.width)
    b = load_int_matrix(args.b, "B", config.width)
    check_product_shapes(a, b, args)
    if args.b_is_pruned:
        try:
            compress_nm(b, n, m)
        except ValueError as error:
            raise CliError(f"B ({args.b}) breaks the {n}:{m} pattern: {error}") from None
    else:
        b = prune_nm(b, n, m)
    return _stimulus(config, args, a, b, n, m)


def random_stimulus(config, args, rng):
    n, m = _pattern(config, args)
    if args.b_is_pruned:
        raise CliError("--b-is-pruned goes with --b")
    if None in (args.m, args.k, args.n):
        raise CliError("--m, --k and --n are required (or give --a, --b and --out)")
    lo, hi = _operand_range(config)
    a = rng.integers(lo, hi + 1, (args.m, args.k))
    b = prune_nm(rng.integers(lo, hi + 1, (args.k, args.n)), n, m)
    return _stimulus(config, args, a, b, n, m)


def _stimulus(config, args, a, b, n, m):
    from bertforge.sim.sparse_cycles import nm_gemm_tiles, nm_tile_beats
    m_rows, k = a.shape
    n_cols = b.shape[1]
    tiles = nm_gemm_tiles(config, m_rows, n_cols)
    if tiles * nm_tile_beats(k, 1, 1) > MAX_BEATS:
        raise CliError(f"{m_rows}x{k}x{n_cols} streams {tiles * k} dense beats on a "
                       f"{config.rows}x{config.cols} array; at most {MAX_BEATS} per run")
    stimulus = {"a": a, "b": b, "n": n, "m": m,
                "summary": {"pattern": f"{n}:{m}", "m": m_rows, "k": k, "n": n_cols}}
    if args.engine:
        from .sparse_engine_sim import engine_config
        stimulus["config"] = engine_config(config, args, a, b, n, m)
        stimulus["summary"]["tile_loop"] = "engine"
        stimulus["title"] = f"{stimulus['config'].name}: {m_rows}x{k}x{n_cols} at {n}:{m} (engine)"
        return stimulus
    if any(value is not None for value in (args.mem_width, args.k_chunk, args.addr_width)):
        raise CliError("--mem-width, --k-chunk and --addr-width go with --engine")
    stimulus["summary"].update(tiles=tiles, tile_loop="testbench")
    stimulus["title"] = f"{config.name}: {m_rows}x{k}x{n_cols} at {n}:{m} ({tiles} tiles)"
    return stimulus


def run(config, stimulus, args):
    """The GEMM at its pattern, then in dense mode (1:1) on the same hardware."""
    a, b, n, m = stimulus["a"], stimulus["b"], stimulus["n"], stimulus["m"]
    if args.engine:
        from .sparse_engine_sim import run_engine
        sparse = run_engine(config, args, a, b, n, m, waves=args.waves)
        dense = run_engine(config, args, a, b, 1, 1)
    else:
        common = dict(seed=args.seed, a_gap=args.gap, b_gap=args.gap, c_stall=args.stall,
                      quiet=args.json)
        sparse = simulate_sparse_product(config, a, b, n, m, waves=args.waves, **common)
        dense = simulate_sparse_product(config, a, b, 1, 1, **common)
        sparse.update(bound="compute", model_exact=True)    # the array model is exact
    result = dict(sparse, dense_cycles=dense["cycles"], dense_model_cycles=dense["model_cycles"],
                  dense_match=dense["match"], speedup_vs_dense=dense["cycles"] / sparse["cycles"],
                  phases=add_phases(sparse, dense), checks=[sparse, dense])
    if sparse.get("c") is not None:
        wide = config.acc_width > 32 and not args.engine
        result["output"] = sparse["c"].astype(np.int64 if wide else np.int32)
    return result
