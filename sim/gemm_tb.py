"""cocotb testbench of the emitted :class:`~bertforge.sim.gemm_harness.GemmHarness`.

Spec keys (JSON, see :mod:`bertforge.sim.runner`): ``config`` (a GemmConfig
dict), ``image`` (``.npy`` of ``2**addr_width`` bytes: initial memory),
``commands`` (list of command dicts: ``m, k, n, a_addr, ...``, ``tag``),
``seed``, memory behaviour ``lat_min``, ``lat_mask``, ``p_req``, ``p_data``,
``p_wr``, ``p_cmd``, ``p_done`` (stall probabilities in 1/256), ``bw``
(read bytes per cycle, 0 = a beat per cycle).

Python only loads memory and commands, waits (a timer, polling at most
every 8192 cycles) and reads memory back; the whole memory image is compared with the
golden model's (:func:`bertforge.sim.gemm_golden.run_commands`), as are the
completions' error flags and tags. With a fixed latency and no stalls the
measured cycles must equal :func:`bertforge.sim.gemm_cycles.gemm_cycles`
where it is exact (``model_exact``). The run's functional coverage
(:func:`engine_coverage`) goes into the result as ``functional_coverage``.
"""

import json
import time

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, Timer

from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.payload import unpack
from bertforge.rtl.tile_scheduler import pack_command
from bertforge.sim.gemm_cycles import gemm_cycles, ideal_cycles
from bertforge.sim.funcov_tb import Coverage
from bertforge.sim.gemm_golden import (command_rejected, matrix_view, operand_dtype, output_dtype,
                                       run_commands)
from bertforge.sim.gemm_harness import COVER_STREAMS, MAX_COMMANDS
from bertforge.sim.stream_tb import read_spec

#: Why a command is rejected (:func:`reject_reason`).
REJECT_REASONS = ["size0", "address", "format"]
#: Address bounds: A's or C's last byte the memory's last (accepted) or one
#: past it (rejected).
ADDRESS_BOUNDS = ["a_at_top", "a_past_top", "c_at_top", "c_past_top"]

KNOBS = ("lat_min", "lat_mask", "p_req", "p_data", "p_wr", "p_cmd", "p_done", "bw")


async def load_memory(dut, image, mem_bytes):
    words = image.reshape(-1, mem_bytes)
    nonzero = np.flatnonzero(words.any(axis=1))
    dut.host_we.value = 1
    for index in nonzero.tolist():
        dut.host_addr.value = index
        dut.host_wdata.value = int.from_bytes(words[index].tobytes(), "little")
        await RisingEdge(dut.clk)
    dut.host_we.value = 0


async def read_memory(dut, words, mem_bytes):
    out = bytearray(words * mem_bytes)
    dut.host_addr.value = 0
    await RisingEdge(dut.clk)
    for index in range(words):
        dut.host_addr.value = min(index + 1, words - 1)
        await RisingEdge(dut.clk)
        raw = int(dut.host_rdata.value)
        out[index * mem_bytes:(index + 1) * mem_bytes] = raw.to_bytes(mem_bytes, "little")
    return np.frombuffer(bytes(out), dtype=np.uint8)


async def start_harness(dut, spec, knobs, image, mem_bytes, payloads):
    """Start a memory-and-commands harness (the GEMM engine's, the
    encoder's): clock, ``seed`` and ``knobs`` (port name -> value), reset,
    the memory ``image``, then the command ``payloads`` (ints) pushed one a
    cycle; ``go`` stays low."""
    Clock(dut.clk, 10, unit="ns").start()
    dut.go.value = 0
    dut.host_we.value = 0
    dut.cmd_push.value = 0
    dut.seed.value = int(spec.get("seed", 0)) & 0xFFFFFFFF
    for key, value in knobs.items():
        getattr(dut, key).value = value
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await load_memory(dut, image, mem_bytes)
    dut.cmd_push.value = 1
    for payload in payloads:
        dut.cmd_data.value = payload
        await RisingEdge(dut.clk)
    dut.cmd_push.value = 0
    await RisingEdge(dut.clk)


async def wait_finished(dut, commands, timeout):
    """Wait, on a timer (no Python runs on the cycles in between), until
    the harness's ``finished`` rises; returns ``(cycles waited, seconds)``."""
    start = time.perf_counter()
    waited = 0
    step = 256
    while not dut.finished.value:
        await Timer(10 * step, unit="ns")
        waited += step
        step = min(2 * step, 8192)
        assert waited < timeout, (f"timeout after {waited} cycles: "
                                  f"{int(dut.completions.value)}/{len(commands)} completions")
    return waited, time.perf_counter() - start


async def run_to_completion(dut, commands, timeout):
    """Start the harness's queued ``commands`` (``go``), wait until they have
    finished and 63 cycles more (nothing may happen after the last
    completion); returns ``(cycles waited, seconds, cycles, completions,
    errors)``: the harness's counters and each command's error flag."""
    dut.go.value = 1
    waited, seconds = await wait_finished(dut, commands, timeout)
    # Nothing may happen after the last completion. 63: ``go`` is then high
    # an odd number of cycles (the waits above are even), so a harness cover
    # bit that toggles instead of sticking ends set.
    await ClockCycles(dut.clk, 63)
    dut.go.value = 0
    cycles = int(dut.cycles.value)
    completions = int(dut.completions.value)
    errors = [bool(e) for e in unpack(data.ArrayLayout(1, len(commands)), int(dut.errors.value))]
    return waited, seconds, cycles, completions, errors


def command_kinds(config):
    """Kinds of a command, for back-to-back pairs: its output (int32, or a
    bf16 engine's float32 / bfloat16; int8, int16), accumulate, rejected."""
    return ["int32", "accumulate", "rejected"] if config.bf16 else [
        "int32", "accumulate", "int8", "int16", "rejected"]


def command_kind(cmd, rejected):
    if rejected:
        return "rejected"
    return next((key for key in ("accumulate", "int8", "int16") if cmd.get(key)), "int32")


def reject_reason(config, cmd, reject):
    """Why ``reject(config, cmd)`` (the golden model's rule) rejects
    ``cmd``: a size of 0, an operand or result that leaves memory (accepted
    with every address and stride 0), or a format the engine does not
    have (the rest: output types, patterns)."""
    if min(int(cmd.get(key, 0)) for key in "mkn") == 0:
        return "size0"
    at_zero = {key: 0 for key in cmd if key.endswith("_addr") or key.endswith("_stride")}
    return "address" if not reject(config, dict(cmd, **at_zero)) else "format"


def engine_coverage(block, config, commands, errors, image, bits, reject):
    """The functional coverage of an engine's run: the streams (the
    harness's HDL ``bits``), back-to-back commands of every pair of kinds
    (:func:`command_kinds`), every reason of rejection
    (:func:`reject_reason`), A and C at the top of memory and one past it
    (:data:`ADDRESS_BOUNDS`), and the extremes of A's operands in the
    ``image`` (integer engines)."""
    cover = Coverage(block)
    cover.hdl_streams(COVER_STREAMS, bits)
    cover.pairs("command", [command_kind(c, e) for c, e in zip(commands, errors)],
                command_kinds(config))
    cover.kinds("rejected", [reject_reason(config, c, reject) for c, e in zip(commands, errors) if e],
                REJECT_REASONS)
    top, esize, edges = 1 << config.addr_width, operand_dtype(config).itemsize, []
    for c, e in zip(commands, errors):
        f = {key: int(c.get(key, 0)) for key in ("m", "k", "n", "a_addr", "a_stride", "c_addr",
                                                "c_stride")}
        if min(f["m"], f["k"], f["n"]) == 0:
            continue
        ends = {"a": f["a_addr"] + (f["m"] - 1) * f["a_stride"] + f["k"] * esize,
                "c": f["c_addr"] + (f["m"] - 1) * f["c_stride"]
                     + f["n"] * output_dtype(c, config).itemsize}
        edges += [f"{x}_at_top" for x, end in ends.items() if end == top and not e]
        edges += [f"{x}_past_top" for x, end in ends.items() if end == top + 1 and e]
    cover.kinds("address", edges, ADDRESS_BOUNDS)
    if not config.bf16:
        cover.values("a", np.concatenate(
            [matrix_view(image, int(c.get("a_addr", 0)), int(c.get("a_stride", 0)), int(c["m"]),
                         int(c["k"]), operand_dtype(config)).ravel()
             for c, e in zip(commands, errors) if not e] or [[]]), config.width)
    return cover


@cocotb.test()
async def gemm_commands(dut):
    spec = read_spec()
    await run_engine(dut, spec, GemmConfig(**spec["config"]), pack=pack_command, golden=run_commands,
                     cycle_model=gemm_cycles, ideal=ideal_cycles, block="gemm",
                     reject=command_rejected)


async def run_engine(dut, spec, config, *, pack, golden, cycle_model, ideal, block, reject):
    """Run ``spec`` on a GEMM-engine harness: ``pack`` packs a command,
    ``golden`` runs the commands on a memory image, ``cycle_model`` and
    ``ideal`` predict the cycles (as :func:`gemm_cycles`, :func:`ideal_cycles`);
    the functional coverage's points are named ``block.*`` and ``reject``
    is the golden model's rule for a rejected command (a command dict)."""
    commands = spec["commands"]
    assert 1 <= len(commands) <= MAX_COMMANDS
    image = np.load(spec["image"]).astype(np.uint8)
    assert image.size == 1 << config.addr_width
    knobs = {key: int(spec.get(key, 0)) for key in KNOBS}
    await start_harness(dut, spec, knobs, image, config.mem_bytes,
                        [pack(config, cmd) for cmd in commands])

    expected_image = image.copy()
    expected_errors = golden(config, expected_image, commands)
    # an SDRAM memory (spec "sdram_bw", its sustained bandwidth): the model at that bandwidth
    model = cycle_model(config, commands, lat=knobs["lat_min"], bw=knobs["bw"] or spec.get("sdram_bw", 0))
    timeout = int(spec.get("timeout", 0)) or 50 * (model["cycles"] + 2000)

    waited, seconds, cycles, completions, errors = await run_to_completion(dut, commands, timeout)
    tags = unpack(data.ArrayLayout(8, min(8, len(commands))), int(dut.tags.value))
    cover = engine_coverage(block, config, commands, expected_errors, image, int(dut.cover.value),
                            reject)

    # Read back only what can have changed: up to the last byte of data or of a C matrix.
    used = max([int(np.flatnonzero(image)[-1]) + 1 if image.any() else 0]
               + [c["c_addr"] + (c["n"] if c.get("transpose_c") and config.transpose_c else c["m"])
                  * c["c_stride"] for c, e in zip(commands, expected_errors) if not e])
    words = min(image.size // config.mem_bytes, -(-used // config.mem_bytes))
    got = image.copy()
    got[:words * config.mem_bytes] = await read_memory(dut, words, config.mem_bytes)
    np.save(spec["result_path"] + ".npy", got)
    mismatches = int(np.count_nonzero(got != expected_image))
    tags_ok = tags == [int(c.get("tag", 0)) & 0xFF for c in commands[:8]]
    stalls = bool(knobs["lat_mask"] or any(knobs[k] for k in ("p_req", "p_data", "p_wr", "p_cmd", "p_done")))
    ideal_total = sum(ideal(config, c) for c, e in zip(commands, expected_errors) if not e)
    result = {
        "cycles": cycles,
        "model_cycles": model["cycles"],
        "model_exact": model["exact"],
        "bound": model["bound"],
        "ideal_cycles": ideal_total,
        "utilization": ideal_total / cycles if cycles else 0.0,
        "match": mismatches == 0 and errors == expected_errors and completions == len(commands) and tags_ok,
        "mismatches": mismatches,
        "errors": errors,
        "expected_errors": expected_errors,
        "completions": completions,
        "tags_ok": tags_ok,
        "stalls": stalls,
        "sim_cycles_per_second": waited / seconds if seconds > 0 else 0.0,   # all simulated
        "image": spec["result_path"] + ".npy",
        "functional_coverage": cover.report(),
    }
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)
    assert completions == len(commands), f"{completions} completions for {len(commands)} commands"
    assert errors == expected_errors, f"error flags {errors}, expected {expected_errors}"
    assert tags_ok, f"completion tags {tags}"
    assert mismatches == 0, f"{mismatches} memory bytes differ from the golden model"
    if not stalls and model["exact"]:
        assert cycles == model["cycles"], f"measured {cycles} cycles, cycle model says {model['cycles']}"
