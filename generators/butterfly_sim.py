"""The butterfly engine's own parts: jobs (random or the user's), their
simulation, ``sim butterfly``'s flags and :func:`bench_butterfly`."""

import sys

import numpy as np

from bertforge.rtl.butterfly import ButterflyEngine
from .bench import add_bench_out, columns, measured, write_results
from .cli_common import CliError, bounded_int, load_int_matrix
from .simulate import make_stimulus, simulate

__all__ = ["random_jobs_data", "simulate_butterfly", "bench_butterfly"]

#: Most vectors of one ``sim butterfly`` run.
MAX_BATCH = 1 << 16
MODE_CHOICES = ("linear", "fft", "ifft")


def random_vectors(config, batch, n, rng):
    """Full-scale random ``(re, im)``, each ``batch x n``."""
    lo, hi = -(1 << (config.width - 1)), 1 << (config.width - 1)
    return rng.integers(lo, hi, (batch, n)), rng.integers(lo, hi, (batch, n))


def random_weights(config, n, rng):
    """Random ``log2 n x n/2 x 4`` weights over the full ``weight_width`` range."""
    lo, hi = -(1 << (config.weight_width - 1)), 1 << (config.weight_width - 1)
    return rng.integers(lo, hi, (n.bit_length() - 1, n // 2, 4))


def linear_rescale(config):
    """``(mult, shift)`` for linear mode that keep random data in range: one
    stage gains up to ``2 * 2**(weight_width-1)``; divide by about that."""
    return 1, config.weight_width


def random_jobs_data(config, n, mode, batch, rng):
    """Jobs and arrays for one command (plus the weight load in linear mode)."""
    re, im = random_vectors(config, batch, n, rng)
    if mode != "linear":
        return [{"mode": mode, "n": n, "batch": batch}], {"x_re_0": re, "x_im_0": im}
    mult, shift = linear_rescale(config)
    jobs = [{"mode": "weights", "n": n},
            {"mode": "linear", "n": n, "batch": batch, "mult": mult, "shift": shift}]
    return jobs, {"w_0": random_weights(config, n, rng), "x_re_1": re, "x_im_1": im}


def simulate_butterfly(config, jobs, arrays, *, seed=0, cmd_gap=0.0, x_gap=0.0, w_gap=0.0,
                       y_stall=0.0, reset_after=0, waves=False, workdir=None, quiet=True):
    """Run ``jobs`` (see :mod:`bertforge.sim.butterfly_tb`) with ``arrays``
    through the emitted Verilog of ``config`` in Verilator (``reset_after``:
    cycles of a run cut short by a reset first). Returns the
    testbench's result dict with ``outputs`` (name -> array)."""
    data = {key: np.asarray(value, dtype=np.int64) for key, value in arrays.items()}
    spec = {"jobs": jobs, "data": data, "seed": seed, "cmd_gap": cmd_gap, "x_gap": x_gap,
            "w_gap": w_gap, "y_stall": y_stall, "reset_after": reset_after}
    from bertforge.sim.butterfly_cycles import butterfly_queue_cycles
    return simulate(config, "bertforge.sim.butterfly_tb", spec, design=ButterflyEngine, waves=waves,
                    workdir=workdir, quiet=quiet, cycles=butterfly_queue_cycles(config, jobs))


def _power_of_two_length(config, n):
    if n < 2 or n > config.n_max or n & (n - 1):
        raise CliError(f"--n must be a power of two in [2, {config.n_max}] (n_max), not {n}")
    return n


def add_sim_args(sub):
    sub.add_argument("--n", type=bounded_int(1 << 16, "n is at most n_max"),
                     help="vector length, a power of two <= n_max")
    sub.add_argument("--mode", choices=MODE_CHOICES, default="fft", help="default fft")
    sub.add_argument("--batch", type=bounded_int(MAX_BATCH, "vectors of one run"), default=None,
                     help="vectors back to back (default: lanes)")
    sub.add_argument("--mult", type=int, default=None,
                     help="linear mode: requantize multiplier (0..65535, default 1)")
    sub.add_argument("--shift", type=int, default=None,
                     help="linear mode: requantize shift (0..63, default weight_width)")
    sub.add_argument("--x", metavar="X.npy", help="your input: batch x n ints (real parts)")
    sub.add_argument("--x-im", metavar="XI.npy", help="imaginary parts (fft/ifft), batch x n")
    sub.add_argument("--weights", metavar="W.npy",
                     help="linear mode: log2(n) x n/2 x 4 ints [w00, w01, w10, w11]")
    sub.add_argument("--out", metavar="Y.npy",
                     help="where to write the result (linear: batch x n, fft: batch x n x 2)")


def add_bench_args(sub):
    add_bench_out(sub, "butterfly", ("--batch", 128, MAX_BATCH, "vectors of one run",
                                     "vectors per run"))


def user_jobs(config, args):
    if not (args.x and args.out):
        raise CliError("--x and --out go together (plus --weights in linear mode)")
    re = load_int_matrix(args.x, "X", config.width)
    im = (load_int_matrix(args.x_im, "X imaginary", config.width) if args.x_im
          else np.zeros_like(re))
    if im.shape != re.shape:
        raise CliError(f"X is {re.shape[0]} x {re.shape[1]} but its imaginary part is "
                       f"{im.shape[0]} x {im.shape[1]}")
    batch, n = re.shape
    if batch < 1:
        raise CliError("X has no vectors (0 rows)")
    if args.n is not None and args.n != n:
        raise CliError(f"X has vectors of length {n}, but --n is {args.n}")
    _power_of_two_length(config, n)
    if args.mode != "linear":
        if args.weights:
            raise CliError("--weights is for --mode linear only")
        return [{"mode": args.mode, "n": n, "batch": batch}], {"x_re_0": re, "x_im_0": im}, n
    if args.x_im:
        raise CliError("--x-im is for --mode fft or ifft only (linear mode is real)")
    if not args.weights:
        raise CliError("--mode linear with --x needs --weights W.npy")
    weights = load_int_matrix(args.weights, "weights", config.weight_width, ndim=3)
    need = (n.bit_length() - 1, n // 2, 4)
    if weights.shape != need:
        raise CliError(f"weights have shape {weights.shape}; for n = {n} they must be {need}")
    jobs, arrays = _linear_jobs(config, args, n, batch, weights, re, im)
    return jobs, arrays, n


def linear_params(config, args):
    mult, shift = linear_rescale(config)
    mult = mult if args.mult is None else args.mult
    shift = shift if args.shift is None else args.shift
    if not 0 <= mult <= 0xFFFF:
        raise CliError(f"--mult must be in [0, 65535], not {mult}")
    if not 0 <= shift <= 63:
        raise CliError(f"--shift must be in [0, 63], not {shift}")
    return mult, shift


def _linear_jobs(config, args, n, batch, weights, re, im):
    mult, shift = linear_params(config, args)
    jobs = [{"mode": "weights", "n": n},
            {"mode": "linear", "n": n, "batch": batch, "mult": mult, "shift": shift}]
    return jobs, {"w_0": weights, "x_re_1": re, "x_im_1": im}


def _jobs(config, jobs, arrays, n):
    mode, batch = jobs[-1]["mode"], jobs[-1]["batch"]
    return make_stimulus(config, {"n": n, "mode": mode, "batch": batch},
                         f"{mode} n={n}, batch {batch}", jobs=jobs, arrays=arrays)


def user_stimulus(config, args):
    return _jobs(config, *user_jobs(config, args))


def random_stimulus(config, args, rng):
    if args.n is None:
        raise CliError("--n is required (or give --x and --out)")
    n = _power_of_two_length(config, args.n)
    jobs, arrays = random_jobs_data(config, n, args.mode, args.batch or config.lanes, rng)
    if args.mode == "linear":
        mult, shift = linear_params(config, args)
        jobs[1].update(mult=mult, shift=shift)
    return _jobs(config, jobs, arrays, n)


def run(config, stimulus, args):
    jobs = stimulus["jobs"]
    result = simulate_butterfly(config, jobs, stimulus["arrays"], seed=args.seed, cmd_gap=args.gap,
                                x_gap=args.gap, w_gap=args.gap, y_stall=args.stall,
                                waves=args.waves, quiet=args.json)
    job = result["jobs"][0] if result["jobs"] else {}
    if "sqnr_db" in job:
        result["sqnr_db"] = job["sqnr_db"]
    index = len(jobs) - 1
    re, im = result["outputs"][f"y_re_{index}"], result["outputs"][f"y_im_{index}"]
    out = re if jobs[-1]["mode"] == "linear" else np.stack([re, im], axis=-1)
    result["output"] = out.astype(np.int16 if config.width == 16 else np.int8)
    return result


def dense_systolic(config, n, mode, batch):
    """The dense alternative: an ``N x N`` GEMM (``N = n``, or ``2n`` for the
    complex DFT as a real matrix) on a weight-stationary systolic array with
    the engine's ``4 * lanes`` multipliers; cycles from its cycle model."""
    from bertforge.rtl.systolic import SystolicConfig
    from bertforge.sim.systolic_cycles import systolic_cycles
    multipliers = 4 * config.lanes
    rows = 1 << ((multipliers.bit_length()) // 2)
    cols = multipliers // rows
    size = n if mode == "linear" else 2 * n
    systolic = SystolicConfig(rows=rows, cols=cols, dataflow="ws", width=config.width,
                              acc_width=48 if config.width == 16 else 32)
    blocks = -(-size // rows) * -(-size // cols)
    return {"dense_array": f"{rows}x{cols}", "dense_macs": batch * size * size,
            "dense_cycles": systolic_cycles(systolic, [batch] * blocks)}


def bench_butterfly(out_dir, *, ns=(64, 256, 1024), lanes=(1, 4, 16), modes=("linear", "fft"),
                    batch=128, n_max=1024, width=16, weight_width=16):
    """Every ``n`` x ``lanes`` x mode on an ``n_max`` engine, ``batch`` random
    vectors back to back; writes ``bench.json`` and ``bench.md``, returns the rows."""
    from bertforge.rtl.butterfly import ButterflyConfig
    rows = []
    runs = [(l, n, mode) for l in lanes for n in ns for mode in modes]
    for index, (l, n, mode) in enumerate(runs, 1):
        config = ButterflyConfig(n_max=n_max, lanes=l, width=width, weight_width=weight_width)
        print(f"[{index}/{len(runs)}] {config.name} {mode} n={n} batch {batch}",
              file=sys.stderr, flush=True)
        jobs, arrays = random_jobs_data(config, n, mode, batch, np.random.default_rng(index))
        result = simulate_butterfly(config, jobs, arrays, seed=index, quiet=False)
        job = result["jobs"][0] if result["jobs"] else {}
        row = {"design": config.name, "lanes": l, "n": n, "mode": mode, "batch": batch,
               **measured(result), "match": result["match"], "sqnr_db": job.get("sqnr_db"),
               "butterfly_macs": batch * (n // 2) * (n.bit_length() - 1) * 4,
               "sim_cycles_per_second": result["sim_cycles_per_second"]}
        row.update(dense_systolic(config, n, mode, batch))
        row["speedup_vs_dense"] = row["dense_cycles"] / row["cycles"]
        row["macs_saved"] = 1 - row["butterfly_macs"] / row["dense_macs"]
        rows.append(row)

    table = columns("design", ("mode", "mode", "{}"), ("n", "n", "{}"), ("batch", "batch", "{}"),
                    "cycles", "model", ("ideal", "ideal_cycles", "{:.0f}"), "utilization",
                    ("SQNR dB", "sqnr_db", "{:.1f}"), "match", ("dense array", "dense_array", "{}"),
                    ("dense cycles", "dense_cycles", "{}"),
                    ("speedup", "speedup_vs_dense", "{:.1f}x"), ("MACs saved", "macs_saved", "{:.1%}"))
    write_results(out_dir, "butterfly", rows, table, "bertforge bench butterfly", notes=[
        "cycles: measured in Verilator on the emitted Verilog, first x beat to last y beat",
        "model: bertforge.sim.butterfly_cycles.butterfly_cycles; "
        "ideal: batch * (n/2) * log2(n) / lanes",
        "SQNR: fft output against numpy.fft (fft(x)/n) for full-scale random complex input",
        "dense: the same layer as a dense n x n GEMM (2n x 2n real for the DFT) on a "
        "weight-stationary systolic array with the engine's 4 * lanes multipliers, "
        "cycles from the systolic cycle model (batch rows per weight block)",
        "linear mode: weights full-range random int16, requantize(., 1, weight_width) per stage"])
    return rows


def bench(args):
    bench_butterfly(args.out, batch=args.batch)
    return 0
