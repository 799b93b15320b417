"""amaranth.sim helpers for :mod:`amaranth.lib.stream` interfaces.

Async testbench functions (``sim.add_testbench``) in amaranth 0.5 style:
payloads go in and come out as plain Python values, ``dict`` for a struct
layout, ``list`` for an array layout, ``int`` otherwise (nested as the
layout nests). Back-to-back calls move one payload per cycle; a test makes
stalls with ``await ctx.tick().repeat(n)`` between calls, or lets
:func:`run_streams` drive a whole component with random gaps and stalls.
"""

import random

from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["stream_put", "stream_get", "plain", "add_watchdog", "run_streams"]


def plain(value):
    """A sampled payload (``data.Const`` or int) as dicts, lists and ints."""
    if isinstance(value, data.Const):
        layout = value.shape()
        if isinstance(layout, data.ArrayLayout):
            return [plain(value[index]) for index in range(layout.length)]
        return {name: plain(value[name]) for name, _ in layout}
    return value


def _castable(payload):
    """``payload`` with numpy scalars and arrays turned into ints and lists."""
    if isinstance(payload, dict):
        return {name: _castable(value) for name, value in payload.items()}
    if hasattr(payload, "tolist"):
        payload = payload.tolist()
    if isinstance(payload, (list, tuple)):
        return [_castable(value) for value in payload]
    return payload


async def stream_put(ctx, stream, payload):
    """Offer ``payload`` on ``stream`` (``valid`` high from now) and return
    after the clock edge that takes it (``ready`` high)."""
    ctx.set(stream.payload, _castable(payload))
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream):
    """Hold ``ready`` high until a payload is taken from ``stream``; return
    it (see :func:`plain`). ``ready`` is low again when this returns."""
    ctx.set(stream.ready, 1)
    payload, = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return plain(payload)


def add_watchdog(sim, max_cycles):
    """Make ``sim`` (clocked) fail if its testbenches run for more than
    ``max_cycles`` cycles, instead of hanging."""
    async def watchdog(ctx):
        for _ in range(max_cycles):
            await ctx.tick()
        raise AssertionError(f"the testbenches did not finish in {max_cycles} cycles")
    sim.add_process(watchdog)


def run_streams(dut, inputs, outputs, *, seed=0, gap=0.0, stall=0.0, max_cycles=100_000):
    """Simulate component ``dut``: put ``inputs`` (port name -> payloads) on
    its input streams, each port in order, and take ``outputs`` (port name ->
    count) from its output streams.

    Before each put the input waits idle cycles (each with probability
    ``gap``), before each get the output holds ``ready`` low (each cycle with
    probability ``stall``), from a ``random.Random(seed)``. Returns
    ``(received, cycles)``: port name -> payloads, and the cycles from the
    first input handshake to the last output handshake, both included (what
    the cycle models count). Fails after ``max_cycles`` cycles.
    """
    m = Module()
    m.submodules.dut = dut
    cycle = Signal(32)
    m.d.sync += cycle.eq(cycle + 1)
    rng = random.Random(seed)
    received = {name: [] for name in outputs}
    put_times, get_times = [], []

    async def idle(ctx, probability):
        count = 0
        while probability and rng.random() < probability:
            count += 1
        if count:
            await ctx.tick().repeat(count)

    def producer(port, payloads):
        async def bench(ctx):
            for payload in payloads:
                await idle(ctx, gap)
                await stream_put(ctx, port, payload)
                put_times.append(ctx.get(cycle))
        return bench

    def consumer(port, into, count):
        async def bench(ctx):
            while len(into) < count:
                await idle(ctx, stall)
                into.append(await stream_get(ctx, port))
                get_times.append(ctx.get(cycle))
        return bench

    sim = Simulator(m)
    sim.add_clock(1e-8)
    for name, payloads in inputs.items():
        sim.add_testbench(producer(getattr(dut, name), payloads))
    for name, count in outputs.items():
        sim.add_testbench(consumer(getattr(dut, name), received[name], count))
    add_watchdog(sim, max_cycles)
    sim.run()
    return received, max(get_times) - min(put_times) + 1
