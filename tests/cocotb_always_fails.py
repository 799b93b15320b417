"""A cocotb module that writes a result and then fails, to test that the
runner reruns a failing simulation with a waveform and keeps it."""

import json

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from bertforge.sim.stream_tb import read_spec


@cocotb.test()
async def always_fails(dut):
    spec = read_spec()
    Clock(dut.clk, 10, unit="ns").start()
    await ClockCycles(dut.clk, 5)
    with open(spec["result_path"], "w") as f:
        json.dump({"match": False}, f)
    assert False, "this test fails on purpose"
