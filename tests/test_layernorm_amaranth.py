"""LayerNorm in amaranth.sim (no Verilator): the pipelined rsqrt against its
reference."""

import random

from amaranth.hdl import Module
from amaranth.sim import Simulator

from bertforge.rtl.rsqrt import RSQRT_STAGES, RsqrtPipeline, rsqrt_reference


def test_rsqrt_pipeline_matches_reference():
    """The pipelined RTL rsqrt, in Amaranth's simulator, one new D per cycle."""
    width = 70
    rng = random.Random(1)
    values = [0, 1, 2, 3, 4, (1 << width) - 1, 1 << (width - 1)]
    values += [rng.getrandbits(rng.randint(1, width)) for _ in range(60)]
    m = Module()
    rsqrt = RsqrtPipeline(width)
    rsqrt.add_to(m)
    results = []

    async def bench(ctx):
        for cycle in range(len(values) + RSQRT_STAGES):
            if cycle < len(values):
                ctx.set(rsqrt.d, values[cycle])
            await ctx.tick()
            if cycle + 1 >= RSQRT_STAGES:
                results.append((ctx.get(rsqrt.r), ctx.get(rsqrt.e)))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert results[:len(values)] == [rsqrt_reference(d) for d in values]
