"""A cocotb module that reads a register the design never writes (its
power-up value: X in a four-state simulator) and reports it, to test the
runner's ``x_seed`` option."""

import json

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from bertforge.sim.stream_tb import read_spec


@cocotb.test()
async def read_uninitialized(dut):
    spec = read_spec()
    dut.en.value = 0
    dut.d.value = 0
    Clock(dut.clk, 10, unit="ns").start()
    await ClockCycles(dut.clk, 3)
    value = dut.q.value
    with open(spec["result_path"], "w") as f:
        json.dump({"q": int(value) if value.is_resolvable else None}, f)
