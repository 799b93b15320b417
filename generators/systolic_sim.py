"""The systolic array's own parts: tiles (random or the user's A/B), the
simulation of tiles back to back, and the ``sim systolic`` flags."""

import numpy as np

from .cli_common import CliError, bounded_int, load_int_matrix
from .simulate import make_stimulus, simulate

__all__ = ["systolic_operand_shapes", "random_systolic_tiles", "simulate_systolic"]

#: Largest streaming length and tile count of one ``sim systolic`` run.
MAX_K, MAX_TILES = 1 << 16, 4096


def systolic_operand_shapes(config, k):
    """Shapes of one tile's ``(a, b)``: OS ``(R, K), (K, C)``; WS ``(K, R), (R, C)``."""
    if config.dataflow == "os":
        return (config.rows, k), (k, config.cols)
    return (k, config.rows), (config.rows, config.cols)


def random_systolic_tiles(config, k, tiles, rng):
    """``tiles`` random tiles of streaming length ``k`` (full operand range)."""
    lo, hi = -(1 << (config.width - 1)), 1 << (config.width - 1)
    shape_a, shape_b = systolic_operand_shapes(config, k)
    return [(rng.integers(lo, hi, shape_a), rng.integers(lo, hi, shape_b)) for _ in range(tiles)]


def simulate_systolic(config, tiles, *, seed=0, a_gap=0.0, b_gap=0.0, c_stall=0.0,
                      waves=False, workdir=None, quiet=True):
    """Run ``tiles`` (a list of ``(a, b)``) back to back through the emitted
    Verilog of ``config`` in Verilator.

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ``phases``, ...) with
    ``outputs``, the list of result matrices read from the hardware.
    """
    data = {f"{name}_{t}": np.asarray(m, dtype=np.int64)
            for t, (a, b) in enumerate(tiles) for name, m in (("a", a), ("b", b))}
    result = simulate(config, "bertforge.sim.systolic_tb",
                      {"data": data, "seed": seed, "a_gap": a_gap, "b_gap": b_gap, "c_stall": c_stall},
                      waves=waves, workdir=workdir, quiet=quiet)
    saved = result["outputs"]
    result["outputs"] = [saved[f"arr_{t}"] for t in range(len(saved))]
    return result


# ---- bertforge sim systolic

def add_sim_args(sub):
    sub.add_argument("--k", type=bounded_int(MAX_K, "the tiles stream through Python"),
                     help="streaming length of a tile: reduction length (OS) or activation rows "
                          "per weight block (WS)")
    sub.add_argument("--tiles", type=bounded_int(MAX_TILES, "tiles of one run"), default=1,
                     help="tiles back to back (default 1)")
    sub.add_argument("--a", metavar="A.npy", help="your A (OS: R x K, WS: K x R)")
    sub.add_argument("--b", metavar="B.npy", help="your B (OS: K x C, WS: R x C)")
    sub.add_argument("--out", metavar="C.npy", help="where to write A @ B (with --a/--b)")


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


def _tiles(config, tiles, k):
    return make_stimulus(config, {"k": k, "tiles": len(tiles)}, f"{len(tiles)} tile(s), K={k}",
                         tiles=tiles)


def user_stimulus(config, args):
    return _tiles(config, *user_tile(config, args))


def random_stimulus(config, args, rng):
    if args.k is None:
        raise CliError("--k is required (or give --a, --b and --out)")
    return _tiles(config, random_systolic_tiles(config, args.k, args.tiles, rng), args.k)


def run(config, stimulus, args):
    result = simulate_systolic(config, stimulus["tiles"], seed=args.seed, a_gap=args.gap,
                               b_gap=args.gap, c_stall=args.stall, waves=args.waves, quiet=args.json)
    result["output"] = result["outputs"][0].astype(np.int32 if config.acc_width <= 32 else np.int64)
    return result
