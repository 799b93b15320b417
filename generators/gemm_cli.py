"""``bertforge sim gemm`` and ``bertforge bench gemm``."""

import dataclasses
import sys

import numpy as np

from .cli_common import (CliError, add_config_flags, add_sim_flags, check_result, config_from_args,
                         load_int_matrix, positive_int, report, save_npy_atomic)

BLOCK = "gemm"

#: Largest simulated memory (the harness holds all of it): 2**26 bytes.
MAX_SIM_ADDR_WIDTH = 26


def add_sim_parser(blocks):
    sub = blocks.add_parser(BLOCK, help="one GEMM command through the engine (harness memory in HDL)")
    add_config_flags(sub, BLOCK)
    sub.add_argument("--m", type=positive_int, help="rows of A and C")
    sub.add_argument("--k", type=positive_int, help="columns of A, rows of B")
    sub.add_argument("--n", type=positive_int, help="columns of B and C")
    sub.add_argument("--int8", action="store_true", help="requantize C to int8")
    sub.add_argument("--multiplier", type=int, default=1, help="requantization multiplier (default 1)")
    sub.add_argument("--shift", type=int, default=0, help="requantization shift 0..63 (default 0)")
    sub.add_argument("--mem-bytes-per-cycle", type=int, default=0, metavar="BYTES",
                     help="read bandwidth of the simulated memory (default: one full beat per cycle)")
    sub.add_argument("--mem-latency", type=int, default=1, metavar="CYCLES",
                     help="read latency of the simulated memory, 1..255 (default 1)")
    add_sim_flags(sub)
    sub.add_argument("--a", metavar="A.npy", help="your A (M x K)")
    sub.add_argument("--b", metavar="B.npy", help="your B (K x N)")
    sub.add_argument("--out", metavar="C.npy", help="where to write C (with --a/--b)")


def add_bench_parser(blocks):
    sub = blocks.add_parser(BLOCK, help="BERT-base GEMMs (seq 128) on 8x8 and 16x16, both dataflows")
    sub.add_argument("--out", default="bench-gemm", metavar="DIR",
                     help="output directory (default bench-gemm)")
    sub.add_argument("--sizes", default="16,8", metavar="N,N",
                     help="square array sizes to run (default 16,8)")
    sub.add_argument("--quick", action="store_true",
                     help="shapes with M scaled to 32 (a smoke run)")


def sim_config(config, need_bytes, user_set):
    """``config`` with an ``addr_width`` the simulated memory can hold."""
    if user_set:
        if config.addr_width > MAX_SIM_ADDR_WIDTH:
            raise CliError(f"the simulated memory is 2**addr_width bytes; use --addr-width "
                           f"<= {MAX_SIM_ADDR_WIDTH} (or leave it out)")
        return config
    width = max(12, (need_bytes - 1).bit_length())
    if width > MAX_SIM_ADDR_WIDTH:
        raise CliError(f"the matrices need {need_bytes} bytes; the simulated memory holds at most "
                       f"2**{MAX_SIM_ADDR_WIDTH}")
    return dataclasses.replace(config, addr_width=width)


def problem_bytes(config, m, k, n, int8):
    esize = config.width // 8
    return (m * k + k * n) * esize + m * n * (1 if int8 else 4) + 3 * 32 + config.mem_bytes * 2


def run_sim(args):
    from .gemm_sim import layout_problems, read_matrix, simulate_gemm
    config = config_from_args(BLOCK, args)
    user = any((args.a, args.b, args.out))
    if not 0 <= args.shift <= 63:
        raise CliError(f"--shift must be in 0..63, not {args.shift}")
    if not 0 <= args.multiplier < 1 << 32:
        raise CliError(f"--multiplier must be in 0..2**32-1, not {args.multiplier}")
    if not 1 <= args.mem_latency <= 255:
        raise CliError(f"--mem-latency must be in 1..255, not {args.mem_latency}")
    if not 0 <= args.mem_bytes_per_cycle < 1 << 16:
        raise CliError(f"--mem-bytes-per-cycle must be in 0..65535, not {args.mem_bytes_per_cycle}")
    problem = {"int8": args.int8, "multiplier": args.multiplier, "shift": args.shift}
    if user:
        if not (args.a and args.b and args.out):
            raise CliError("--a, --b and --out go together: give all three")
        a = load_int_matrix(args.a, "A", config.width)
        b = load_int_matrix(args.b, "B", config.width)
        if a.shape[1] != b.shape[0] or 0 in a.shape or 0 in b.shape:
            raise CliError(f"A is {a.shape[0]} x {a.shape[1]} and B is {b.shape[0]} x {b.shape[1]}; "
                           "A must be M x K and B K x N, all at least 1")
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        problem.update(a=a, b=b)
    else:
        if None in (args.m, args.k, args.n):
            raise CliError("--m, --k and --n are required (or give --a, --b and --out)")
        m, k, n = args.m, args.k, args.n
    limit = (1 << config.dim_width) - 1
    if max(m, k, n) > limit:
        raise CliError(f"M, K and N must be at most 2**dim_width - 1 = {limit}")
    problem.update(m=m, k=k, n=n)
    config = sim_config(config, problem_bytes(config, m, k, n, args.int8), args.cfg_addr_width is not None)
    image, commands = layout_problems(config, [problem], np.random.default_rng(args.seed))
    p = int(args.gap * 256)
    s = int(args.stall * 256)
    result = simulate_gemm(config, image, commands, seed=args.seed, lat_min=args.mem_latency,
                           p_req=s, p_data=p, p_wr=s, p_cmd=p, p_done=s,
                           bw=args.mem_bytes_per_cycle, waves=args.waves, quiet=args.json)
    got = result.pop("image")
    summary = {"block": BLOCK, "design": config.name, "config": config.to_dict(),
               "m": m, "k": k, "n": n, "seed": args.seed,
               **{key: result[key] for key in ("cycles", "model_cycles", "ideal_cycles", "utilization",
                                                "match", "mismatches", "stalls", "bound", "model_exact",
                                                "sim_cycles_per_second")}}
    if result.get("waves"):
        summary["waves"] = result["waves"]
    if user and result["match"] and got is not None:
        c = read_matrix(config, got, commands[0])
        save_npy_atomic(args.out, c.astype(np.int8 if args.int8 else np.int32))
        summary["out"] = str(args.out)
    report(summary, args.json, f"{config.name}: {m}x{k}x{n}")
    if not result["match"]:
        return check_result(result)
    if result["model_exact"] and not result["stalls"] and check_result(result):
        return 1
    if not result.get("passed", True):
        print(f"bertforge: error: the testbench failed; log: {result.get('log')}", file=sys.stderr)
        return 1
    return 0


def run_bench(args):
    from .gemm_bench import bench_gemm
    try:
        sizes = tuple(int(text) for text in args.sizes.split(","))
    except ValueError:
        raise CliError(f"--sizes must be comma-separated integers, not {args.sizes!r}") from None
    if not sizes or any(size < 1 or size > 64 for size in sizes):
        raise CliError(f"--sizes must be array sizes in 1..64, not {args.sizes!r}")
    bench_gemm(args.out, quick=args.quick, sizes=sizes)
    return 0
