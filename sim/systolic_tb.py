"""cocotb testbench of the emitted ``SystolicArray`` Verilog.

Parameters come from the JSON spec (see :mod:`bertforge.sim.runner`):
``config`` (a :class:`SystolicConfig` as a dict), ``data`` (an ``.npz`` with
``a_0, b_0, a_1, b_1, ...``, one pair per tile, shaped as
:func:`bertforge.sim.systolic_golden.systolic_golden` takes them, as the
integers the streams carry: bf16 bit patterns with ``arith="bf16"``), ``seed``,
``a_gap``/``b_gap`` (idle probability per beat) and ``c_stall`` (probability
of ``ready`` low per cycle).

It drives the tiles back to back, checks every output row and ``last`` flag
against the golden model and, with no gaps or stalls, the measured cycles
against the cycle model. Results (``cycles``, ``model_cycles``, ``match``, ...)
go to ``result_path``; outputs to ``result_path`` with ``.npz``; the run's
functional coverage (:mod:`bertforge.sim.funcov_tb`: the streams, operand
extremes of integer arrays, and back-to-back tiles of every pair of kinds
of K, see :func:`k_kinds`) as ``functional_coverage``.
"""

import time

import cocotb
import numpy as np

from bertforge.sim.payload_np import pack_beats, unpack_beats
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim.systolic_cycles import systolic_cycles
from bertforge.sim.systolic_golden import operands_from_words, result_words, systolic_golden
from bertforge.sim.funcov_tb import StreamCoverage, flag_of
from bertforge.sim.stream_tb import finish, StreamDriver, StreamMonitor, StreamTB, read_spec


def k_kinds(rows):
    """Kinds of a tile's streaming length K for ``rows`` array rows: ``1``,
    ``short`` (2 to ``rows``: no longer than the skew) and ``long``."""
    return ["1", "short", "long"] if rows > 1 else ["1", "long"]


def k_kind(rows, k):
    return "1" if k == 1 else "short" if k <= rows else "long"


def load_tiles(data):
    """``(a, b)`` per tile of ``data`` (name -> array: ``a_0, b_0, a_1, ...``)."""
    count = len([key for key in data if key.startswith("a_")])
    return [(data[f"a_{t}"], data[f"b_{t}"]) for t in range(count)]


def systolic_beats(config, tiles):
    """Payload ints for the ``a`` and ``b`` streams, and per-tile K."""
    array = SystolicArray(config)
    a_data, a_last, b_rows, ks = [], [], [], []
    for a, b in tiles:
        if config.dataflow == "os":
            k = a.shape[1]
            a_data.append(np.asarray(a).T)
            b_rows.append(np.asarray(b)[:k])
        else:
            k = a.shape[0]
            a_data.append(np.asarray(a)[:k])
            b_rows.append(np.asarray(b)[:config.rows])
        a_last.append(np.arange(k) == k - 1)
        ks.append(k)
    a_beats = pack_beats(array.a.payload.shape(),
                         {"data": np.concatenate(a_data), "last": np.concatenate(a_last)})
    return a_beats, pack_beats(array.b.payload.shape(), np.concatenate(b_rows)), ks


@cocotb.test()
async def systolic_tiles(dut):
    spec = read_spec()
    config = SystolicConfig(**spec["config"])
    with np.load(spec["data"]) as data:
        tiles = load_tiles(data)
    a_beats, b_beats, ks = systolic_beats(config, tiles)
    expected = [result_words(config, systolic_golden(config, operands_from_words(config, a),
                                                     operands_from_words(config, b)))
                for a, b in tiles]
    array = SystolicArray(config)
    a_layout, c_layout = array.a.payload.shape(), array.c.payload.shape()

    def cover(a_driver, b_driver, monitor):
        # OS: a tile's R result rows; WS: one result row per a beat
        fixed = ("c",) if config.dataflow == "os" and config.rows > 1 else ()
        cover = StreamCoverage("systolic", {"a": (a_driver, flag_of(a_layout)), "b": (b_driver, None)},
                               {"c": (monitor, flag_of(c_layout))}, fixed_rows=fixed)
        if config.arith == "int":
            cover.values("a", np.concatenate([np.ravel(a) for a, _ in tiles]), config.width)
            cover.values("b", np.concatenate([np.ravel(b) for _, b in tiles]), config.width)
        cover.pairs("k", [k_kind(config.rows, k) for k in ks], k_kinds(config.rows))
        return cover

    await run_tiles(dut, spec, config, a_beats, b_beats, c_layout, expected,
                    systolic_cycles(config, ks), sum(ks), cover)


async def run_tiles(dut, spec, config, a_beats, b_beats, c_layout, expected, model, ideal, cover):
    """Drive ``a_beats``/``b_beats`` (with the spec's gaps and stalls),
    collect the ``c`` rows (payloads of ``c_layout``: ``data`` and
    ``last``), compare them and their ``last`` flags with the ``expected``
    result tiles, and write the results (``model`` and ``ideal`` cycles for
    the report and the cycle check; the functional coverage of
    ``cover(a_driver, b_driver, monitor)``, a
    :class:`~bertforge.sim.funcov_tb.StreamCoverage`, sampled every cycle)."""
    rows_expected = sum(e.shape[0] for e in expected)
    tb = StreamTB(dut, spec.get("seed", 0))
    await tb.reset()
    a_driver = StreamDriver(dut, "a", a_beats, tb.rng, spec.get("a_gap", 0.0))
    b_driver = StreamDriver(dut, "b", b_beats, tb.rng, spec.get("b_gap", 0.0))
    monitor = StreamMonitor(dut, "c", tb.rng, spec.get("c_stall", 0.0))
    coverage = cover(a_driver, b_driver, monitor)
    start = time.perf_counter()
    first, last = await tb.run([a_driver, b_driver], [monitor], [rows_expected],
                               timeout=20 * model + 1000,
                               drain=config.rows + config.cols + 32, coverage=coverage)
    cycles = last - first + 1
    seconds = time.perf_counter() - start

    c = unpack_beats(c_layout, monitor.received)
    rows, flags = c["data"], [bool(flag) for flag in c["last"]]
    outputs, mismatches, start = [], 0, 0
    for result in expected:
        n = result.shape[0]
        got = rows[start:start + n]
        outputs.append(got)
        mismatches += int(np.sum(got != result))
        mismatches += sum(flags[start + i] != (i == n - 1) for i in range(n))
        start += n
    np.savez(spec["result_path"] + ".npz", *outputs)
    stalls = any(spec.get(key, 0.0) for key in ("a_gap", "b_gap", "c_stall"))
    result = {
        "cycles": cycles,
        "model_cycles": model,
        "ideal_cycles": ideal,
        "utilization": ideal / cycles,
        "match": mismatches == 0,
        "mismatches": mismatches,
        "stalls": bool(stalls),
        "sim_cycles_per_second": cycles / seconds,
        "outputs": spec["result_path"] + ".npz",
        "functional_coverage": coverage.report(),
    }
    finish(spec, result)
