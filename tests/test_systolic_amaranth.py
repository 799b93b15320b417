"""Fast unit test of the whole SystolicArray in amaranth.sim (no Verilator):
a few tiles back to back in both dataflows, against the golden model."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim.systolic_golden import systolic_golden


def beats(config, tiles):
    a_beats, b_beats = [], []
    for a, b in tiles:
        if config.dataflow == "os":
            k = a.shape[1]
            a_beats += [(a[:, i].tolist(), i == k - 1) for i in range(k)]
            b_beats += [b[i].tolist() for i in range(k)]
        else:
            k = a.shape[0]
            a_beats += [(a[i].tolist(), i == k - 1) for i in range(k)]
            b_beats += [b[i].tolist() for i in range(config.rows)]
    return a_beats, b_beats


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_tiles_back_to_back(dataflow):
    config = SystolicConfig(rows=2, cols=3, dataflow=dataflow)
    dut = SystolicArray(config)
    rng = np.random.default_rng(3)
    shapes = {"os": lambda k: ((2, k), (k, 3)), "ws": lambda k: ((k, 2), (2, 3))}[dataflow]
    tiles = []
    for k in (1, 4, 2, 5):
        sa, sb = shapes(k)
        tiles.append((rng.integers(-128, 128, sa), rng.integers(-128, 128, sb)))
    a_beats, b_beats = beats(config, tiles)
    expected = np.concatenate([systolic_golden(config, a, b) for a, b in tiles])
    received = []

    async def drive_a(ctx):
        for data, last in a_beats:
            ctx.set(dut.a.payload, {"data": data, "last": last})
            ctx.set(dut.a.valid, 1)
            await ctx.tick().until(dut.a.ready)
        ctx.set(dut.a.valid, 0)

    async def drive_b(ctx):
        for data in b_beats:
            ctx.set(dut.b.payload, data)
            ctx.set(dut.b.valid, 1)
            await ctx.tick().until(dut.b.ready)
        ctx.set(dut.b.valid, 0)

    async def collect(ctx):
        ctx.set(dut.c.ready, 1)
        while len(received) < len(expected):
            _, _, valid, payload = await ctx.tick().sample(dut.c.valid, dut.c.payload)
            if valid:
                received.append([int(x) for x in payload.data])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(drive_a)
    sim.add_testbench(drive_b)
    sim.add_testbench(collect)
    sim.run_until(5e-6)
    assert np.array_equal(np.array(received), expected)
