"""The GELU unit's own parts: inputs (random or the user's), their simulation,
``sim gelu``'s flags and :func:`bench_gelu` (also run by ``bench norm``)."""

import sys

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.rtl.gelu import Gelu
from bertforge.rtl.tile_scheduler import CHANNEL_MULT_BITS
from bertforge.sim.gelu_golden import gelu_golden
from .bench import (CYCLE_COLUMNS, ECP5_COLUMNS, ECP5_NOTE, PACE_NOTE, add_bench_out,
                    bert_base_gemm_cycles, columns, ecp5_fields, measured, write_results)
from .cli_common import CliError, config_from_args, load_int_matrix, positive_float, positive_int
from .simulate import make_stimulus, simulate

__all__ = ["simulate_gelu", "random_gelu_input", "bench_gelu"]

#: Most elements of one ``sim gelu`` run.
MAX_ELEMENTS = 1 << 24


def simulate_gelu(config, x, *, seed=0, x_gap=0.0, y_stall=0.0, workdir=None, quiet=True,
                  words=None):
    """Stream rows ``x`` (rows x L integers, L a multiple of ``lanes``)
    through the emitted Verilog of ``config`` in Verilator (with
    ``channel_scales``, after loading ``words``: L scale words, required).

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ``max_abs_err``,
    ``mean_abs_err``, ...) with ``outputs``, the output array.
    """
    x = np.asarray(x, dtype=np.int64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1 or x.shape[1] % config.lanes:
        raise ParameterError(f"x must be rows x L with L a positive multiple of lanes={config.lanes}, "
                         f"not shape {x.shape}")
    data = {"x": x}
    if config.channel_scales or words is not None:
        gelu_golden(config, x[:1], words)          # the words' presence and count, checked
        if x.shape[1] > config.channels_max:
            raise ParameterError(f"rows of {x.shape[1]} exceed channels_max = {config.channels_max}")
        data["words"] = np.asarray(words, dtype=np.int64)
    spec = {"data": data, "seed": seed, "x_gap": x_gap, "y_stall": y_stall}
    from bertforge.sim.gelu_cycles import gelu_cycles
    result = simulate(config, "bertforge.sim.gelu_tb", spec, design=Gelu, workdir=workdir, quiet=quiet,
                      cycles=gelu_cycles(config, x.size // config.lanes))
    result["outputs"] = result["outputs"]["y"]
    return result


def random_gelu_input(config, rows, length, rng):
    """Realistic BERT FFN pre-activations: normal(-0.2, 1.5) in real units,
    a few at +-8, quantized with the input scale (saturating)."""
    real = rng.normal(-0.2, 1.5, (rows, length))
    real.flat[rng.integers(0, real.size, max(1, real.size // 64))] = 8.0
    real.flat[rng.integers(0, real.size, max(1, real.size // 64))] = -8.0
    lo, hi = -(1 << (config.in_width - 1)), (1 << (config.in_width - 1)) - 1
    return np.clip(np.floor(real / config.in_scale + 0.5), lo, hi).astype(np.int64)


def add_sim_args(sub):
    sub.add_argument("--rows", type=positive_int, default=4, help="random rows (default 4)")
    sub.add_argument("--length", type=positive_int, help="random row length (default 64 x lanes)")
    sub.add_argument("--x", metavar="X.npy", help="your input: a 2-D integer array (rows x L)")
    sub.add_argument("--scale", type=positive_float,
                     help="real value of one input LSB (sets in_mult/in_shift)")
    sub.add_argument("--out-scale", type=positive_float,
                     help="real value of one output LSB (sets out_mult/out_shift)")
    sub.add_argument("--out", metavar="Y.npy", help="where to write the output (with --x)")


def add_bench_args(sub):
    add_bench_out(sub, "gelu", ("--rows", 128, 4096, "rows of 3072 in one run", "rows of 3072"),
                  synth="skip ECP5 synthesis counts")


def _scaled_config(config, args):
    if getattr(args, "scale", None) is None and getattr(args, "out_scale", None) is None:
        return config
    from bertforge.sim.gelu_golden import gelu_config_for_scales
    return gelu_config_for_scales(config, args.scale or config.in_scale,
                                  args.out_scale or config.out_scale)


def make_config(block, args):
    return _scaled_config(config_from_args(block, args), args)


def _input(config, x):
    if x.shape[0] * x.shape[1] > MAX_ELEMENTS:
        raise CliError(f"{x.shape[0]} x {x.shape[1]} is more than the {MAX_ELEMENTS:,} elements "
                       "one run streams")
    rows, length = x.shape
    return make_stimulus(config, {"rows": rows, "length": length}, f"{rows} row(s) of {length}",
                         x=x)


def user_stimulus(config, args):
    if bool(args.x) != bool(args.out):
        raise CliError("--x and --out go together: give both")
    x = load_int_matrix(args.x, "X", config.in_width)
    if x.shape[0] < 1 or x.shape[1] < 1 or x.shape[1] % config.lanes:
        raise CliError(f"X has shape {x.shape}; its rows must have a positive multiple of "
                       f"lanes={config.lanes} elements")
    return _input(config, x)


def random_stimulus(config, args, rng):
    length = args.length or 64 * config.lanes
    if length % config.lanes:
        raise CliError(f"--length {length} is not a multiple of lanes={config.lanes}")
    if args.rows * length > MAX_ELEMENTS:
        raise CliError(f"--rows x --length is more than the {MAX_ELEMENTS:,} elements one run streams")
    return _input(config, random_gelu_input(config, args.rows, length, rng))


def run(config, stimulus, args):
    words = None
    if config.channel_scales:       # from the command line: every channel at the config's scale
        word = (config.out_shift << CHANNEL_MULT_BITS) | config.out_mult
        words = np.full(stimulus["x"].shape[1], word, dtype=np.int64)
    result = simulate_gelu(config, stimulus["x"], seed=args.seed, x_gap=args.gap,
                           y_stall=args.stall, quiet=args.json, words=words)
    result["output"] = result["outputs"].astype(np.int8 if config.out_width == 8 else np.int16)
    return result


def bench_gelu(out_dir, *, lanes=(1, 4, 16), rows=128, length=3072, synth=True, write=True):
    """GELU over ``rows`` x ``length`` (BERT-base FFN: 128 x 3072) with
    int8 in/out (LSB 1/16) for each lane count: measured cycles, cycle
    model, elements per cycle, error against float GELU and (``synth``)
    ECP5 cell/LUT counts. Returns the result rows; with ``write``, also
    writes ``bench.json`` and ``bench.md`` to ``out_dir``."""
    from bertforge.rtl.gelu import GeluConfig
    from bertforge.rtl.gelu import GELU_LATENCY
    results = []
    for index, n in enumerate(lanes, 1):
        config = GeluConfig(lanes=n)
        print(f"[{index}/{len(lanes)}] {config.name}: {rows} x {length}", file=sys.stderr, flush=True)
        x = random_gelu_input(config, rows, length, np.random.default_rng(index))
        result = simulate_gelu(config, x, seed=index, quiet=False)
        row = {"block": "gelu", "design": config.name, "lanes": n, "shape": f"{rows}x{length}",
               "elements": rows * length, **measured(result),
               "elements_per_cycle": result["elements_per_cycle"], "latency": GELU_LATENCY,
               "match": result["match"], "max_abs_err": result["max_abs_err"],
               "mean_abs_err": result["mean_abs_err"]}
        if rows == 128 and length == 3072:
            gemm = bert_base_gemm_cycles()
            row.update(gemm_layer_cycles=gemm, pace_ratio=result["cycles"] / gemm)
        if synth:
            row.update(ecp5_fields(config, Gelu))
        results.append(row)
    if write:
        write_results(out_dir, "gelu", results, _COLUMNS, "bertforge bench gelu", notes=_NOTES)
    return results


_COLUMNS = columns("design", "shape", *CYCLE_COLUMNS, "elem/cycle", "latency", "match",
                   ("max err", "max_abs_err", "{:.4f}"), ("mean err", "mean_abs_err", "{:.4f}"),
                   "vs 16x16 GEMM", *ECP5_COLUMNS)

_NOTES = [
    "cycles: measured in Verilator on the emitted Verilog, first input to last output handshake",
    "model: bertforge.sim.gelu_cycles.gelu_cycles (beats + 6); ideal: elements / lanes",
    "error: |output x out_scale - GELU(input x in_scale)| in real units, int8 in and out with LSB "
    "1/16; the output rounding alone is up to 1/32, the table before it is within 0.0018",
    "vs 16x16 GEMM: cycles of the one GELU of a BERT-base layer (128 x 3072) " + PACE_NOTE,
    ECP5_NOTE,
]


def bench(args):
    bench_gelu(args.out, rows=args.rows, synth=not args.no_synth)
    return 0
