"""The ``bertforge`` command line.

    bertforge generate systolic --rows 4 --cols 4 --dataflow os -o out
    bertforge sim systolic --rows 4 --cols 4 --dataflow ws --k 64 --tiles 8 --json
    bertforge bench systolic --out bench
    bertforge demo
    bertforge presets

Every block's config fields are flags (``acc_width`` -> ``--acc-width``);
``--preset NAME`` and ``--config FILE.toml`` set them too (flags win). Bad
input ends with one line on stderr and exit code 2; a design whose output
differs from the golden model ends with exit code 1. ``BERTFORGE_DEBUG=1``
shows the traceback instead.
"""

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

from bertforge.sim.runner import SimulationError
from .emit import BLOCKS, write_design
from .presets import PRESETS, ConfigError, make_config

__all__ = ["main", "CliError"]


class CliError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise CliError(f"{message} (see: {self.prog} --help)")


def _flag(name):
    return "--" + name.replace("_", "-")


def _add_config_flags(parser, block):
    config_class = BLOCKS[block][0]
    group = parser.add_argument_group(f"{block} config (defaults from the preset)")
    group.add_argument("--preset", help=f"named preset: {', '.join(PRESETS[block])}")
    group.add_argument("--config", metavar="FILE.toml", help="TOML file with config fields")
    defaults = config_class()
    for field in dataclasses.fields(config_class):
        kind = type(getattr(defaults, field.name))
        group.add_argument(_flag(field.name), dest=f"cfg_{field.name}", type=kind, metavar=field.name.upper(),
                           help=f"default {getattr(defaults, field.name)!r}")


def _config_from_args(block, args):
    overrides = {key[4:]: value for key, value in vars(args).items() if key.startswith("cfg_")}
    return make_config(block, preset_name=args.preset, toml_path=args.config, overrides=overrides)


def _probability(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), not {value}")
    return value


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


def build_parser():
    parser = _Parser(prog="bertforge", description=(
        "Generate, simulate and benchmark BERT accelerator hardware (Amaranth -> Verilog)."))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    generate = commands.add_parser("generate", help="emit a block as Verilog + JSON sidecar")
    blocks = generate.add_subparsers(dest="block", metavar="BLOCK", parser_class=_Parser)
    blocks.required = True
    for block in BLOCKS:
        sub = blocks.add_parser(block, help=f"the {block} block")
        _add_config_flags(sub, block)
        sub.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")

    sim = commands.add_parser("sim", help="simulate a block in Verilator against its golden model")
    blocks = sim.add_subparsers(dest="block", metavar="BLOCK", parser_class=_Parser)
    blocks.required = True
    sub = blocks.add_parser("systolic", help="tiles back to back through a systolic array")
    _add_config_flags(sub, "systolic")
    sub.add_argument("--k", type=_positive, help="streaming length of a tile: reduction length "
                     "(OS) or activation rows per weight block (WS)")
    sub.add_argument("--tiles", type=_positive, default=1, help="tiles back to back (default 1)")
    sub.add_argument("--seed", type=int, default=0, help="seed of data and stalls (default 0)")
    sub.add_argument("--gap", type=_probability, default=0.0,
                     help="probability of an idle cycle before each input beat (default 0)")
    sub.add_argument("--stall", type=_probability, default=0.0,
                     help="probability of result ready low per cycle (default 0)")
    sub.add_argument("--a", metavar="A.npy", help="your A (OS: R x K, WS: K x R)")
    sub.add_argument("--b", metavar="B.npy", help="your B (OS: K x C, WS: R x C)")
    sub.add_argument("--out", metavar="C.npy", help="where to write A @ B (with --a/--b)")
    sub.add_argument("--waves", action="store_true", help="write an FST waveform")
    sub.add_argument("--json", action="store_true", help="print results as JSON")

    bench = commands.add_parser("bench", help="benchmark a block; writes bench.json + bench.md")
    blocks = bench.add_subparsers(dest="block", metavar="BLOCK", parser_class=_Parser)
    blocks.required = True
    sub = blocks.add_parser("systolic", help="4x4, 8x8, 16x16, both dataflows, K = 64 and 768")
    sub.add_argument("--out", default="bench-systolic", metavar="DIR",
                     help="output directory (default bench-systolic)")
    sub.add_argument("--tiles", type=_positive, default=16, help="tiles per run (default 16)")

    demo = commands.add_parser("demo", help="generate, simulate and report a default 4x4 OS array")
    demo.add_argument("-o", "--out", default="bertforge-demo", metavar="DIR",
                      help="where to write the Verilog (default bertforge-demo)")

    commands.add_parser("presets", help="list the named presets of every block")
    return parser


# ---------------------------------------------------------------- commands

def cmd_generate(args):
    config = _config_from_args(args.block, args)
    verilog_path, sidecar_path = write_design(config, args.out)
    print(f"wrote {verilog_path}")
    print(f"wrote {sidecar_path}")
    return 0


def load_int_matrix(path, label, width):
    """A 2-D integer matrix from ``path`` whose values fit ``signed(width)``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                raise CliError(f"{label} file {path} is not a .npy file (no NumPy header); "
                               "write it with numpy.save")
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CliError(f"{label} file {path} does not exist") from None
    except (ValueError, OSError, EOFError) as error:
        raise CliError(f"{label} file {path} is not a readable .npy file ({error})") from None
    if not isinstance(array, np.ndarray):
        raise CliError(f"{label} file {path} is an .npz archive; save one matrix with numpy.save")
    if array.dtype.kind not in "iu":
        raise CliError(f"{label} file {path} holds {array.dtype} values; it must hold integers "
                       f"(int{width})")
    if array.ndim != 2:
        raise CliError(f"{label} file {path} has shape {array.shape}; it must be a 2-D matrix")
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if array.size and (array.min() < lo or array.max() > hi):
        raise CliError(f"{label} file {path} holds values in [{array.min()}, {array.max()}]; "
                       f"int{width} operands must lie in [{lo}, {hi}]")
    return array.astype(np.int64)


def save_npy_atomic(path, array):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    tmp.replace(path)


def _systolic_user_tile(config, args):
    if not (args.a and args.b and args.out):
        raise CliError("--a, --b and --out go together: give all three")
    a = load_int_matrix(args.a, "A", config.width)
    b = load_int_matrix(args.b, "B", config.width)
    rows, cols = config.rows, config.cols
    if config.dataflow == "os":
        ok = a.shape[0] == rows and b.shape[1] == cols and a.shape[1] == b.shape[0]
        need = f"A as {rows} x K and B as K x {cols}"
        k = a.shape[1]
    else:
        ok = a.shape[1] == rows and b.shape == (rows, cols)
        need = f"A as K x {rows} and B as {rows} x {cols}"
        k = a.shape[0]
    if not ok or k < 1:
        raise CliError(f"A is {a.shape[0]} x {a.shape[1]} and B is {b.shape[0]} x {b.shape[1]}; "
                       f"a {config.dataflow.upper()} {rows}x{cols} array takes {need}")
    return [(a, b)], k


def _report(result, as_json, title):
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    print(title)
    for key in ("cycles", "model_cycles", "ideal_cycles"):
        print(f"  {key:<13} {result[key]}")
    print(f"  {'utilization':<13} {result['utilization']:.2%}")
    print(f"  {'match':<13} {'yes' if result['match'] else 'NO'}")
    for key in ("out", "waves"):
        if result.get(key):
            print(f"  {key:<13} {result[key]}")


def _check_result(result):
    if not result["match"]:
        where = f"; waveform: {result['waves']}" if result.get("waves") else ""
        print(f"bertforge: error: the hardware's output differs from the golden model in "
              f"{result['mismatches']} values{where}", file=sys.stderr)
        return 1
    if not result["stalls"] and result["cycles"] != result["model_cycles"]:
        print(f"bertforge: error: measured {result['cycles']} cycles, the cycle model says "
              f"{result['model_cycles']}", file=sys.stderr)
        return 1
    return 0


def cmd_sim_systolic(args):
    from .simulate import random_systolic_tiles, simulate_systolic
    config = _config_from_args("systolic", args)
    user = any((args.a, args.b, args.out))
    if user:
        tiles, k = _systolic_user_tile(config, args)
    else:
        if args.k is None:
            raise CliError("--k is required (or give --a, --b and --out)")
        k = args.k
        tiles = random_systolic_tiles(config, k, args.tiles, np.random.default_rng(args.seed))
    result = simulate_systolic(config, tiles, seed=args.seed, a_gap=args.gap, b_gap=args.gap,
                               c_stall=args.stall, waves=args.waves, quiet=args.json)
    outputs = result.pop("outputs")
    report = {"block": "systolic", "design": config.name, "config": config.to_dict(),
              "k": k, "tiles": len(tiles), "seed": args.seed,
              **{key: result[key] for key in ("cycles", "model_cycles", "ideal_cycles",
                                               "utilization", "match", "mismatches", "stalls")}}
    if result.get("waves"):
        report["waves"] = result["waves"]
    if user and result["match"]:
        dtype = np.int32 if config.acc_width <= 32 else np.int64
        save_npy_atomic(args.out, outputs[0].astype(dtype))
        report["out"] = str(args.out)
    _report(report, args.json, f"{config.name}: {len(tiles)} tile(s), K={k}")
    return _check_result(result)


def cmd_bench(args):
    from .bench import bench_systolic
    bench_systolic(args.out, tiles=args.tiles)
    return 0


def cmd_demo(args):
    from .demo import run_demo
    return run_demo(args.out)


def cmd_presets(args):
    for block, presets in PRESETS.items():
        print(f"{block}:")
        for name, config in presets.items():
            fields = ", ".join(f"{k}={v!r}" for k, v in config.to_dict().items())
            print(f"  {name:<12} {fields}")
    return 0


def main(argv=None):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "sim":
            return cmd_sim_systolic(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "demo":
            return cmd_demo(args)
        return cmd_presets(args)
    except (CliError, ConfigError, TypeError, ValueError, SimulationError, OSError) as error:
        if os.environ.get("BERTFORGE_DEBUG"):
            raise
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"bertforge: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bertforge: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
