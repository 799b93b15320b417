"""``bertforge sim systolic`` and ``bertforge bench systolic``."""

import numpy as np

from .cli_common import (CliError, add_config_flags, add_sim_flags, check_result, config_from_args,
                         load_int_matrix, positive_int, report, save_npy_atomic)

BLOCK = "systolic"


def add_sim_parser(blocks):
    sub = blocks.add_parser(BLOCK, help="tiles back to back through a systolic array")
    add_config_flags(sub, BLOCK)
    sub.add_argument("--k", type=positive_int, help="streaming length of a tile: reduction "
                     "length (OS) or activation rows per weight block (WS)")
    sub.add_argument("--tiles", type=positive_int, default=1, help="tiles back to back (default 1)")
    add_sim_flags(sub)
    sub.add_argument("--a", metavar="A.npy", help="your A (OS: R x K, WS: K x R)")
    sub.add_argument("--b", metavar="B.npy", help="your B (OS: K x C, WS: R x C)")
    sub.add_argument("--out", metavar="C.npy", help="where to write A @ B (with --a/--b)")


def add_bench_parser(blocks):
    sub = blocks.add_parser(BLOCK, help="4x4, 8x8, 16x16, both dataflows, K = 64 and 768")
    sub.add_argument("--out", default="bench-systolic", metavar="DIR",
                     help="output directory (default bench-systolic)")
    sub.add_argument("--tiles", type=positive_int, default=16, help="tiles per run (default 16)")


def user_tile(config, args):
    """The one tile given by ``--a``/``--b``, checked against the array."""
    if not (args.a and args.b and args.out):
        raise CliError("--a, --b and --out go together: give all three")
    a = load_int_matrix(args.a, "A", config.width)
    b = load_int_matrix(args.b, "B", config.width)
    rows, cols = config.rows, config.cols
    if config.dataflow == "os":
        ok = a.shape[0] == rows and b.shape[1] == cols and a.shape[1] == b.shape[0]
        need, k = f"A as {rows} x K and B as K x {cols}", a.shape[1]
    else:
        ok = a.shape[1] == rows and b.shape == (rows, cols)
        need, k = f"A as K x {rows} and B as {rows} x {cols}", a.shape[0]
    if not ok or k < 1:
        raise CliError(f"A is {a.shape[0]} x {a.shape[1]} and B is {b.shape[0]} x {b.shape[1]}; "
                       f"a {config.dataflow.upper()} {rows}x{cols} array takes {need}")
    return [(a, b)], k


def run_sim(args):
    from .simulate import random_systolic_tiles, simulate_systolic
    config = config_from_args(BLOCK, args)
    user = any((args.a, args.b, args.out))
    if user:
        tiles, k = user_tile(config, args)
    else:
        if args.k is None:
            raise CliError("--k is required (or give --a, --b and --out)")
        k = args.k
        tiles = random_systolic_tiles(config, k, args.tiles, np.random.default_rng(args.seed))
    result = simulate_systolic(config, tiles, seed=args.seed, a_gap=args.gap, b_gap=args.gap,
                               c_stall=args.stall, waves=args.waves, quiet=args.json)
    outputs = result.pop("outputs")
    summary = {"block": BLOCK, "design": config.name, "config": config.to_dict(),
               "k": k, "tiles": len(tiles), "seed": args.seed,
               **{key: result[key] for key in ("cycles", "model_cycles", "ideal_cycles",
                                                "utilization", "match", "mismatches", "stalls")}}
    if result.get("waves"):
        summary["waves"] = result["waves"]
    if user and result["match"]:
        dtype = np.int32 if config.acc_width <= 32 else np.int64
        save_npy_atomic(args.out, outputs[0].astype(dtype))
        summary["out"] = str(args.out)
    report(summary, args.json, f"{config.name}: {len(tiles)} tile(s), K={k}")
    return check_result(result)


def run_bench(args):
    from .bench import bench_systolic
    bench_systolic(args.out, tiles=args.tiles)
    return 0
