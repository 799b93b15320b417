"""The systolic array's own parts: tiles (random or the user's A/B), the
simulation of tiles back to back, and the ``sim systolic`` flags."""

import sys

import ml_dtypes
import numpy as np

from bertforge.sim.systolic_golden import operand_words, result_from_words
from bertforge.rtl.systolic import SystolicArray
from .cli_common import (CliError, add_operand_files, bounded_int, check_given_sizes, load_int_matrix,
                         load_npy)
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
    """``tiles`` random tiles of streaming length ``k``: integers over the
    full operand range; bf16: normal values times a power of two from
    ``2**-8`` to ``2**8`` per tile and operand (``ml_dtypes.bfloat16``)."""
    shape_a, shape_b = systolic_operand_shapes(config, k)
    if config.arith == "bf16":
        def draw(shape):
            scale = 2.0 ** int(rng.integers(-8, 9))
            return (rng.standard_normal(shape) * scale).astype(ml_dtypes.bfloat16)
        return [(draw(shape_a), draw(shape_b)) for _ in range(tiles)]
    lo, hi = -(1 << (config.width - 1)), 1 << (config.width - 1)
    return [(rng.integers(lo, hi, shape_a), rng.integers(lo, hi, shape_b)) for _ in range(tiles)]


def simulate_systolic(config, tiles, *, seed=0, a_gap=0.0, b_gap=0.0, c_stall=0.0,
                      waves=False, workdir=None, quiet=True):
    """Run ``tiles`` (a list of ``(a, b)``) back to back through the emitted
    Verilog of ``config`` in Verilator.

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ``phases``, ...) with
    ``outputs``, the list of result matrices read from the hardware (int64;
    float32 with ``arith="bf16"``, whose tiles are bfloat16).
    """
    data = {f"{name}_{t}": operand_words(config, m)
            for t, (a, b) in enumerate(tiles) for name, m in (("a", a), ("b", b))}
    from bertforge.sim.systolic_cycles import systolic_cycles
    ks = [a.shape[1] if config.dataflow == "os" else a.shape[0] for a, _ in tiles]
    result = simulate(config, "bertforge.sim.systolic_tb",
                      {"data": data, "seed": seed, "a_gap": a_gap, "b_gap": b_gap, "c_stall": c_stall},
                      design=SystolicArray, waves=waves, workdir=workdir, quiet=quiet, cycles=systolic_cycles(config, ks))
    saved = result["outputs"]
    result["outputs"] = [result_from_words(config, saved[f"arr_{t}"]) for t in range(len(saved))]
    return result


# ---- bertforge sim systolic

def add_sim_args(sub):
    sub.add_argument("--k", type=bounded_int(MAX_K, "the tiles stream through Python"),
                     help="streaming length of a tile: reduction length (OS) or activation rows "
                          "per weight block (WS)")
    sub.add_argument("--tiles", type=bounded_int(MAX_TILES, "tiles of one run"), default=1,
                     help="tiles back to back (default 1)")
    add_operand_files(sub, "your A (OS: R x K, WS: K x R); integers, or floats with --arith bf16 "
                           "(rounded to bf16)", "your B (OS: K x C, WS: R x C)",
                      "where to write A @ B (with --a/--b; float32 with --arith bf16)")


def load_bf16_matrix(path, label):
    """A float matrix from ``path`` rounded to bfloat16 (nearest even), and
    the note to print of how many values the rounding changed."""
    array = load_npy(path, label)
    if array.dtype.kind != "f" and array.dtype != ml_dtypes.bfloat16:
        raise CliError(f"{label} file {path} holds {array.dtype} values; with --arith bf16 it "
                       "must hold floats (float32)")
    if array.ndim != 2:
        raise CliError(f"{label} file {path} has shape {array.shape}; it must have 2 dimensions")
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = array.astype(ml_dtypes.bfloat16)
        wide = array.astype(np.float64)
        changed = int(np.sum((rounded.astype(np.float64) != wide) & ~np.isnan(wide)))
    return rounded, (f"note: {label} converted from {array.dtype} to bfloat16 (round to nearest "
                     f"even): {changed} of {array.size} values changed")


def user_tile(config, args):
    """The one tile given by ``--a``/``--b``, checked against the array."""
    if not (args.a and args.b and args.out):
        raise CliError("--a, --b and --out go together: give all three")
    notes = []
    if config.arith == "bf16":
        (a, note_a), (b, note_b) = load_bf16_matrix(args.a, "A"), load_bf16_matrix(args.b, "B")
        notes = [note_a, note_b]
    else:
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
    check_given_sizes(args, a, k=k)
    for note in notes:
        print(note, file=sys.stderr)
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
    if config.arith == "bf16":
        result.update(bf16_errors(stimulus["tiles"], result["outputs"]))
        result["output"] = result["outputs"][0]
        return result
    result["output"] = result["outputs"][0].astype(np.int32 if config.acc_width <= 32 else np.int64)
    return result


def bf16_errors(tiles, outputs):
    """The hardware's bf16 results against float64 GEMMs of the same
    (bf16) operands: ``max_abs_err_vs_float64``, and ``max_err_to_bound``,
    the largest error over its bound ``gamma(K-1) * |A| @ |B|`` (products
    exact, K - 1 adds rounded with u = 2**-24; under 1 unless a sum
    overflowed or flushed), over the finite results."""
    worst_abs, worst_ratio = 0.0, 0.0
    for (a, b), c in zip(tiles, outputs):
        a64 = np.asarray(a, dtype=ml_dtypes.bfloat16).astype(np.float64)
        b64 = np.asarray(b, dtype=ml_dtypes.bfloat16).astype(np.float64)
        with np.errstate(all="ignore"):
            exact = a64 @ b64
            steps = a64.shape[1] - 1
            gamma = steps * 2.0 ** -24 / (1 - steps * 2.0 ** -24)
            bound = gamma * (np.abs(a64) @ np.abs(b64))
            error = np.abs(c.astype(np.float64) - exact)
        finite = np.isfinite(error) & np.isfinite(bound)
        if np.any(finite):
            worst_abs = max(worst_abs, float(np.max(error[finite])))
            ratio = np.where(bound[finite] > 0, error[finite] / np.maximum(bound[finite], 1e-300),
                             np.where(error[finite] > 0, np.inf, 0.0))
            worst_ratio = max(worst_ratio, float(np.max(ratio)))
    return {"max_abs_err_vs_float64": worst_abs, "max_err_to_bound": worst_ratio}
