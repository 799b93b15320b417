"""cocotb testbench of the emitted ``Gelu`` Verilog.

Spec (see :mod:`bertforge.sim.runner`): ``config`` (a :class:`GeluConfig` as
a dict), ``data`` (an ``.npz`` with ``x``: rows x L integers, L a multiple of
``lanes``; each row ends with ``last``; with ``channel_scales`` also
``words``, L scale words, loaded on ``scales`` first), ``seed``, ``x_gap`` (idle
probability per input beat), ``y_stall`` (probability of ``ready`` low per
cycle).

It streams the rows back to back, checks every output element and ``last``
flag against :func:`bertforge.sim.gelu_golden.gelu_golden` and, without gaps
or stalls, the cycles against :func:`bertforge.sim.gelu_cycles.gelu_cycles`.
It also measures the error of the output (real units) against float GELU of
the dequantized input. Results go to ``result_path``, outputs to
``result_path`` + ``.npz`` (``y``), and the run's functional coverage
(:mod:`bertforge.sim.funcov_tb`) as ``functional_coverage``.
"""

import time

import cocotb
import numpy as np

from bertforge.rtl.gelu import GELU_Y, Gelu, GeluConfig
from bertforge.rtl.payload import unpack
from bertforge.sim.payload_np import pack_beats, unpack_beats
from bertforge.sim.gelu_cycles import gelu_cycles
from bertforge.sim.fixed_golden import split_scale_words
from bertforge.sim.gelu_golden import gelu_float, gelu_golden
from bertforge.sim.funcov_tb import StreamCoverage
from bertforge.sim.stream_tb import finish, StreamDriver, StreamMonitor, StreamTB, read_spec, unit_result


def gelu_beats(config, x):
    """Payload ints of the ``x`` stream for rows ``x`` (rows x L)."""
    x = np.asarray(x, dtype=np.int64)
    per_row = x.shape[1] // config.lanes
    last = np.arange(x.shape[0] * per_row) % per_row == per_row - 1
    return pack_beats(Gelu(config).x.payload.shape(),
                      {"data": x.reshape(-1, config.lanes), "last": last})


@cocotb.test()
async def gelu_rows(dut):
    spec = read_spec()
    config = GeluConfig(**spec["config"])
    with np.load(spec["data"]) as saved:
        x = saved["x"].astype(np.int64)
        words = saved["words"].astype(np.int64) if config.channel_scales else None
    rows, length = x.shape
    beats = gelu_beats(config, x)
    expected = gelu_golden(config, x, words)

    tb = StreamTB(dut, spec.get("seed", 0))
    if words is not None:       # idle before the reset (see layernorm_tb), loaded first
        n = length // config.lanes
        scales = StreamDriver(dut, "scales", pack_beats(
            Gelu(config).scales.payload.shape(),
            {"words": words.reshape(n, config.lanes), "last": np.arange(n) == n - 1}), tb.rng)
    await tb.reset()
    if words is not None:
        await tb.run([scales], [], [], timeout=4 * length + 100, drain=2)
    driver = StreamDriver(dut, "x", beats, tb.rng, spec.get("x_gap", 0.0))
    monitor = StreamMonitor(dut, "y", tb.rng, spec.get("y_stall", 0.0))
    model = gelu_cycles(config, len(beats))
    start = time.perf_counter()
    layouts = Gelu(config).x.payload.shape(), Gelu(config).y.payload.shape()
    cover = StreamCoverage("gelu", {"x": (driver, lambda v: unpack(layouts[0], v)["last"])},
                           {"y": (monitor, lambda v: unpack(layouts[1], v)["last"])})
    cover.values("x", x, config.in_width)
    cover.values("y", expected, config.out_width)
    first, last = await tb.run([driver], [monitor], [len(beats)], timeout=20 * model + 1000,
                               coverage=cover)
    seconds = time.perf_counter() - start
    cycles = last - first + 1

    y = unpack_beats(Gelu(config).y.payload.shape(), monitor.received)
    got, flags = y["data"].reshape(rows, length), [bool(flag) for flag in y["last"]]
    per_row = length // config.lanes
    flag_errors = sum(flag != ((i % per_row) == per_row - 1) for i, flag in enumerate(flags))
    mismatches = int(np.sum(got != expected)) + flag_errors
    out_scale = config.out_scale
    if words is not None:       # the real value of each channel's output LSB
        mult, shift = (np.asarray(v, dtype=np.float64) for v in split_scale_words(words))
        out_scale = 2.0 ** (shift - GELU_Y.frac_bits) / mult
    err = np.abs(got * out_scale - gelu_float(x * config.in_scale))
    np.savez(spec["result_path"] + ".npz", y=got)
    stalls = bool(spec.get("x_gap", 0.0) or spec.get("y_stall", 0.0))
    result = unit_result(spec, cycles=cycles, model=model, ideal=len(beats), elements=x.size,
                         mismatches=mismatches, stalls=stalls, seconds=seconds, cover=cover,
                         max_abs_err=float(err.max()), mean_abs_err=float(err.mean()))
    finish(spec, result)
