"""cocotb testbench of the emitted :class:`~bertforge.sim.encoder_harness.EncoderHarness`.

Spec keys: ``config`` (an EncoderConfig dict), ``image`` (``.npy``, the
initial memory: every layer's weights), ``abits``, ``mem_bytes``,
``programs`` (per run, one list of sequencer command dicts per layer, GEMM
fields under ``gemm``), ``inputs`` (optional, per run: the bytes written at
``input_addr`` before it, a sentence's layer-0 input), ``read_bytes`` (how
much memory to read back after each run), ``seed`` and the memory knobs
``lat_min``, ``lat_mask``, ``p_req``, ``p_data``, ``p_wr``; ``errors``
(optional, per run and layer): the error flags the commands must end
with (default none: a command the engine rejects fails the run).

Python loads the memory once; per run it writes the input, then per layer
clears the harness's counts, queues the layer's commands and waits with a
timer (no Python on the cycles in between), and reads memory back at the
end of the run. The results (per run and layer ``cycles``, per command
``starts``/``ends`` stamps and ``errors``, and ``high``: the harness's
``rd_high`` and ``wr_high``, the request addresses' bits above the memory
summed, ``[0, 0]`` when every request is inside it) go to ``result_path``, each
run's memory to ``result_path + ".<run>.npy"``. Comparing with the golden
model is the caller's (:func:`bertforge.generators.encoder_sim.simulate_encoder`,
:func:`bertforge.generators.model_sim.encode`). The functional coverage
(``functional_coverage``, :mod:`bertforge.sim.funcov_tb`): the top's streams
(the harness's HDL cover bits), back-to-back commands of every pair of
operations, and a GEMM after a GEMM with and without a barrier.
"""

import json
import os

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from bertforge.rtl.encoder import (OP_GELU, OP_GEMM, OP_LAYERNORM, OP_SOFTMAX, EncoderConfig,
                                   encoder_command_layout)
from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.payload import pack
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.encoder_harness import COVER_STREAMS
from bertforge.sim.funcov_tb import Coverage
from bertforge.sim.gemm_tb import read_memory, run_to_completion, start_harness
from bertforge.sim.stream_tb import read_spec

KNOBS = ("lat_min", "lat_mask", "p_req", "p_data", "p_wr")
#: The sequencer's operations by ``op`` code.
OPS = {OP_GEMM: "gemm", OP_SOFTMAX: "softmax", OP_LAYERNORM: "layernorm", OP_GELU: "gelu"}


def encoder_coverage(programs, bits):
    """The cover points of a run's ``programs`` (lists of command dicts)
    and the harness's HDL cover ``bits``."""
    cover = Coverage("encoder")
    cover.hdl_streams(COVER_STREAMS, bits)
    # one point over every program (a point sampled again starts afresh);
    # no pair across two programs (the harness runs one after the other)
    pairs, after_gemm = [], []
    for program in programs:
        ops = [OPS[int(c.get("op", 0))] for c in program]
        pairs += [f"{a}>{b}" for a, b in zip(ops, ops[1:])]
        # a GEMM after a GEMM: overlapped with it (no barrier) or waiting (barrier)
        after_gemm += ["barrier" if c.get("barrier") else "overlapped"
                       for prev, c in zip(program, program[1:])
                       if int(prev.get("op", 0)) == int(c.get("op", 0)) == OP_GEMM]
    names = list(OPS.values())
    cover.kinds("op.pairs", pairs, [f"{a}>{b}" for a in names for b in names])
    cover.kinds("gemm_after_gemm", after_gemm, ["overlapped", "barrier"])
    return cover


def config_from_dict(spec):
    return EncoderConfig(gemm=GemmConfig(**spec["gemm"]), softmax=SoftmaxConfig(**spec["softmax"]),
                         layernorm=LayerNormConfig(**spec["layernorm"]), gelu=GeluConfig(**spec["gelu"]))


@cocotb.test()
async def encoder_layers(dut):
    spec = read_spec()
    config = config_from_dict(spec["config"])
    layout = encoder_command_layout(config)
    runs = spec["programs"]
    inputs = spec.get("inputs")
    image = np.load(spec["image"]).astype(np.uint8)
    mb = int(spec["mem_bytes"])
    assert image.size == 1 << int(spec["abits"])
    timeout = int(spec.get("timeout", 0)) or 20_000_000

    dut.stamp_sel.value = 0
    dut.clear.value = 0
    await start_harness(dut, spec, {key: int(spec.get(key, 0)) for key in KNOBS}, image, mb, [])
    words = -(-int(spec["read_bytes"]) // mb)
    results, failures = [], []
    for run, programs in enumerate(runs):
        if inputs is not None:
            data_in = np.load(inputs[run]).astype(np.uint8)
            base = int(spec["input_addr"]) // mb
            dut.host_we.value = 1
            for index, word in enumerate(data_in.reshape(-1, mb)):
                dut.host_addr.value = base + index
                dut.host_wdata.value = int.from_bytes(word.tobytes(), "little")
                await RisingEdge(dut.clk)
            dut.host_we.value = 0
        layers = []
        for number, commands in enumerate(programs):
            layers.append(await _run_program(dut, layout, commands, timeout))
            want = spec["errors"][run][number] if "errors" in spec else [False] * len(commands)
            if layers[-1]["completions"] != len(commands) or layers[-1]["errors"] != want:
                failures.append(f"run {run}, layer {number}: {layers[-1]['completions']} completions "
                                f"for {len(commands)} commands, errors {layers[-1]['errors']}")
        got = image.copy()
        got[:words * mb] = await read_memory(dut, words, mb)
        path = f"{spec['result_path']}.{run}.npy"
        np.save(path, got[:words * mb])
        results.append({"layers": layers, "image": path})
        cover = encoder_coverage([p for programs in runs[:run + 1] for p in programs],
                                 int(dut.cover.value))
        with open(spec["result_path"] + ".tmp", "w") as f:   # after every run: a long run's
            json.dump({"runs": results, "functional_coverage": cover.report()}, f)
        os.replace(spec["result_path"] + ".tmp", spec["result_path"])   # finished part survives
    assert not failures, failures[0]


async def _run_program(dut, layout, commands, timeout):
    """Clear the harness, queue ``commands``, run them; their stamps."""
    dut.clear.value = 1
    await RisingEdge(dut.clk)
    dut.clear.value = 0
    dut.cmd_push.value = 1
    for cmd in commands:
        dut.cmd_data.value = pack(layout, cmd)
        await RisingEdge(dut.clk)
    dut.cmd_push.value = 0
    await RisingEdge(dut.clk)
    _, seconds, cycles, completions, errors = await run_to_completion(dut, commands, timeout)
    starts, ends = [], []
    for index in range(len(commands)):
        dut.stamp_sel.value = index
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)
        starts.append(int(dut.stamp_start.value))
        ends.append(int(dut.stamp_end.value))
    return {"cycles": cycles, "completions": completions, "errors": errors, "starts": starts,
            "ends": ends, "sim_seconds": seconds,
            "high": [int(dut.rd_high.value), int(dut.wr_high.value)]}
