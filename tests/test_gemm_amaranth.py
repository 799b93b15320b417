"""Fast tests of the GEMM engines' stages in amaranth.sim (no Verilator): the
pipelined and the serial requantizer against the golden rule, and whole
small engines (staged and serial; bias, per-channel scales, int32, int16
and int8) on a Python memory."""

from collections import deque

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from bertforge.generators.gemm_sim import layout_problems, read_matrix
from bertforge.rtl.engine import fan_out
from bertforge.rtl.requantizer import Requantizer
from bertforge.rtl.errors import ParameterError, ParameterTypeError
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.payload import pack
from bertforge.rtl.serial_engine import SerialRequantizer, gemm_engine
from bertforge.rtl.tile_scheduler import command_layout
from bertforge.sim.fixed_golden import requantize
from bertforge.sim.gemm_cycles import DONE_QUEUE
from bertforge.sim.gemm_golden import run_commands
from bertforge.sim.stream_sim import run_streams


def requantizer_cases(random=60):
    """(x, multiplier, shift): the extremes, ties both ways, the int8 and
    int16 limits, then ``random`` random ones of each range."""
    rng = np.random.default_rng(1)
    cases = [(-2**31, 2**32 - 1, 0), (2**31 - 1, 2**32 - 1, 63), (-2**31, 2**32 - 1, 63),
             (-1, 1, 1), (1, 1, 1), (-3, 1, 1), (0, 0, 0), (127, 1, 0), (-129, 1, 0),
             (2**31 - 1, 1, 24), (-2**31, 2**31, 55), (32767, 1, 0), (-32769, 1, 0),
             (65535, 1, 1), (-65537, 1, 1)]
    cases += [(int(rng.integers(-2**31, 2**31)), int(rng.integers(0, 2**32)),
               int(rng.integers(0, 64))) for _ in range(random)]
    cases += [(int(rng.integers(-2**20, 2**20)), int(rng.integers(0, 2**26)),
               int(rng.integers(20, 40))) for _ in range(random)]
    return cases


# int32 (bits 32) only through the compact requantizer, which carries int32 results.
@pytest.mark.parametrize("bits, compact", [(8, False), (16, False), (8, True), (16, True), (32, True)])
def test_requantizer_matches_the_golden_rule_after_its_latency(bits, compact):
    lanes = 3
    cases = requantizer_cases()
    if bits == 32:      # int32 through the compact requantizer: multiplier 1, shift 0
        cases = [(x, 1, 0) for x, _, _ in cases]
    steps = [cases[i:i + lanes] for i in range(0, len(cases) - lanes + 1, lanes)]
    dut = Requantizer(lanes, compact=compact)
    got = []

    async def bench(ctx):
        ctx.set(dut.wide, bits == 16)
        if compact:
            ctx.set(dut.full, bits == 32)
        for step in steps + [steps[0]] * Requantizer.LATENCY:
            for lane, (x, mult, shift) in enumerate(step):
                ctx.set(dut.x[lane], x)
                ctx.set(dut.mult[lane], mult)
                ctx.set(dut.shift[lane], shift)
            await ctx.tick()
            got.append([ctx.get(dut.y[lane]) for lane in range(lanes)])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # y after the tick of step i holds step i + 1 - LATENCY
    for index, step in enumerate(steps):
        expected = [x if bits == 32 else int(requantize(x, mult, shift, bits))
                    for x, mult, shift in step]
        assert got[index + Requantizer.LATENCY - 1] == expected, (index, step)


def test_serial_requantizer_matches_the_golden_rule_after_its_latency():
    # int8 and int16 alternate; busy is high exactly LATENCY cycles a value.
    dut = SerialRequantizer()
    cases = requantizer_cases(random=20)
    got = []

    async def bench(ctx):
        for index, (x, mult, shift) in enumerate(cases):
            ctx.set(dut.x, x)
            ctx.set(dut.multiplier, mult)
            ctx.set(dut.shift, shift)
            ctx.set(dut.int8, index % 2)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.x, 0)           # inputs are taken at start only
            busy = 0
            while ctx.get(dut.busy):
                busy += 1
                await ctx.tick()
            got.append((ctx.get(dut.y), busy))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    expected = [(int(requantize(x, mult, shift, 16 >> (index % 2))), SerialRequantizer.LATENCY)
                for index, (x, mult, shift) in enumerate(cases)]
    assert got == expected


@pytest.mark.parametrize("lanes, compact, cell, error, message", [
    (0, False, "inferred", ParameterError, r"^lanes must be a positive integer, not 0$"),
    (2.0, False, "inferred", ParameterTypeError, r"^lanes must be an integer, not 2\.0$"),
    (True, False, "inferred", ParameterTypeError, r"^lanes must be an integer, not True$"),
    (2, 1, "inferred", ParameterTypeError, r"^compact must be a bool, not 1$"),
    (2, False, "dsp48", ParameterError, r"^cell must be 'inferred' or 'ecp5', not 'dsp48'$"),
])
def test_requantizer_rejects_bad_parameters(lanes, compact, cell, error, message):
    with pytest.raises(error, match=message):
        Requantizer(lanes, compact=compact, cell=cell)


def run_engine(config, image, commands, limit=4000, *, dut=None, write_stall=None, events=None):
    """Run ``commands`` on a byte ``image`` (updated in place) with a memory
    that answers every read one beat a cycle; returns the completions and
    the cycles to the last one. ``dut``: the engine (default
    ``gemm_engine(config)``); ``write_stall(cycle)``: true holds the write
    stream off that cycle; ``events``: a list that gets ``(cycle, "write")``
    and ``(cycle, "done")`` of every write and completion handshake."""
    dut = dut or gemm_engine(config)
    MB = config.mem_bytes
    done = []
    cycles = [0]

    async def bench(ctx):
        ctx.set(dut.rd_req.ready, 1)
        ctx.set(dut.done.ready, 1)
        todo = deque(pack(command_layout(config), c) for c in commands)
        beats = deque()
        for cycle in range(limit):
            ctx.set(dut.wr_req.ready, not (write_stall and write_stall(cycle)))
            ctx.set(dut.cmd.valid, bool(todo))
            ctx.set(dut.cmd.payload.as_value(), todo[0] if todo else 0)
            ctx.set(dut.rd_data.valid, bool(beats))
            ctx.set(dut.rd_data.payload, beats[0] if beats else 0)
            took_cmd = todo and ctx.get(dut.cmd.ready)
            took_data = beats and ctx.get(dut.rd_data.ready)
            req, wr, fin = (ctx.get(port.payload) if ctx.get(port.valid) and ctx.get(port.ready)
                            else None for port in (dut.rd_req, dut.wr_req, dut.done))
            if events is not None:
                events.extend((cycle, name) for name, port in (("write", wr), ("done", fin))
                              if port is not None)
            await ctx.tick()
            if took_cmd:
                todo.popleft()
            if took_data:
                beats.popleft()
            if req is not None:
                for beat in range(req.beats):
                    start = req.addr + beat * MB
                    chunk = image[start:start + MB].tobytes().ljust(MB, b"\0")
                    beats.append(int.from_bytes(chunk, "little"))
            if wr is not None:
                data = int(wr.data).to_bytes(MB, "little")[:wr.bytes]
                image[wr.addr:wr.addr + wr.bytes] = np.frombuffer(data, dtype=np.uint8)
            if fin is not None:
                done.append((int(fin.tag), int(fin.error)))
                cycles[0] = cycle + 1
                if len(done) == len(commands):
                    return

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return done, cycles[0]


#: The area knobs of the iCE40 board engine (no command queue, stage queues
#: of 3, compact bias/scale buffers and requantizer).
SMALL = dict(command_queue=0, stage_queue=3, compact=True)


#: The compact writer with two lanes a piece and three pieces a row (panel 3
#: of a 64-bit word: per-piece bias and scale words, lanes gathered).
WIDE_SMALL = dict(SMALL, cols=3, mem_width=64)

#: The serial engine (the iCE40 board's), with no command queue.
SERIAL = dict(command_queue=0, serial=True)


@pytest.mark.parametrize("dataflow, knobs", [("os", {}), ("ws", {}), ("os", SMALL), ("ws", SMALL),
                                             ("os", WIDE_SMALL), ("os", SERIAL),
                                             ("os", dict(SERIAL, arith="int16"))],
                         ids=["os", "ws", "os-small", "ws-small", "os-small-64", "serial",
                              "serial-int16"])
def test_engine_with_bias_and_per_channel_scales(dataflow, knobs):
    config = GemmConfig(**{**dict(rows=2, cols=2, dataflow=dataflow, mem_width=32, addr_width=12,
                                  k_chunk=8, m_tile=4), **knobs})
    problems = [dict(m=3, k=11, n=5, bias=True, scale=np.array([3e-3, 1e-2, 5e-2, 1e-3, 2e-3])),
                dict(m=2, k=4, n=3, bias=np.array([2**31 - 1, -2**31, 7])),
                dict(m=2, k=2, n=2, int8=1, multiplier=2**32 - 1, shift=40),
                # int16 rows of 3 and 5 columns: one and two write beats each
                dict(m=3, k=9, n=5, bias=True, int16=1, scale=np.array([1, 3, 5, 7, 9]) * 1e-2),
                dict(m=2, k=20, n=3, extreme=True, int16=1, multiplier=1, shift=0),
                dict(raw=dict(m=2, k=2, n=2, per_channel=1))]
    image, commands = layout_problems(config, problems, np.random.default_rng(4))
    expected = image.copy()
    errors = run_commands(config, expected, commands)
    done, _ = run_engine(config, image, commands, limit=60000 if config.serial else 4000)
    assert done == [(c["tag"], int(e)) for c, e in zip(commands, errors)]
    assert errors == [False] * 5 + [True]
    saturated = read_matrix(config, image, commands[4])
    assert saturated.max() == 2**15 - 1 and saturated.min() == -2**15
    for cmd in commands[:5]:
        assert np.array_equal(read_matrix(config, image, cmd), read_matrix(config, expected, cmd))
    assert np.array_equal(image, expected)


@pytest.mark.parametrize("knobs", [{}, SMALL], ids=["", "small"])
@pytest.mark.parametrize("rows, dataflow, m_tile", [(1, "os", 1), (2, "ws", 1), (2, "ws", 3)],
                         ids=["os-1-row", "ws-1-row", "ws-3-rows"])
def test_engine_accumulates_rows_read_as_they_are_written(rows, dataflow, m_tile, knobs):
    # Consecutive result streams add into the same accumulator rows: on a
    # one-row OS array 1 beat apart (the sum is forwarded); on a two-row
    # WS array 2 apart (the array's period is at least its rows: a
    # transparent read) or, in blocks of 3 rows, 3 (a plain read).
    # compact (SMALL): old C is loaded into the accumulator buffer itself.
    config = GemmConfig(rows=rows, cols=2, dataflow=dataflow, mem_width=32, addr_width=12,
                        k_chunk=8, m_tile=m_tile, **knobs)
    problems = [dict(m=3, k=13, n=3), dict(m=2, k=9, n=2, accumulate=True),
                dict(m=1, k=16, n=4, extreme=True)]
    image, commands = layout_problems(config, problems, np.random.default_rng(m_tile))
    expected = image.copy()
    run_commands(config, expected, commands)
    run_engine(config, image, commands)
    assert np.array_equal(image, expected)


def test_bf16_engine_with_the_small_engine_knobs():
    # compact without a requantizer: bias and scale buffers, old C in the
    # accumulator buffer, its combinational reads; float32 and bf16 output.
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12, k_chunk=8, arith="bf16",
                        **SMALL)
    problems = [dict(m=3, k=11, n=5, bias=True), dict(m=2, k=4, n=3),
                dict(m=3, k=9, n=5, bias=True, bf16_out=1), dict(m=5, k=6, n=3, accumulate=True)]
    image, commands = layout_problems(config, problems, np.random.default_rng(4))
    expected = image.copy()
    assert run_commands(config, expected, commands) == [False] * 4
    done, _ = run_engine(config, image, commands)
    assert [error for _, error in done] == [0] * 4
    assert np.array_equal(image, expected)


def test_engine_whose_done_is_always_ready_completes_with_its_last_write_beat():
    # done_always_ready (the encoder top's engine): no completion queue, so
    # each completion comes on the cycle its command's last write beat (an
    # error command: its descriptor) is taken, DONE_QUEUE cycles before the
    # queued engine's, with the same tags and errors; the writes and the
    # memory are the same, under write stalls too.
    config = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=12, k_chunk=8, m_tile=4)
    problems = [dict(m=3, k=11, n=5, bias=True), dict(raw=dict(m=2, k=2, n=2, per_channel=1)),
                dict(m=2, k=4, n=3, int8=1, multiplier=3, shift=2), dict(m=1, k=3, n=2),
                dict(raw=dict(m=1, k=1, n=1, per_channel=1))]
    image, commands = layout_problems(config, problems, np.random.default_rng(7))
    expected = image.copy()
    errors = run_commands(config, expected, commands)
    assert errors == [False, True, False, False, True]
    stalls = np.random.default_rng(8).random(4000) < 0.3
    runs = {}
    for always in (False, True):
        memory, events = image.copy(), []
        engine = GemmEngine(config, done_always_ready=always)
        done, _ = run_engine(config, memory, commands, dut=engine,
                             write_stall=lambda cycle: stalls[cycle], events=events)
        assert done == [(c["tag"], int(e)) for c, e in zip(commands, errors)]
        assert np.array_equal(memory, expected)
        runs[always] = events
    queued, direct = runs[False], runs[True]
    writes = [cycle for cycle, name in queued if name == "write"]
    assert writes == [cycle for cycle, name in direct if name == "write"]
    completions = {always: [cycle for cycle, name in runs[always] if name == "done"]
                   for always in runs}
    assert completions[True] == [cycle - DONE_QUEUE for cycle in completions[False]]
    # a good command's completion is its last write beat's cycle; a bad one writes nothing
    last_writes = [cycle for cycle, bad in zip(completions[True], errors) if not bad]
    assert all(cycle in writes for cycle in last_writes) and len(last_writes) == 3


def test_engine_done_always_ready_is_a_bool():
    config = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=12, k_chunk=8, m_tile=4)
    with pytest.raises(ParameterTypeError, match=r"^done_always_ready must be a bool, not 1$"):
        GemmEngine(config, done_always_ready=1)


class Fork(wiring.Component):
    """:func:`fan_out` of ``src`` (``x``, ``y``) to ``a`` (``x``, always),
    ``b`` (``y``, when ``x`` is odd) and ``c`` (``x``, ``y``, always)."""

    def __init__(self):
        xy = data.StructLayout({"x": 8, "y": 8})
        super().__init__({"src": In(stream.Signature(xy)),
                          "a": Out(stream.Signature(data.StructLayout({"x": 8}))),
                          "b": Out(stream.Signature(data.StructLayout({"y": 8}))),
                          "c": Out(stream.Signature(xy))})

    def elaborate(self, platform):
        m = Module()
        fan_out(m, self.src, [(self.a, 1), (self.b, self.src.payload.x[0]), (self.c, 1)])
        return m


@pytest.mark.parametrize("seed", range(4))
def test_fan_out_hands_each_target_what_it_needs_once_in_order(seed):
    rng = np.random.default_rng(seed)
    payloads = [{"x": int(x), "y": int(y)} for x, y in rng.integers(0, 256, (60, 2))]
    odd = [p for p in payloads if p["x"] % 2]
    received, _ = run_streams(Fork(), {"src": payloads}, {"a": 60, "b": len(odd), "c": 60},
                              seed=seed, gap=0.3, stall=0.5)
    assert received["a"] == [{"x": p["x"]} for p in payloads]
    assert received["b"] == [{"y": p["y"]} for p in odd]
    assert received["c"] == payloads


def test_fan_out_targets_do_not_wait_for_each_other():
    # ``a`` takes the payload at once while ``c`` stalls, and only once;
    # the source lets it go when ``c`` has it too.
    dut = Fork()
    seen = []

    async def bench(ctx):
        ctx.set(dut.src.payload, {"x": 3, "y": 4})
        ctx.set(dut.src.valid, 1)
        ctx.set(dut.a.ready, 1)
        ctx.set(dut.b.ready, 1)
        for cycle in range(8):
            ctx.set(dut.c.ready, cycle == 5)
            await ctx.delay(1e-9)
            seen.append((ctx.get(dut.a.valid), ctx.get(dut.b.valid), ctx.get(dut.c.valid),
                         ctx.get(dut.src.ready)))
            if ctx.get(dut.src.ready):
                ctx.set(dut.src.valid, 0)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(1, 1, 1, 0)] + [(0, 0, 1, 0)] * 4 + [(0, 0, 1, 1)] + [(0, 0, 0, 0)] * 2
