"""cocotb testbench of the emitted ``LayerNorm`` Verilog.

Spec (see :mod:`bertforge.sim.runner`): ``config`` (a
:class:`LayerNormConfig` as a dict), ``data`` (an ``.npz`` with ``gamma``
and ``beta``, each of a length that is a multiple of ``lanes``, and vectors
``x_0, x_1, ...`` (1-D, lengths multiples of ``lanes``, at most that of
gamma) with ``r_0, r_1, ...`` when ``add_residual``; with
``second_output`` also ``gamma2``, ``beta2``, ``mult2`` and ``shift2``), ``seed``, ``x_gap``
(idle probability per ``x``/``r`` beat), ``y_stall`` (probability of
``ready`` low per cycle).

It loads gamma and beta on ``params``, then streams the vectors back to
back (x and r from independent drivers), checks every output and ``last``
flag against :func:`bertforge.sim.layernorm_golden.layernorm_golden` and,
without gaps or stalls, the cycles against
:func:`bertforge.sim.layernorm_cycles.layernorm_cycles`. It also compares
with the float reference rounded to int8 (errors in output LSBs). Results
go to ``result_path``, outputs (``y_0, y_1, ...``, and the second
output's ``y2_0, ...``, checked against
:func:`bertforge.sim.layernorm_golden.layernorm_second`) to
``result_path`` + ``.npz``.
"""

import time

import cocotb
import numpy as np

from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from bertforge.rtl.payload import unpack
from bertforge.sim.payload_np import pack_beats, unpack_beats
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.layernorm_golden import (layernorm_float, layernorm_golden,
                                            layernorm_reference_int8, layernorm_second)
from bertforge.sim.funcov_tb import StreamCoverage
from bertforge.sim.stream_tb import finish, StreamDriver, StreamMonitor, StreamTB, read_spec, unit_result


def load_vectors(path, residual):
    with np.load(path) as saved:
        count = len([key for key in saved.files if key.startswith("x_")])
        xs = [saved[f"x_{k}"].astype(np.int64) for k in range(count)]
        rs = [saved[f"r_{k}"].astype(np.int64) for k in range(count)] if residual else [None] * count
        return xs, rs, saved["gamma"].astype(np.int64), saved["beta"].astype(np.int64)


def vector_beats(config, vectors, with_last):
    """Payload ints of the ``x`` stream (``with_last``) or the ``r`` stream."""
    lanes = config.lanes
    unit = LayerNorm(config)
    data_beats = np.concatenate([np.asarray(v, dtype=np.int64)[:len(v) // lanes * lanes].reshape(-1, lanes)
                                 for v in vectors])
    if not with_last:
        return pack_beats(unit.r.payload.shape(), data_beats)
    last = np.concatenate([np.arange(len(v) // lanes) == len(v) // lanes - 1 for v in vectors])
    return pack_beats(unit.x.payload.shape(), {"data": data_beats, "last": last})


def param_beats(config, gamma, beta, second=None):
    """Payload ints of the ``params`` stream; ``second``: ``(gamma2, beta2,
    mult2, shift2)`` of a ``second_output`` unit."""
    lanes = config.lanes
    n = len(gamma) // lanes

    def rows(values):
        return np.asarray(values)[:n * lanes].reshape(n, lanes)
    fields = {"gamma": rows(gamma), "beta": rows(beta), "last": np.arange(n) == n - 1}
    if second is not None:
        gamma2, beta2, mult2, shift2 = second
        fields.update(gamma2=rows(gamma2), beta2=rows(beta2), mult2=np.full(n, mult2),
                      shift2=np.full(n, shift2))
    return pack_beats(LayerNorm(config).params.payload.shape(), fields)


def load_second(path):
    """``(gamma2, beta2, mult2, shift2)`` of a data file, or None."""
    with np.load(path) as saved:
        if "gamma2" not in saved.files:
            return None
        return (saved["gamma2"].astype(np.int64), saved["beta2"].astype(np.int64),
                int(saved["mult2"]), int(saved["shift2"]))


@cocotb.test()
async def layernorm_vectors(dut):
    spec = read_spec()
    config = LayerNormConfig(**spec["config"])
    xs, rs, gamma, beta = load_vectors(spec["data"], config.add_residual)
    expected = [layernorm_golden(config, x, r, gamma, beta) for x, r in zip(xs, rs)]
    second = load_second(spec["data"]) if config.second_output else None
    expected2 = [layernorm_second(config, x, r, *second) for x, r in zip(xs, rs)] if second else None
    lengths = [len(x) for x in xs]
    total_beats = sum(lengths) // config.lanes

    tb = StreamTB(dut, spec.get("seed", 0))
    # Every stream's driver and monitor before the reset: each drives its
    # valid (or ready) low from the start, which a four-state simulator
    # (Icarus) otherwise leaves X through the params phase.
    gap = spec.get("x_gap", 0.0)
    drivers = [StreamDriver(dut, "x", vector_beats(config, xs, True), tb.rng, gap)]
    if config.add_residual:
        drivers.append(StreamDriver(dut, "r", vector_beats(config, rs, False), tb.rng, gap))
    monitor = StreamMonitor(dut, "y", tb.rng, spec.get("y_stall", 0.0))
    params = StreamDriver(dut, "params", param_beats(config, gamma, beta, second), tb.rng)
    await tb.reset()
    await tb.run([params], [], [], timeout=4 * len(gamma) + 100, drain=2)
    model = layernorm_cycles(config, lengths)
    start = time.perf_counter()
    design = LayerNorm(config)
    last_of = {name: (lambda v, shape=getattr(design, name).payload.shape(): unpack(shape, v)["last"])
               for name in ("x", "y")}
    inputs = {"x": (drivers[0], last_of["x"])}
    if config.add_residual:
        inputs["r"] = (drivers[1], None)
    cover = StreamCoverage("layernorm", inputs, {"y": (monitor, last_of["y"])})
    cover.values("x", np.concatenate(xs), config.in_width)
    if config.add_residual:
        cover.values("r", np.concatenate(rs), config.in_width)
    cover.values("gamma", gamma, config.param_width)
    cover.values("beta", beta, config.param_width)
    cover.values("y", np.concatenate(expected), config.out_width)
    cover.bounds("length", lengths, config.lanes, config.h_max)
    first, last = await tb.run(drivers, [monitor], [total_beats], timeout=20 * model + 1000,
                               coverage=cover)
    seconds = time.perf_counter() - start
    cycles = last - first + 1

    lanes = config.lanes
    y = unpack_beats(LayerNorm(config).y.payload.shape(), monitor.received)
    values, flags = list(y["data"]), [bool(flag) for flag in y["last"]]
    outputs, outputs2, mismatches, errors, real_errors, beat = [], [], 0, [], [], 0
    for x, r, want in zip(xs, rs, expected):
        n = len(x) // lanes
        got = np.concatenate(values[beat:beat + n])
        mismatches += int(np.sum(got != want))
        mismatches += sum(flags[beat + b] != (b == n - 1) for b in range(n))
        beat += n
        outputs.append(got)
        if expected2 is not None:
            got2 = np.concatenate(list(y["data2"][beat - n:beat]))
            mismatches += int(np.sum(got2 != expected2[len(outputs) - 1]))
            outputs2.append(got2)
        errors.append(np.abs(got - layernorm_reference_int8(config, x, r, gamma, beta)))
        real_errors.append(np.abs(got * config.out_scale - np.clip(
            layernorm_float(config, x, r, gamma, beta), -128 * config.out_scale,
            127 * config.out_scale)))
    errors = np.concatenate(errors)
    real_errors = np.concatenate(real_errors)
    np.savez(spec["result_path"] + ".npz", **{f"y_{k}": y for k, y in enumerate(outputs)},
             **{f"y2_{k}": y for k, y in enumerate(outputs2)})
    stalls = bool(gap or spec.get("y_stall", 0.0))
    result = unit_result(spec, cycles=cycles, model=model, ideal=total_beats, elements=sum(lengths),
                         mismatches=mismatches, stalls=stalls, seconds=seconds, cover=cover,
                         max_abs_err=int(errors.max()), mean_abs_err=float(errors.mean()),
                         max_abs_err_real=float(real_errors.max()))
    finish(spec, result)
