"""The stream library (bertforge.rtl.stream) and the amaranth.sim stream
helpers (bertforge.sim.stream_sim), in amaranth.sim."""

import random

import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data
from amaranth.sim import Simulator

from bertforge.rtl.stream import Queue, clamp, delay, stage, tree
from bertforge.sim.stream_sim import stream_get, stream_put

LAYOUT = data.StructLayout({"data": data.ArrayLayout(signed(8), 2), "last": 1})


def run_queue(depth, payloads, *, seed, put_gap, get_gap):
    """Push ``payloads`` through a Queue with random gaps (0 .. gap cycles)
    before each put and get; returns (received, max level seen)."""
    dut = Queue(shape=LAYOUT, depth=depth)
    rng = random.Random(seed)
    received, levels = [], []

    async def producer(ctx):
        for payload in payloads:
            gap = rng.randint(0, put_gap)
            if gap:
                await ctx.tick().repeat(gap)
            await stream_put(ctx, dut.i, payload)

    async def consumer(ctx):
        while len(received) < len(payloads):
            gap = rng.randint(0, get_gap)
            if gap:
                await ctx.tick().repeat(gap)
            received.append(await stream_get(ctx, dut.o))
        await ctx.tick().repeat(5)   # nothing more may come out
        assert not ctx.get(dut.o.valid)

    async def monitor(ctx):
        async for _, _, level in ctx.tick().sample(dut.level):
            levels.append(level)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.add_process(monitor)
    sim.run()
    return received, max(levels)


def random_payloads(n, seed):
    rng = random.Random(seed)
    return [{"data": [rng.randint(-128, 127), rng.randint(-128, 127)], "last": rng.randint(0, 1)}
            for _ in range(n)]


@pytest.mark.parametrize("depth", [1, 2, 5])
@pytest.mark.parametrize("put_gap,get_gap", [(0, 0), (3, 0), (0, 3), (2, 2)])
def test_queue_keeps_order_under_stalls(depth, put_gap, get_gap):
    payloads = random_payloads(40, depth)
    received, max_level = run_queue(depth, payloads, seed=depth * 10 + put_gap,
                                    put_gap=put_gap, get_gap=get_gap)
    assert received == payloads          # in order, none dropped or duplicated
    assert max_level <= depth


def test_queue_fills_to_depth_and_streams_one_per_cycle():
    depth = 4
    dut = Queue(shape=8, depth=depth)

    async def bench(ctx):
        for value in range(depth):       # no reader: the queue fills
            await stream_put(ctx, dut.i, value)
        await ctx.tick()
        assert ctx.get(dut.level) == depth and not ctx.get(dut.i.ready)
        out = []
        for _ in range(depth):
            out.append(await stream_get(ctx, dut.o))
        assert out == list(range(depth))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()

    # Reader and writer both always ready: one payload per cycle, 2 cycles latency.
    dut = Queue(shape=8, depth=4)
    times = {}

    async def writer(ctx):
        for value in range(10):
            await stream_put(ctx, dut.i, value)
            times.setdefault("put", []).append(ctx.get(cycle))

    async def reader(ctx):
        for value in range(10):
            assert await stream_get(ctx, dut.o) == value
            times.setdefault("get", []).append(ctx.get(cycle))

    m = Module()
    m.submodules.dut = dut
    cycle = Signal(16)
    m.d.sync += cycle.eq(cycle + 1)
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.run()
    assert times["put"] == list(range(1, 11))
    assert times["get"] == list(range(3, 13))


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(shape=8, depth=0), ValueError, r"^depth must be a positive integer, not 0$"),
    (dict(shape=8, depth=-3), ValueError, r"^depth must be a positive integer, not -3$"),
    (dict(shape=8, depth=2.0), TypeError, r"^depth must be an integer, not 2\.0$"),
    (dict(shape=8, depth=True), TypeError, r"^depth must be an integer, not True$"),
    (dict(shape="wide", depth=2), TypeError,
     r"^shape must be a shape or a data\.Layout, not 'wide'$"),
])
def test_queue_parameter_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        Queue(**kwargs)


def test_queue_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        Queue(8, 4)


def test_pipeline_helpers():
    m = Module()
    a = Signal(signed(8))
    b = Signal(signed(8))
    flag = Signal()
    wide = Signal(signed(12))
    total = Signal(signed(9))
    m.d.comb += total.eq(a + b)
    later = delay(m, a, 3, "a")
    later_flag = delay(m, flag, 2, "flag", reset_less=False)
    regs = stage(m, {"sum": tree([a, b, a])}, "s1", flags={"valid": flag})
    clamped9 = Signal(signed(8))
    clamped12 = Signal(signed(8))
    m.d.comb += [clamped9.eq(clamp(total, 8)), clamped12.eq(clamp(wide, 8))]
    assert delay(m, a, 0, "none") is a

    async def bench(ctx):
        history = []
        rng = random.Random(1)
        for step in range(12):
            va, vb, vw = rng.randint(-128, 127), rng.randint(-128, 127), rng.randint(-2048, 2047)
            ctx.set(a, va)
            ctx.set(b, vb)
            ctx.set(wide, vw)
            ctx.set(flag, step % 3 == 0)
            assert ctx.get(clamped9) == max(-128, min(127, va + vb))
            assert ctx.get(clamped12) == max(-128, min(127, vw))
            history.append((va, step % 3 == 0))
            await ctx.tick()
            assert ctx.get(regs["sum"]) == 2 * va + vb
            assert ctx.get(regs["valid"]) == (step % 3 == 0)
            if step >= 2:
                assert ctx.get(later) == history[step - 2][0]
            if step >= 1:
                assert ctx.get(later_flag) == history[step - 1][1]

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
