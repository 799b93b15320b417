"""cocotb testbench of the emitted ``ButterflyEngine`` Verilog.

The JSON spec (see :mod:`bertforge.sim.runner`) holds ``config`` (a
:class:`ButterflyConfig` dict), ``jobs`` (commands in order), ``data`` (an
``.npz`` with ``x_re_<j>``, ``x_im_<j>`` (batch x n) for compute job ``j`` and
``w_<j>`` (log2 n x n/2 x 4) for weight job ``j``), ``seed`` and the stall
knobs ``cmd_gap``, ``x_gap``, ``w_gap`` (idle probability per beat) and
``y_stall`` (probability of ``ready`` low per cycle), and, optionally,
``reset_after``: a run cut short first, the commands and vectors (no
weights) offered for that many cycles with ``y`` held off, then a reset
(the engine's output queue holds beats then; the jobs run on the reset
engine and must be as exact as ever).

A job is ``{"mode": "linear"|"fft"|"ifft"|"weights", "n": n, "batch": B,
"mult": M, "shift": S}``; a job the hardware must reject (bad ``n`` or zero
``groups``) is sent as is and checked through the ``error`` flag.

The three input streams are driven independently (the engine pulls ``w``
and ``x`` beats as its commands ask). Every output value and ``last`` flag is
checked against the golden model.

A job marked ``"isolate": true`` starts a new *segment*: its command is
held back until every earlier output has left, so the engine starts it
empty. Within a segment the commands run back to back. Without stalls, the
cycle of every compute job's first ``x`` beat and last ``y`` beat, counted
from the segment's first ``x`` beat, must equal
:func:`~bertforge.sim.butterfly_cycles.butterfly_timeline`, and each
segment's cycles (first ``x`` beat to last ``y`` beat) must equal
:func:`~bertforge.sim.butterfly_cycles.butterfly_queue_cycles`.
Results go to ``result_path`` (JSON; ``model_cycles`` is the whole run's
model when it is one segment) and the outputs to ``result_path + ".npz"``
(``y_re_<j>``, ``y_im_<j>``). The run's functional coverage
(:mod:`bertforge.sim.funcov_tb`, ``functional_coverage``): the four
streams, the extremes of ``x`` (real and imaginary) and of the weights,
``n`` at its bounds (2 and ``n_max``) and every power of two between, every reason a command is rejected
(:func:`reject_reason`) and back-to-back commands of every pair of kinds
(the four modes and ``rejected``).
"""

import json
import time

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from bertforge.rtl.butterfly import MODES, ButterflyConfig, ButterflyEngine, command_is_valid
from bertforge.rtl.payload import pack
from bertforge.sim.payload_np import pack_beats
from bertforge.sim.butterfly_cycles import (butterfly_groups, butterfly_ideal_cycles,
                                            butterfly_queue_cycles, butterfly_timeline)
from bertforge.sim.butterfly_golden import (butterfly_fft, butterfly_linear, sqnr_db, x_beats,
                                            y_vectors)
from bertforge.sim.funcov_tb import StreamCoverage, flag_of
from bertforge.sim.stream_tb import StreamDriver, StreamMonitor, StreamTB, read_spec

#: Kinds of a command, for back-to-back pairs.
JOB_KINDS = [*MODES, "rejected"]
#: Why a command is rejected (:func:`reject_reason`).
REJECT_REASONS = ["not_pow2", "below_2", "above_n_max", "no_groups"]


def reject_reason(config, mode, n, groups):
    """Why the hardware rejects a command (one of :data:`REJECT_REASONS`),
    or None if it accepts it."""
    if command_is_valid(config, MODES[mode], n, groups):
        return None
    if n < 2:
        return "below_2"
    if n & (n - 1):
        return "not_pow2"
    return "above_n_max" if n > config.n_max else "no_groups"


def job_cover(config, jobs, arrays, cover):
    """The cover points of the ``jobs`` themselves (kinds, bounds, operands)."""
    groups = [job.get("groups", butterfly_groups(config, job.get("batch", 0)) if job.get("batch") else 0)
              for job in jobs]
    reasons = [reject_reason(config, job["mode"], job["n"], g) for job, g in zip(jobs, groups)]
    cover.pairs("job", [job["mode"] if r is None else "rejected" for job, r in zip(jobs, reasons)],
                JOB_KINDS)
    cover.kinds("rejected", [r for r in reasons if r], REJECT_REASONS)
    accepted = [job["n"] for job, r in zip(jobs, reasons) if r is None]
    cover.bounds("n", accepted, 2, config.n_max)
    cover.kinds("n", [str(n) for n in accepted], [str(1 << i) for i in range(1, config.log_n_max + 1)])
    xs = [arrays[key].ravel() for key in arrays if key.startswith("x_")]
    ws = [arrays[key].ravel() for key in arrays if key.startswith("w_")]
    cover.values("x", np.concatenate(xs) if xs else [], config.width)
    cover.values("w", np.concatenate(ws) if ws else [], config.weight_width)
from bertforge.rtl.errors import ParameterError


def plan(config, jobs, arrays):
    """Beats of the three streams, and per compute job the golden result."""
    engine = ButterflyEngine(config)
    cmd_layout, w_layout = engine.cmd.payload.shape(), engine.w.payload.shape()
    cmd_beats, w_beats, x_all, expected = [], [], [], []
    memory = np.zeros((config.log_n_max, config.n_max // 2, 4), dtype=np.int64)
    for j, job in enumerate(jobs):
        mode, n = job["mode"], job["n"]
        m = n.bit_length() - 1
        batch = job.get("batch", 0)
        groups = job.get("groups", butterfly_groups(config, batch) if batch else 0)
        ok = command_is_valid(config, MODES[mode], n, groups)
        cmd_beats.append(pack(cmd_layout, {"mode": MODES[mode], "n": n, "groups": groups,
                                           "shift": job.get("shift", 0), "mult": job.get("mult", 1)}))
        if not ok:
            expected.append({"job": j, "rejected": True})
            continue
        if mode == "weights":
            weights = arrays[f"w_{j}"]
            memory[:m, : n // 2] = weights
            w_beats += pack_beats(w_layout, weights.reshape(-1, 4))
            expected.append({"job": j, "weights": True})
            continue
        re, im = arrays[f"x_re_{j}"], arrays[f"x_im_{j}"]
        lo, hi = -(1 << (config.width - 1)), (1 << (config.width - 1)) - 1
        if re.shape != im.shape or re.shape != (batch, n) or min(re.min(), im.min()) < lo \
                or max(re.max(), im.max()) > hi:
            raise ParameterError(f"job {j}: x must be {batch} x {n} values in [{lo}, {hi}]")
        x_all += x_beats(config, re, im)
        if mode == "linear":
            out_re = butterfly_linear(config, re, memory[:m, : n // 2], job.get("mult", 1),
                                      job.get("shift", 0))
            out_im = np.zeros_like(out_re)
        else:
            out_re, out_im = butterfly_fft(config, re, im, inverse=mode == "ifft")
        expected.append({"job": j, "mode": mode, "n": n, "batch": batch, "re": out_re,
                         "im": out_im, "beats": groups * n, "x_re": re, "x_im": im})
    return cmd_beats, w_beats, x_all, expected


@cocotb.test()
async def butterfly_jobs(dut):
    spec = read_spec()
    config = ButterflyConfig(**spec["config"])
    jobs = spec["jobs"]
    with np.load(spec["data"]) as saved:
        arrays = {key: saved[key] for key in saved.files}
    cmd_beats, w_beats, x_all, expected = plan(config, jobs, arrays)
    computes = [e for e in expected if "beats" in e]
    total_out = sum(e["beats"] for e in computes)

    tb = StreamTB(dut, spec.get("seed", 0))
    await tb.reset()
    taken = None
    if spec.get("reset_after"):
        taken = await tb.reset_mid_stream([StreamDriver(dut, "cmd", cmd_beats, tb.rng),
                                           StreamDriver(dut, "x", x_all, tb.rng)],
                                          [StreamMonitor(dut, "y", tb.rng)], spec["reset_after"])
    cmd = StreamDriver(dut, "cmd", cmd_beats, tb.rng, spec.get("cmd_gap", 0.0))
    wdrv = StreamDriver(dut, "w", w_beats, tb.rng, spec.get("w_gap", 0.0))
    xdrv = StreamDriver(dut, "x", x_all, tb.rng, spec.get("x_gap", 0.0))
    ymon = StreamMonitor(dut, "y", tb.rng, spec.get("y_stall", 0.0))
    drivers = [cmd, wdrv, xdrv]
    cover = StreamCoverage("butterfly", {"cmd": (cmd, None), "w": (wdrv, None), "x": (xdrv, None)},
                           {"y": (ymon, flag_of(ButterflyEngine(config).y.payload.shape()))},
                           fixed_rows=("y",))    # a job's n * groups >= 2 beats
    job_cover(config, jobs, arrays, cover)
    ideal = sum(butterfly_ideal_cycles(config, e["n"], e["batch"]) for e in computes)
    starts = [j for j, job in enumerate(jobs) if j == 0 or job.get("isolate")]
    segments = [list(range(a, b)) for a, b in zip(starts, starts[1:] + [len(jobs)])]
    model = butterfly_queue_cycles(config, jobs) if len(segments) == 1 else None
    if not computes:
        raise AssertionError("the spec has no compute job")
    timeout = 40 * (ideal + sum(2 * e["n"] for e in computes)) + 2000 * len(jobs) + 2000

    # A job with "isolate" waits (its command is held back) until every
    # earlier output has left, so its own cycles can be measured.
    outputs_before, x_start, running_x, running_y = [], [], 0, 0
    for job, e in zip(jobs, expected):
        outputs_before.append(running_y)
        x_start.append(running_x)
        if "beats" in e:
            running_x += e["beats"]
            running_y += e["beats"]
    x_cycles, y_cycles = [], []
    error_checks = []   # (job index, cycle at which to read error)
    error_seen = []
    cycle = 0
    start = time.perf_counter()

    def drive_all():
        j = cmd.sent
        held = (not cmd.done and not cmd.offering and jobs[j].get("isolate")
                and len(ymon.received) < outputs_before[j])
        if held:
            cmd.valid.value = 0
        else:
            cmd.drive()
        wdrv.drive()
        xdrv.drive()
        ymon.drive()

    drive_all()
    while not (all(d.done for d in drivers) and len(ymon.received) >= total_out
               and not error_checks):
        if cycle >= timeout:
            raise AssertionError(
                f"timeout after {cycle} cycles: sent cmd {cmd.sent}/{len(cmd_beats)}, "
                f"w {wdrv.sent}/{len(w_beats)}, x {xdrv.sent}/{len(x_all)}, "
                f"received {len(ymon.received)}/{total_out}")
        await RisingEdge(dut.clk)
        while error_checks and error_checks[0][1] == cycle:
            error_seen.append((error_checks.pop(0)[0], int(dut.error.value)))
        index = cmd.sent
        if cmd.sample():
            error_checks.append((index, cycle + 1))
        if xdrv.sample():
            x_cycles.append(cycle)
        wdrv.sample()
        cover.sample()
        if ymon.sample():
            y_cycles.append(cycle)
        drive_all()
        cycle += 1
    for _ in range(64):
        ymon.drive(force_ready=True)
        await RisingEdge(dut.clk)
        ymon.sample()
    seconds = time.perf_counter() - start
    stalls = any(spec.get(key, 0.0) for key in ("cmd_gap", "x_gap", "w_gap", "y_stall"))

    problems = []
    if len(ymon.received) != total_out:
        problems.append(f"expected {total_out} output beats, got {len(ymon.received)}")
    for j, value in error_seen:
        want = int(bool(expected[j].get("rejected")))
        if value != want:
            problems.append(f"job {j}: error flag {value} after its command, expected {want}")
    mismatches, offset, outputs, per_job, spans = 0, 0, {}, [], {}
    for e in computes:
        payloads = ymon.received[offset:offset + e["beats"]]
        offset += e["beats"]
        if len(payloads) < e["beats"]:
            mismatches += e["beats"] - len(payloads)
            continue
        re, im, last = y_vectors(config, payloads, e["batch"], e["n"])
        bad = int(np.sum(re != e["re"]) + np.sum(im != e["im"]))
        bad += sum(flag != (k == len(last) - 1) for k, flag in enumerate(last))
        mismatches += bad
        outputs[f"y_re_{e['job']}"], outputs[f"y_im_{e['job']}"] = re, im
        j = e["job"]
        span = (x_cycles[x_start[j]], y_cycles[outputs_before[j] + e["beats"] - 1])
        spans[j] = span
        info = {"job": j, "mode": e["mode"], "n": e["n"], "batch": e["batch"],
                "mismatches": bad, "cycles": span[1] - span[0] + 1,
                "ideal_cycles": butterfly_ideal_cycles(config, e["n"], e["batch"])}
        if e["mode"] != "linear":
            info["sqnr_db"] = sqnr_db(config, e["x_re"], e["x_im"], re, im, e["mode"] == "ifft")
        per_job.append(info)
    # Cycle model, per segment: each job's first x and last y beat, counted
    # from the segment's first x beat.
    by_job = {info["job"]: info for info in per_job}
    segment_results = []
    for segment in segments:
        timeline = butterfly_timeline(config, [jobs[j] for j in segment])
        model_spans = {j: t for j, t in zip(segment, timeline) if t is not None}
        if not model_spans or any(j not in spans for j in model_spans):
            continue
        first = min(model_spans)
        origin, model_origin = spans[first][0], model_spans[first][0]
        for j, (x_model, y_model) in model_spans.items():
            got = (spans[j][0] - origin, spans[j][1] - origin)
            want = (x_model - model_origin, y_model - model_origin)
            by_job[j]["model_cycles"] = want[1] - want[0] + 1
            if not stalls and got != want:
                problems.append(f"job {j}: first x / last y beat at cycles {got} of its segment, "
                                f"cycle model says {want}")
        last = max(model_spans)
        segment_results.append({
            "jobs": [segment[0], segment[-1]], "cycles": spans[last][1] - origin + 1,
            "model_cycles": butterfly_queue_cycles(config, [jobs[j] for j in segment])})
        if not stalls and segment_results[-1]["cycles"] != segment_results[-1]["model_cycles"]:
            problems.append(f"jobs {segment[0]}..{segment[-1]}: measured "
                            f"{segment_results[-1]['cycles']} cycles, cycle model says "
                            f"{segment_results[-1]['model_cycles']}")
    np.savez(spec["result_path"] + ".npz", **outputs)
    cycles = y_cycles[-1] - x_cycles[0] + 1 if x_cycles and y_cycles else None
    result = {
        "cycles": cycles,
        "model_cycles": model,
        "model_checked": sum("model_cycles" in info for info in per_job) if not stalls else 0,
        "segments": segment_results,
        "ideal_cycles": ideal,
        "utilization": ideal / cycles if cycles else None,
        "match": mismatches == 0 and not problems,
        "mismatches": mismatches,
        "problems": problems,
        "errors_checked": len(error_seen),
        "stalls": bool(stalls),
        "jobs": per_job,
        "sim_cycles_per_second": cycle / seconds,
        "outputs": spec["result_path"] + ".npz",
        "functional_coverage": cover.report(),
        **({"beats_before_reset": taken} if taken else {}),
    }
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)
    assert not problems, "; ".join(problems)
    assert mismatches == 0, f"{mismatches} output values or last flags differ from the golden model"
