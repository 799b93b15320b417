"""``bertforge bench gemm``: BERT-base GEMMs at sequence length 128 on the
engine's emitted Verilog (harness memory in HDL), against the cycle model;
``--arith bf16``: the bf16 engine, with its error against float64 GEMMs;
``--serial``: the iCEBreaker's serial engine on one head's GEMMs."""

import sys
import time
from dataclasses import replace

import numpy as np

from bertforge.rtl.gemm import GemmConfig
from .bench import SIM_RATE_NOTE, add_bench_out, columns, write_results
from .cli_common import CliError, int_list
from .gemm_sim import bf16_gemm_errors, layout_problems, random_operands, read_matrix, simulate_gemm

__all__ = ["BERT_SHAPES", "HEAD_BATCHES", "SERIAL_SHAPES", "bench_gemm", "bench_serial",
           "serial_bench_config"]

#: (name, M, K, N) of BERT-base at sequence length 128.
BERT_SHAPES = [
    ("qkv/out proj", 128, 768, 768),
    ("ffn up", 128, 768, 3072),
    ("ffn down", 128, 3072, 768),
    ("attn scores", 128, 64, 128),
    ("attn context", 128, 128, 64),
]
#: (name, M, K, N, commands): the attention GEMMs of BERT-base's 12 heads,
#: back to back in one run (one command per head).
HEAD_BATCHES = [
    ("12 attn scores", 128, 64, 128, 12),
    ("12 attn contexts", 128, 128, 64, 12),
]


#: One memory size for every shape (2**22 bytes holds the FFN GEMMs; 2**23
#: with bf16's 2-byte operands and 4-byte results), so each array is built once.
BENCH_ADDR_WIDTH = 22


def bench_config(size, dataflow, arith="int"):
    return GemmConfig(rows=size, cols=size, dataflow=dataflow, m_tile=16,
                      addr_width=BENCH_ADDR_WIDTH + (arith == "bf16"), arith=arith)


def bench_gemm(out_dir, *, quick=False, sizes=(16, 8), limited_bw=16, dataflows=("os", "ws"),
               arith="int"):
    """Every shape on ``sizes`` x ``sizes`` arrays, both dataflows, with a
    memory of one 64-byte beat per cycle (compute bound), plus, on the
    largest array, the attention and projection shapes with ``limited_bw``
    bytes per cycle (memory bound) and the heads' attention GEMMs back to
    back (:data:`HEAD_BATCHES`, one run of 12 commands each). ``arith="bf16"``:
    the bf16 engine, random bf16 operands (normal values times a power of
    two per matrix), with the error against float64."""
    shapes = [(name, 32 if quick else m, k, n, 1) for name, m, k, n in BERT_SHAPES]
    batches = [(name, 32 if quick else m, k, n, count) for name, m, k, n, count in HEAD_BATCHES]
    runs = []
    for size in sizes:
        for dataflow in dataflows:
            for shape in shapes:
                runs.append((size, dataflow, shape, 0))
    for dataflow in dataflows:
        for shape in shapes:
            if shape[0] in ("attn scores", "qkv/out proj"):
                runs.append((max(sizes), dataflow, shape, limited_bw))
    for dataflow in dataflows:
        for batch in batches:
            runs.append((max(sizes), dataflow, batch, 0))
    rows = []
    for index, (size, dataflow, (name, m, k, n, count), bw) in enumerate(runs, 1):
        config = bench_config(size, dataflow, arith)
        print(f"[{index}/{len(runs)}] {config.name} {name} {m}x{k}x{n}"
              f"{f' bw={bw} B/cycle' if bw else ''}", file=sys.stderr, flush=True)
        rng = np.random.default_rng(index)
        problems = [{"m": m, "k": k, "n": n}] * count
        if config.bf16:
            problems = [dict(p, **dict(zip("ab", random_operands(config, rng, m, k, n))))
                        for p in problems]
        rows.append(_measure(config, name, problems, rng, seed=index, bw=bw))

    errors = [("rel err vs float64", "max_rel_error_vs_float64", "{:.2e}"),
              ("bound", "error_bound_vs_float64", "{:.2e}")] if arith == "bf16" else []
    table = columns("design", "GEMM", "M x K x N",
                    ("mem B/cycle", "mem_bytes_per_cycle", "{}"), "bound", "cycles", "model",
                    ("model err", "model_error", "{:.2%}"), ("ideal", "ideal_cycles", "{:.0f}"),
                    "utilization", "match", *errors, "sim cycles/s")
    notes = ["bf16: operands N(0,1) x 2**s (s in -8..8 per matrix), float32 C; rel err: the "
             "largest |C - A @ B (float64)| over |A| @ |B|, bound gamma(K+1)"] if arith == "bf16" else []
    write_results(out_dir, "gemm", rows, table,
                  "bertforge bench gemm" + (" --arith bf16" if arith == "bf16" else ""), notes=notes + [
        "cycles: measured in Verilator on the emitted GemmHarness (engine + HDL memory), first "
        "command handshake to completion; memory latency 1, 64-byte beats",
        "model: bertforge.sim.gemm_cycles.gemm_cycles (exact when compute bound)",
        "ideal: M*K*N/(rows*cols) per command; utilization = ideal / cycles",
        "12 attn scores / contexts: the 12 heads' GEMMs as 12 commands back to back in one run "
        "(M x K x N per command)", SIM_RATE_NOTE])
    return rows


def _measure(config, name, problems, rng, *, seed, bw=0, lat=1):
    """One run of ``problems`` (all of one shape) on ``config``'s harness:
    its bench row."""
    m, k, n = (problems[0][key] for key in "mkn")
    image, commands = layout_problems(config, problems, rng)
    start = time.perf_counter()
    result = simulate_gemm(config, image, commands, seed=seed, bw=bw, lat_min=lat, quiet=False)
    wall = time.perf_counter() - start
    error = abs(result["cycles"] - result["model_cycles"]) / result["model_cycles"]
    return {
        "design": config.name, "rows": config.rows, "cols": config.cols,
        "dataflow": config.dataflow, "gemm": name, "m": m, "k": k, "n": n,
        "commands": len(problems), "mem_bytes_per_cycle": bw or config.mem_bytes,
        "read_latency": lat, "cycles": result["cycles"], "model_cycles": result["model_cycles"],
        "model_error": error, "model_exact": result["model_exact"], "bound": result["bound"],
        "ideal_cycles": result["ideal_cycles"], "utilization": result["utilization"],
        "match": result["match"], "sim_cycles_per_second": result["sim_cycles_per_second"],
        "wall_seconds": wall,
        **(_errors(config, problems, commands, result) if config.bf16 else {})}


#: (name, M, K, N, flags) of ``bench gemm --serial``: one head of BERT-base
#: at sequence length 128 (its attention GEMMs, and its query projection
#: with bias and per-channel int8 requantization).
SERIAL_SHAPES = [
    ("attn scores", 128, 64, 128, {}),
    ("attn context", 128, 128, 64, {}),
    ("q proj (one head), bias, per-channel int8", 128, 768, 64,
     {"bias": True, "scale": np.linspace(2e-4, 3e-3, 64)}),
]


def serial_bench_config():
    """The iCEBreaker build's engine (the serial one) with 12-bit sizes and
    256 KiB of memory, so that BERT-base's shapes fit."""
    from bertforge.boards.targets import board
    from .gemm_board import gemm_top_config
    engine = gemm_top_config(board("icebreaker"), 12).engine
    return replace(engine, dim_width=12, addr_width=18)


def bench_serial(out_dir, *, quick=False):
    """:data:`SERIAL_SHAPES` on :func:`serial_bench_config`'s engine, behind
    a memory of the board top's read latency (a beat 6 cycles after its
    request: the harness's ``lat`` 3)."""
    from bertforge.boards.gemm_top import model_read_latency
    config = serial_bench_config()
    rows = []
    for index, (name, m, k, n, flags) in enumerate(SERIAL_SHAPES, 1):
        m = 16 if quick else m
        print(f"[{index}/{len(SERIAL_SHAPES)}] {config.name} {name} {m}x{k}x{n}", file=sys.stderr,
              flush=True)
        rows.append(_measure(config, name, [dict(m=m, k=k, n=n, **flags)],
                             np.random.default_rng(index), seed=index,
                             lat=model_read_latency(config)))
    table = columns("design", "GEMM", "M x K x N", "cycles", "model",
                    ("model err", "model_error", "{:.2%}"), ("ideal", "ideal_cycles", "{:.0f}"),
                    "utilization", "match", "sim cycles/s")
    write_results(out_dir, "gemm", rows, table, "bertforge bench gemm --serial", notes=[
        "the iCEBreaker's engine (SerialGemmEngine, 2x2, 24-bit sums; 12-bit sizes and 256 KiB "
        "here for BERT's shapes): one read request per A element and B row, one output element "
        "at a time, a bit-serial requantizer",
        "cycles: measured in Verilator on the emitted GemmHarness, first command handshake to "
        "completion; reads served 3 cycles after the request (a beat 6 cycles after it, as the "
        "board top's), 4-byte beats",
        "model: bertforge.sim.gemm_cycles.serial_cycles (exact for a memory of fixed latency)",
        "ideal: M*K*N/(rows*cols); utilization = ideal / cycles", SIM_RATE_NOTE])
    return rows


def _errors(config, problems, commands, result):
    """The bf16 run's error against float64 (every command's C)."""
    if result.get("image") is None:
        return {}
    outputs = [read_matrix(config, result["image"], cmd) for cmd in commands]
    errors = bf16_gemm_errors(problems, outputs)
    return {key: errors[key] for key in ("max_rel_error_vs_float64", "error_bound_vs_float64")}


def add_bench_args(sub):
    add_bench_out(sub, "gemm")
    sub.add_argument("--sizes", default=None, metavar="N,N",
                     help="square array sizes to run (default 16,8; bf16: 8,4)")
    sub.add_argument("--arith", choices=("int8", "bf16"), default="int8",
                     help="the engine's number format (default int8)")
    sub.add_argument("--quick", action="store_true",
                     help="shapes with M scaled to 32 (16 with --serial; a smoke run)")
    sub.add_argument("--serial", action="store_true",
                     help="the iCEBreaker's serial engine on one head of BERT-base instead")


def bench(args):
    if args.serial:
        if args.sizes or args.arith != "int8":
            raise CliError("--serial runs the iCEBreaker's 2x2 int8 engine: drop --sizes and "
                           "--arith")
        bench_serial(args.out, quick=args.quick)
        return 0
    default = "8,4" if args.arith == "bf16" else "16,8"
    sizes = int_list("--sizes", args.sizes or default, 1, 64, "array sizes")
    bench_gemm(args.out, quick=args.quick, sizes=sizes, arith=args.arith)
    return 0
