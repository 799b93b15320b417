"""cocotb testbench of the emitted ``Softmax`` Verilog.

The JSON spec (see :mod:`bertforge.sim.runner`) holds ``config`` (a
:class:`SoftmaxConfig` as a dict), ``seed`` and ``scenarios``: a list of runs
done one after another in the same simulation, each with ``data`` (an
``.npz`` with ``x`` (R x L, padded), ``mask`` (R x L bools, True =
excluded), ``lengths``, ``multipliers``, ``shifts``, ``scales``), ``x_gap``
(idle probability before each input beat) and ``y_stall`` (probability of
``ready`` low per cycle) and, optionally, ``reset_after`` (``data`` and
``cycles``): a run cut short before the scenario: those rows offered for
``cycles`` cycles with the output stalled, then a reset (the scenario then
runs on the reset block and must be as exact as ever).

Every run checks each output element and ``last`` flag against the golden
model (padding lanes must be 0), measures the error against float softmax
and, with no gaps or stalls, the cycles against the cycle model. Results go
to ``result_path`` (``{"scenarios": [...]}``); outputs to
``result_path`` + ``.<index>.npy``.
"""

import json
import time

import cocotb
import numpy as np

from amaranth.lib import data

from bertforge.rtl.payload import unpack
from bertforge.sim.payload_np import pack_beats, unpack_beats
from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.sim.softmax_cycles import softmax_beats, softmax_cycles
from bertforge.sim.softmax_golden import softmax_errors, softmax_golden
from bertforge.sim.funcov_tb import StreamCoverage
from bertforge.sim.stream_tb import StreamDriver, StreamMonitor, StreamTB, read_spec
from bertforge.rtl.errors import ParameterError


def load_rows(path):
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def softmax_input_beats(config, rows):
    """Payload ints for the ``x`` stream (padding lanes masked)."""
    lanes = config.lanes
    beats = softmax_beats(config, [int(n) for n in rows["lengths"]])
    columns = {"data": [], "mask": [], "multiplier": [], "shift": [], "last": []}
    for index, b in enumerate(beats):
        length = int(rows["lengths"][index])
        if not config.mask and length % lanes:
            raise ParameterError(f"without a mask, rows must fill whole beats of {lanes}")
        padded = np.zeros(b * lanes, dtype=np.int64)
        padded[:length] = rows["x"][index, :length]
        masked = np.ones(b * lanes, dtype=bool)
        masked[:length] = rows["mask"][index, :length]
        columns["data"].append(padded.reshape(b, lanes))
        columns["mask"].append(masked.reshape(b, lanes))
        columns["multiplier"].append(np.full(b, int(rows["multipliers"][index])))
        columns["shift"].append(np.full(b, int(rows["shifts"][index])))
        columns["last"].append(np.arange(b) == b - 1)
    value = {name: np.concatenate(parts) for name, parts in columns.items()}
    # The mask field is one bit per lane, lane 0 lowest.
    value["mask"] = pack_beats(data.ArrayLayout(1, lanes), value["mask"])
    return pack_beats(Softmax(config).x.payload.shape(), value), beats


def check_outputs(config, rows, beats, received):
    """Output rows (R x L raw ints), mismatch count against the golden model."""
    lengths = [int(n) for n in rows["lengths"]]
    golden = softmax_golden(config, rows["x"], rows["mask"], rows["multipliers"], rows["shifts"])
    y = unpack_beats(Softmax(config).y.payload.shape(), received)
    out = np.zeros(golden.shape, dtype=np.int64)
    mismatches, pos = 0, 0
    for index, b in enumerate(beats):
        values, flags = y["data"][pos:pos + b].reshape(-1), y["last"][pos:pos + b].tolist()
        pos += b
        n = lengths[index]
        out[index, :n] = values[:n]
        mismatches += int(np.sum(values[:n] != golden[index, :n]))
        mismatches += int(np.sum(values[n:] != 0))
        mismatches += sum(flag != (k == b - 1) for k, flag in enumerate(flags))
    return out, mismatches


@cocotb.test()
async def softmax_rows(dut):
    spec = read_spec()
    config = SoftmaxConfig(**spec["config"])
    tb = StreamTB(dut, spec.get("seed", 0))
    await tb.reset()
    results, failures = [], []
    for index, scenario in enumerate(spec["scenarios"]):
        cut = scenario.get("reset_after")
        taken = None
        if cut:
            cut_payloads, _ = softmax_input_beats(config, load_rows(cut["data"]))
            (taken,) = await tb.reset_mid_stream([StreamDriver(dut, "x", cut_payloads, tb.rng)],
                                                 [StreamMonitor(dut, "y", tb.rng)], cut["cycles"])
        rows = load_rows(scenario["data"])
        lengths = [int(n) for n in rows["lengths"]]
        payloads, beats = softmax_input_beats(config, rows)
        model = softmax_cycles(config, lengths)
        driver = StreamDriver(dut, "x", payloads, tb.rng, scenario.get("x_gap", 0.0))
        monitor = StreamMonitor(dut, "y", tb.rng, scenario.get("y_stall", 0.0))
        design = Softmax(config)
        shapes = design.x.payload.shape(), design.y.payload.shape()
        cover = StreamCoverage("softmax", {"x": (driver, lambda v: unpack(shapes[0], v)["last"])},
                               {"y": (monitor, lambda v: unpack(shapes[1], v)["last"])})
        valid = np.arange(rows["x"].shape[1])[None, :] < np.array(lengths)[:, None]
        cover.values("x", rows["x"][valid], config.in_width)
        step = 1 if config.mask else config.lanes
        cover.bounds("length", lengths, step, config.l_max - config.l_max % step)
        start = time.perf_counter()
        first, last = await tb.run([driver], [monitor], [len(payloads)],
                                   timeout=20 * model + 1000, drain=config.b_to_c + 16,
                                   coverage=cover)
        seconds = time.perf_counter() - start
        cycles = last - first + 1
        out, mismatches = check_outputs(config, rows, beats, monitor.received)
        valid = np.arange(out.shape[1])[None, :] < np.array(lengths)[:, None]
        max_err, mean_err = softmax_errors(config, out, rows["x"], rows["mask"] | ~valid,
                                           rows["scales"])
        outputs = f"{spec['result_path']}.{index}.npy"
        np.save(outputs, out)
        stalls = bool(scenario.get("x_gap", 0.0) or scenario.get("y_stall", 0.0))
        elements = sum(lengths)
        ideal = -(-elements // config.lanes)
        results.append({
            "rows": len(lengths), "elements": elements, "cycles": cycles, "model_cycles": model,
            "ideal_cycles": ideal, "utilization": ideal / cycles,
            "elements_per_cycle": elements / cycles, "match": mismatches == 0,
            "mismatches": mismatches, "stalls": stalls, "max_abs_err": max_err,
            "mean_abs_err": mean_err, "sim_cycles_per_second": cycles / seconds,
            "outputs": outputs, "functional_coverage": cover.report(),
            "beats_before_reset": taken})
        if mismatches:
            failures.append(f"scenario {index}: {mismatches} values or last flags differ "
                            "from the golden model")
        if not stalls and cycles != model:
            failures.append(f"scenario {index}: measured {cycles} cycles, cycle model says {model}")
    with open(spec["result_path"], "w") as f:
        json.dump({"scenarios": results}, f)
    assert not failures, "; ".join(failures)
