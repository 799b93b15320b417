"""The LayerNorm unit's own parts: vectors (random or the user's), their
simulation, ``sim layernorm``'s flags and :func:`bench_layernorm` (also run
by ``bench norm``)."""

import sys

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.rtl.layernorm import LayerNorm
from .bench import (CYCLE_COLUMNS, ECP5_COLUMNS, ECP5_NOTE, PACE_NOTE, add_bench_out,
                    bert_base_gemm_cycles, columns, ecp5_fields, measured, write_results)
from .cli_common import CliError, bounded_int, config_from_args, load_int_matrix, positive_float, positive_int
from .simulate import make_stimulus, simulate

__all__ = ["simulate_layernorm", "random_layernorm_data", "bench_layernorm"]

#: Most vectors of one ``sim layernorm`` run.
MAX_VECTORS = 1 << 16


def simulate_layernorm(config, xs, rs, gamma, beta, *, seed=0, x_gap=0.0, y_stall=0.0,
                       workdir=None, quiet=True, second=None):
    """Normalize vectors ``xs`` (a list of 1-D integer arrays; with
    residual ``rs`` alike, else None) back to back through the emitted
    Verilog of ``config`` in Verilator, after loading ``gamma``/``beta``
    (and, for a ``second_output`` unit, ``second``: ``(gamma2, beta2,
    mult2, shift2)``, required).

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ``max_abs_err`` and
    ``mean_abs_err`` in output LSBs against the float reference, ...) with
    ``outputs``, the list of output vectors (and ``outputs2``, the second
    output's).
    """
    if config.second_output != (second is not None):
        raise ParameterError("second (gamma2, beta2, mult2, shift2) is required exactly when "
                             "config.second_output is set")
    xs = [np.asarray(x, dtype=np.int64) for x in xs]
    longest = max(len(x) for x in xs)
    gamma = np.asarray(gamma, dtype=np.int64)
    beta = np.asarray(beta, dtype=np.int64)
    for k, x in enumerate(xs):
        if x.ndim != 1 or not x.size or x.size % config.lanes or x.size > config.h_max:
            raise ParameterError(f"vector {k} has shape {x.shape}; vectors must have a length that "
                             f"is a multiple of lanes={config.lanes} and at most h_max={config.h_max}")
    if gamma.shape != beta.shape or gamma.ndim != 1 or len(gamma) < longest:
        raise ParameterError(f"gamma {gamma.shape} and beta {beta.shape} must be 1-D, of one length "
                         f">= the longest vector ({longest})")
    if config.add_residual and (rs is None or [len(r) for r in rs] != [len(x) for x in xs]):
        raise ParameterError("residual vectors must match the x vectors one to one")
    if second is not None:
        gamma2, beta2, mult2, shift2 = second
        if np.shape(gamma2) != gamma.shape or np.shape(beta2) != gamma.shape:
            raise ParameterError(f"gamma2 {np.shape(gamma2)} and beta2 {np.shape(beta2)} must have "
                                 f"gamma's shape {gamma.shape}")
    padded = min(-(-len(gamma) // config.lanes) * config.lanes, config.h_max)

    def pad(values):
        values = np.asarray(values, dtype=np.int64)[:padded]
        return np.concatenate([values, np.zeros(padded - len(values), np.int64)])
    arrays = {"gamma": pad(gamma), "beta": pad(beta)}
    if second is not None:
        arrays.update(gamma2=pad(gamma2), beta2=pad(beta2), mult2=np.array(mult2),
                      shift2=np.array(shift2))
    arrays.update({f"x_{k}": x for k, x in enumerate(xs)})
    if config.add_residual:
        arrays.update({f"r_{k}": np.asarray(r, dtype=np.int64) for k, r in enumerate(rs)})
    spec = {"data": arrays, "seed": seed, "x_gap": x_gap, "y_stall": y_stall}
    from bertforge.sim.layernorm_cycles import layernorm_cycles
    result = simulate(config, "bertforge.sim.layernorm_tb", spec, design=LayerNorm, workdir=workdir,
                      quiet=quiet, cycles=layernorm_cycles(config, [len(x) for x in xs]))
    saved = result["outputs"]
    result["outputs"] = [saved[f"y_{k}"] for k in range(len(xs))]
    if second is not None:
        result["outputs2"] = [saved[f"y2_{k}"] for k in range(len(xs))]
    return result


def random_layernorm_data(config, vectors, length, rng, *, var_range=(1e-2, 1e4)):
    """Realistic BERT LayerNorm inputs: per vector a real variance
    log-uniform in ``var_range`` and a mean of up to 3 standard deviations,
    a few outlier channels, split into ``x`` and ``r`` when residual; each
    vector quantized with its own power-of-two input LSB (about 1/2000 of
    its std, what an int32 accumulator or int16 activation would carry,
    limited by the integer range). gamma ~ N(1, 0.3), beta ~ N(0, 1) in the
    config's formats. Returns ``(xs, rs, gamma, beta)``."""
    xs, rs = [], []
    hi = (1 << (config.in_width - 1)) - 1
    for _ in range(vectors):
        std = float(np.sqrt(10 ** rng.uniform(*np.log10(var_range))))
        real = rng.normal(rng.uniform(-3, 3) * std, std, length)
        real[rng.integers(0, length, max(1, length // 100))] *= 6
        peak = float(np.max(np.abs(real))) or 1.0
        limit = (hi // 2) if config.add_residual else hi
        lsb = 2.0 ** np.ceil(np.log2(max(std / 2000, peak / limit)))
        if config.add_residual:
            part = rng.uniform(0.2, 0.8)
            x = np.floor(real * part / lsb + 0.5)
            r = np.floor(real * (1 - part) / lsb + 0.5)
            xs.append(np.clip(x, -hi - 1, hi).astype(np.int64))
            rs.append(np.clip(r, -hi - 1, hi).astype(np.int64))
        else:
            xs.append(np.clip(np.floor(real / lsb + 0.5), -hi - 1, hi).astype(np.int64))
    plo, phi = -(1 << (config.param_width - 1)), (1 << (config.param_width - 1)) - 1
    gamma = np.clip(np.floor(rng.normal(1, 0.3, length) * 2 ** config.gamma_frac + 0.5), plo, phi)
    beta = np.clip(np.floor(rng.normal(0, 1, length) * 2 ** config.beta_frac + 0.5), plo, phi)
    return xs, (rs if config.add_residual else None), gamma.astype(np.int64), beta.astype(np.int64)


def add_sim_args(sub):
    sub.add_argument("--vectors", type=bounded_int(MAX_VECTORS, "vectors of one run"), default=4,
                     help="random vectors (default 4)")
    sub.add_argument("--length", type=positive_int, help="random vector length H (default h_max)")
    sub.add_argument("--x", metavar="X.npy", help="your input: vectors x H integers")
    sub.add_argument("--residual", dest="residual_file", metavar="R.npy",
                     help="your residual, shaped as X (with --x and a residual config)")
    sub.add_argument("--gamma", metavar="G.npy", help="your gamma: H integers (with --beta)")
    sub.add_argument("--beta", metavar="B.npy", help="your beta: H integers (with --gamma)")
    sub.add_argument("--scale", type=positive_float,
                     help="real value of one input LSB (LayerNorm does not depend on it; "
                          "accepted for symmetry with the other units)")
    sub.add_argument("--out-scale", type=positive_float,
                     help="real value of one output LSB (sets out_mult/out_shift)")
    sub.add_argument("--out", metavar="Y.npy", help="where to write the int8 output (with --x)")


def add_bench_args(sub):
    add_bench_out(sub, "layernorm", ("--vectors", 128, MAX_VECTORS, "vectors of one run",
                                     "vectors of 768"), synth="skip ECP5 synthesis counts")


def _user_data(config, args):
    if not (args.x and args.out):
        raise CliError("--x and --out go together: give both")
    x = load_int_matrix(args.x, "X", config.in_width)
    vectors, h = x.shape
    if not vectors or not h or h % config.lanes or h > config.h_max:
        raise CliError(f"X has shape {x.shape}; its vectors must have a length that is a multiple "
                       f"of lanes={config.lanes} and at most h_max={config.h_max}")
    r = None
    if config.add_residual:
        if not args.residual_file:
            raise CliError("this config adds a residual: give --residual R.npy "
                           "(or --add-residual false)")
        r = load_int_matrix(args.residual_file, "R", config.in_width)
        if r.shape != x.shape:
            raise CliError(f"R has shape {r.shape}; it must have the shape of X {x.shape}")
    elif args.residual_file:
        raise CliError("--residual R.npy needs a config with add_residual true (--add-residual true)")
    if bool(args.gamma) != bool(args.beta):
        raise CliError("--gamma and --beta go together: give both")
    if args.gamma:
        gamma = load_int_matrix(args.gamma, "gamma", config.param_width, ndim=1)
        beta = load_int_matrix(args.beta, "beta", config.param_width, ndim=1)
        for label, array in (("gamma", gamma), ("beta", beta)):
            if array.shape != (h,):
                raise CliError(f"{label} has shape {array.shape}; it must hold H={h} values")
    else:
        gamma = np.full(h, 1 << config.gamma_frac, dtype=np.int64)
        beta = np.zeros(h, dtype=np.int64)
    return list(x), (list(r) if r is not None else None), gamma, beta


def make_config(block, args):
    from bertforge.sim.layernorm_golden import layernorm_config_for_scale
    config = config_from_args(block, args)
    if getattr(args, "out_scale", None) is not None:     # a sim flag; generate has none
        config = layernorm_config_for_scale(config, args.out_scale)
    return config


def _vectors(config, data):
    vectors, length = len(data[0]), len(data[0][0])
    return make_stimulus(config, {"vectors": vectors, "length": length},
                         f"{vectors} vector(s) of {length}", data=data)


def second_params(config, gamma, beta):
    """The second output's ``(gamma2, beta2, mult2, shift2)`` of a
    ``second_output`` unit run from the command line (None otherwise):
    the first pair, at the first output's scale, saturated to int8."""
    if not config.second_output:
        return None
    from bertforge.sim.fixed_golden import ratio_to_mult_shift
    return (gamma, beta, *ratio_to_mult_shift(config.out_mult / 2.0 ** config.out_shift))


def user_stimulus(config, args):
    return _vectors(config, _user_data(config, args))


def random_stimulus(config, args, rng):
    length = args.length or config.h_max
    if length % config.lanes or length > config.h_max:
        raise CliError(f"--length {length} must be a multiple of lanes={config.lanes} and at "
                       f"most h_max={config.h_max}")
    return _vectors(config, random_layernorm_data(config, args.vectors, length, rng))


def run(config, stimulus, args):
    xs, rs, gamma, beta = stimulus["data"]
    result = simulate_layernorm(config, xs, rs, gamma, beta, seed=args.seed, x_gap=args.gap,
                                y_stall=args.stall, quiet=args.json,
                                second=second_params(config, gamma, beta))
    result["output"] = np.stack(result["outputs"]).astype(np.int8)
    return result


def bench_layernorm(out_dir, *, lanes=(1, 4, 16), vectors=128, length=768, in_width=16,
                    synth=True, write=True):
    """LayerNorm(x + r) over ``vectors`` x ``length`` (BERT-base: 128 x 768,
    int16 inputs, int8 gamma/beta/output) for each lane count: measured
    cycles, cycle model, elements per cycle, latency, error against the
    float reference (output LSBs) and (``synth``) ECP5 cell/LUT counts.
    Returns the result rows; with ``write``, writes ``bench.json`` and
    ``bench.md`` to ``out_dir``."""
    from bertforge.rtl.layernorm import LN_OUT_LATENCY, LN_STATS_LATENCY, LayerNormConfig
    results = []
    for index, n in enumerate(lanes, 1):
        config = LayerNormConfig(lanes=n, h_max=length, in_width=in_width)
        print(f"[{index}/{len(lanes)}] {config.name}: {vectors} x {length}", file=sys.stderr,
              flush=True)
        xs, rs, gamma, beta = random_layernorm_data(config, vectors, length,
                                                    np.random.default_rng(index))
        result = simulate_layernorm(config, xs, rs, gamma, beta, seed=index, quiet=False)
        row = {"block": "layernorm", "design": config.name, "lanes": n,
               "shape": f"{vectors}x{length}", "elements": vectors * length, **measured(result),
               "elements_per_cycle": result["elements_per_cycle"],
               "latency": LN_STATS_LATENCY + LN_OUT_LATENCY, "match": result["match"],
               "max_abs_err": result["max_abs_err"], "mean_abs_err": result["mean_abs_err"]}
        if vectors == 128 and length == 768:
            gemm = bert_base_gemm_cycles()
            row.update(gemm_layer_cycles=gemm, pace_ratio=2 * result["cycles"] / gemm)
        if synth:
            row.update(ecp5_fields(config, LayerNorm, brams=True))
        results.append(row)
    if write:
        table = columns("design", "shape", *CYCLE_COLUMNS, "elem/cycle", "latency", "match",
                        ("max err (LSB)", "max_abs_err", "{}"),
                        ("mean err (LSB)", "mean_abs_err", "{:.4f}"), "vs 16x16 GEMM",
                        *ECP5_COLUMNS, "DP16KD")
        write_results(out_dir, "layernorm", results, table, "bertforge bench layernorm", notes=[
            "cycles: measured in Verilator on the emitted Verilog, first input to last output "
            "handshake; vectors back to back, gamma/beta loaded before",
            "model: bertforge.sim.layernorm_cycles.layernorm_cycles; ideal: elements / lanes",
            "latency: cycles from a vector's last input beat to its first output beat",
            "error: |output - round(float LayerNorm of the same integers / out_scale)| in int8 "
            "LSBs; variance log-uniform in [1e-2, 1e4] real units",
            "vs 16x16 GEMM: cycles of the two LayerNorms of a BERT-base layer (2 x 128 x 768) "
            + PACE_NOTE, ECP5_NOTE])
    return results


def bench(args):
    bench_layernorm(args.out, vectors=args.vectors, synth=not args.no_synth)
    return 0
