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
from amaranth.hdl import Shape
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from bertforge.rtl.encoder import EncoderConfig, encoder_command_layout
from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.gemm_tb import load_memory, read_memory, wait_finished

KNOBS = ("lat_min", "lat_mask", "p_req", "p_data", "p_wr")


def pack_struct(layout, values):
    """A (nested) dict of field values -> the integer of ``layout``."""
    packed = 0
    for name, field in layout:
        value = values.get(name, 0)
        if isinstance(field.shape, data.StructLayout):
            raw = pack_struct(field.shape, value or {})
        else:
            raw = int(value) & ((1 << Shape.cast(field.shape).width) - 1)
        packed |= raw << field.offset
    return packed


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

    Clock(dut.clk, 10, unit="ns").start()
    dut.go.value = 0
    dut.host_we.value = 0
    dut.cmd_push.value = 0
    dut.stamp_sel.value = 0
    dut.seed.value = int(spec.get("seed", 0)) & 0xFFFFFFFF
    for key in KNOBS:
        getattr(dut, key).value = int(spec.get(key, 0))
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await load_memory(dut, image, mb)
    dut.cmd_push.value = 1
    for cmd in commands:
        dut.cmd_data.value = pack_struct(layout, cmd)
        await RisingEdge(dut.clk)
    dut.cmd_push.value = 0
    await RisingEdge(dut.clk)

    dut.go.value = 1
    _, seconds = await wait_finished(dut, commands, int(spec.get("timeout", 0)) or 20_000_000)
    await ClockCycles(dut.clk, 64)   # nothing may happen after the last completion
    dut.go.value = 0
    cycles = int(dut.cycles.value)
    completions = int(dut.completions.value)
    errors = [bool((int(dut.errors.value) >> i) & 1) for i in range(len(commands))]
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
