"""cocotb testbench of the emitted :class:`~bertforge.sim.encoder_harness.EncoderHarness`.

Spec keys: ``config`` (an EncoderConfig dict), ``image`` (``.npy``, the
initial memory), ``abits``, ``mem_bytes``, ``commands`` (sequencer command
dicts, GEMM fields under ``gemm``), ``read_bytes`` (how much memory to read
back), ``seed`` and the memory knobs ``lat_min``, ``lat_mask``, ``p_req``,
``p_data``, ``p_wr``.

Python loads memory and commands, waits with a timer (no Python on the
cycles in between) and reads memory back; the results (``cycles``, per
command ``starts``/``ends`` stamps and ``errors``) go to ``result_path``,
the memory image to ``result_path + ".npy"``. Comparing with the golden
model is the caller's (:func:`bertforge.sim.encoder_run.simulate_encoder`).
"""

import json
import os

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.triggers import ClockCycles, RisingEdge

from bertforge.rtl.encoder import EncoderConfig, encoder_command_layout
from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.payload import pack, unpack
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.gemm_tb import read_memory, start_harness, wait_finished

KNOBS = ("lat_min", "lat_mask", "p_req", "p_data", "p_wr")


def config_from_dict(spec):
    return EncoderConfig(gemm=GemmConfig(**spec["gemm"]), softmax=SoftmaxConfig(**spec["softmax"]),
                         layernorm=LayerNormConfig(**spec["layernorm"]), gelu=GeluConfig(**spec["gelu"]))


@cocotb.test()
async def encoder_layer(dut):
    with open(os.environ["BERTFORGE_SPEC"]) as f:
        spec = json.load(f)
    config = config_from_dict(spec["config"])
    layout = encoder_command_layout(config)
    commands = spec["commands"]
    image = np.load(spec["image"]).astype(np.uint8)
    mb = int(spec["mem_bytes"])
    assert image.size == 1 << int(spec["abits"])

    dut.stamp_sel.value = 0
    await start_harness(dut, spec, {key: int(spec.get(key, 0)) for key in KNOBS}, image, mb,
                        [pack(layout, cmd) for cmd in commands])

    dut.go.value = 1
    _, seconds = await wait_finished(dut, commands, int(spec.get("timeout", 0)) or 20_000_000)
    await ClockCycles(dut.clk, 64)   # nothing may happen after the last completion
    dut.go.value = 0
    cycles = int(dut.cycles.value)
    completions = int(dut.completions.value)
    errors = [bool(e) for e in unpack(data.ArrayLayout(1, len(commands)), int(dut.errors.value))]
    starts, ends = [], []
    for index in range(len(commands)):
        dut.stamp_sel.value = index
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)
        starts.append(int(dut.stamp_start.value))
        ends.append(int(dut.stamp_end.value))

    words = -(-int(spec["read_bytes"]) // mb)
    got = image.copy()
    got[:words * mb] = await read_memory(dut, words, mb)
    np.save(spec["result_path"] + ".npy", got)
    result = {"cycles": cycles, "completions": completions, "errors": errors, "starts": starts,
              "ends": ends, "sim_seconds": seconds, "image": spec["result_path"] + ".npy"}
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)
    assert completions == len(commands), f"{completions} completions for {len(commands)} commands"
    assert not any(errors), f"the engine rejected commands: {errors}"
