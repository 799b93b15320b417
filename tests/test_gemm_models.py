"""GEMM engine: parameter checks, golden model, cycle model bookkeeping and the
tile scheduler in amaranth.sim (fast, no Verilator)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from config_helpers import config_tests
from bertforge.rtl.errors import ParameterError
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.serial_engine import SerialGemmEngine, gemm_engine
from bertforge.rtl.sparse_engine import SparseEngineConfig
from bertforge.rtl.tile_scheduler import CHANNEL_MULT_BITS, TileScheduler
from bertforge.sim.fixed_golden import (channel_scale_words, command_scale, ratio_to_mult_shift,
                                        requantize, scale_words, split_scale_words)
from bertforge.sim.gemm_cycles import (START, chunks, gemm_cycles, ideal_cycles, load_beats,
                                       start_cycles, write_cycles)
from bertforge.sim.gemm_golden import (command_error, command_rejected, gemm_golden,
                                       reduction_pieces, run_commands)
from bertforge.sim.stream_sim import stream_put
from bertforge.sim.systolic_golden import saturating_matmul


test_bad_parameters, test_component_needs_a_config = config_tests(GemmConfig, GemmEngine, [
    ({"rows": 0}, ValueError, r"^rows must be a positive integer, not 0$"),
    ({"cols": "4"}, TypeError, r"^cols must be an integer, not '4'$"),
    ({"dataflow": "is"}, ValueError, r"^dataflow must be 'os' or 'ws', not 'is'$"),
    ({"width": 4}, ValueError, r"^width must be 8 or 16, not 4$"),
    ({"acc_width": 40}, ValueError, r"^acc_width must be an integer <= 32, not 40$"),
    ({"acc_width": 8}, ValueError, r"^acc_width must be an integer >= 16, not 8$"),
    ({"mem_width": 96}, ValueError, r"^mem_width must be a power of two, not 96$"),
    ({"rows": 16, "mem_width": 64}, ValueError,
     r"^mem_width must be at least max\(rows, cols\) \* width = 128, not 64$"),
    ({"addr_width": 4}, ValueError, r"^addr_width must be an integer >= 8, not 4$"),
    ({"k_chunk": 100}, ValueError, r"^k_chunk must be a multiple of mem_width // width = 64, not 100$"),
    ({"m_tile": 0}, ValueError, r"^m_tile must be a positive integer, not 0$"),
    ({"dim_width": True}, TypeError, r"^dim_width must be an integer, not True$"),
    ({"command_queue": -1}, ValueError, r"^command_queue must be a non-negative integer, not -1$"),
    ({"command_queue": 65}, ValueError, r"^command_queue must be an integer <= 64, not 65$"),
    ({"stage_queue": 2}, ValueError, r"^stage_queue must be an integer >= 3, not 2$"),
    ({"stage_queue": "2"}, TypeError, r"^stage_queue must be an integer, not '2'$"),
    ({"compact": 1}, TypeError, r"^compact must be a bool, not 1$"),
    ({"serial": "yes"}, TypeError, r"^serial must be a bool, not 'yes'$"),
    ({"serial": True, "dataflow": "ws"}, ValueError,
     r"^the serial engine is output stationary and integer: set dataflow 'os' and arith 'int', "
     r"not 'ws' and 'int'$"),
    ({"serial": True, "arith": "bf16"}, ValueError,
     r"^the serial engine is output stationary and integer: set dataflow 'os' and arith 'int', "
     r"not 'os' and 'bf16'$"),
    ({"transpose_c": 1}, TypeError, r"^transpose_c must be a bool, not 1$"),
    ({"transpose_c": True, "serial": True}, ValueError,
     r"^transpose_c needs the staged engine: set serial to false$"),
])


def test_each_engine_takes_its_own_configs():
    """``gemm_engine`` picks the engine; each refuses the other's config, and
    the sparse engine refuses ``serial`` (the encoder top too:
    test_encoder_params)."""
    staged = GemmConfig(rows=2, cols=2, mem_width=32)
    serial = GemmConfig(rows=2, cols=2, mem_width=32, serial=True)
    assert type(gemm_engine(staged)) is GemmEngine
    assert type(gemm_engine(serial)) is SerialGemmEngine
    assert (serial.group, serial.panel, serial.name) == (1, 2, "gemm_2x2_os_serial")
    assert (staged.group, staged.panel, staged.name) == (2, 4, "gemm_2x2_os")
    with pytest.raises(ParameterError, match=r"^GemmEngine needs serial=False \(serial=True is "
                                             r"the SerialGemmEngine; gemm_engine\(\) picks the "
                                             r"right one\)$"):
        GemmEngine(serial)
    with pytest.raises(ParameterError, match=r"^SerialGemmEngine needs a config with serial=True$"):
        SerialGemmEngine(staged)
    with pytest.raises(ParameterError, match=r"^serial must be False for the sparse engine \(the "
                                             r"serial engine is dense\)$"):
        SparseEngineConfig(rows=2, cols=2, mem_width=64, serial=True)


def test_derived_sizes():
    config = GemmConfig(rows=16, cols=16, mem_width=512)
    assert (config.lanes, config.group, config.panel, config.segments) == (64, 4, 64, 4)
    ws = GemmConfig(rows=3, cols=5, dataflow="ws", mem_width=64, k_chunk=16, m_tile=8)
    assert (ws.lanes, ws.group, ws.panel, ws.blocks_per_seg, ws.block_rows) == (8, 1, 5, 3, 8)


def test_golden_is_the_product_without_saturation():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-128, 128, (7, 300)), rng.integers(-128, 128, (300, 9))
    for dataflow in ("os", "ws"):
        config = GemmConfig(rows=3, cols=5, dataflow=dataflow, mem_width=64, k_chunk=16)
        assert np.array_equal(gemm_golden(config, a, b), a @ b)


def test_golden_saturates_per_piece():
    # acc_width 16: every piece saturates on its own, then the accumulator.
    config = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=8, acc_width=16)
    a = np.full((2, 20), 127)
    b = np.full((20, 2), 127)
    expected = np.zeros((2, 2), dtype=np.int64)
    for start, stop in [(0, 8), (8, 16), (16, 20)]:
        expected = np.clip(expected + saturating_matmul(a[:, start:stop], b[start:stop], 16),
                           -32768, 32767)
    assert np.array_equal(gemm_golden(config, a, b), expected)
    assert gemm_golden(config, a, b)[0, 0] == 32767
    a[0] = -128
    assert gemm_golden(config, a, b)[0, 0] == -32768


def test_golden_accumulate_and_requantize():
    config = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=8)
    a = np.array([[1, 2], [3, 4]])
    b = np.array([[5, 6], [7, 8]])
    c_old = np.array([[2**31 - 1, -5], [0, -(2**31)]])
    got = gemm_golden(config, a, b, c_old=c_old)
    assert got.tolist() == [[2**31 - 1, 17], [43, -(2**31) + 50]]
    acc = a @ b * 1000
    q = gemm_golden(config, a * 10, b * 100, int8=True, multiplier=3, shift=9)
    assert np.array_equal(q, requantize(acc, 3, 9))
    assert gemm_golden(config, np.full((1, 1), -128), np.full((1, 1), -128), int8=True,
                       multiplier=1, shift=0).tolist() == [[127]]


def test_reduction_pieces():
    os_ = GemmConfig(rows=3, cols=5, mem_width=64, k_chunk=16)
    assert reduction_pieces(os_, 40) == [(0, 16), (16, 32), (32, 40)]
    ws = GemmConfig(rows=3, cols=5, dataflow="ws", mem_width=64, k_chunk=16)
    assert reduction_pieces(ws, 11) == [(0, 3), (3, 6), (6, 8), (8, 11)]


def test_command_errors():
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12)
    ok = dict(m=2, k=3, n=4, a_addr=0, b_addr=100, c_addr=200, a_stride=3, b_stride=4, c_stride=16)
    assert not command_error(config, **ok)
    assert command_error(config, **dict(ok, m=0))
    assert command_error(config, **dict(ok, k=0))
    assert command_error(config, **dict(ok, n=0))
    assert not command_error(config, **dict(ok, c_addr=4096 - 16 - 16))
    assert command_error(config, **dict(ok, c_addr=4096 - 16 - 15))
    assert command_error(config, **ok, accumulate=True, int8=True)
    # int16 C: two bytes per element; one output type; no accumulate.
    assert not command_error(config, **dict(ok, c_addr=4096 - 16 - 8), int16=True)
    assert command_error(config, **dict(ok, c_addr=4096 - 16 - 7), int16=True)
    assert command_error(config, **ok, int8=True, int16=True)
    assert command_error(config, **ok, accumulate=True, int16=True)
    assert not command_error(config, **ok, int16=True, per_channel=True, scale_addr=0)


def test_golden_int16_output_rounds_and_saturates_to_16_bits():
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12)
    a = np.array([[100, -100], [127, 127]])
    b = np.array([[127, 1], [127, -1]])
    # acc = [[0, 200], [32258, 0]]; * 3 / 2: 48387 saturates, 300 stays
    out = gemm_golden(config, a, b, int16=True, multiplier=3, shift=1)
    assert out.tolist() == [[0, 300], [32767, 0]]
    assert gemm_golden(config, -a, b, int16=True, multiplier=3, shift=1)[1, 0] == -32768


def test_run_commands_in_order():
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12)
    image = np.zeros(4096, dtype=np.uint8)
    image[0:4] = [1, 2, 3, 4]          # A = [[1, 2], [3, 4]], B = I at 16
    image[16:20] = [1, 0, 0, 1]
    cmd = dict(m=2, k=2, n=2, a_addr=0, b_addr=16, c_addr=64, a_stride=2, b_stride=2, c_stride=8)
    errors = run_commands(config, image, [cmd, dict(cmd, accumulate=1), dict(cmd, m=0)])
    assert errors == [False, False, True]
    c = np.ndarray((2, 2), dtype="<i4", buffer=image, offset=64, strides=(8, 4))
    assert c.tolist() == [[2, 4], [6, 8]]


def test_cycle_model_counts():
    config = GemmConfig(rows=16, cols=16)
    assert ideal_cycles(config, {"m": 128, "k": 64, "n": 128}) == 4096
    assert ideal_cycles(config, {"m": 1, "k": 1, "n": 1}) == 1 / 256
    parts = chunks(config, {"m": 20, "k": 300, "n": 70})
    assert len(parts) == 2 * 2 * 2
    assert [p["k_len"] for p in parts[:2]] == [256, 44]
    assert parts[-1]["m_len"] == 4 and parts[-1]["n_len"] == 6 and parts[-1]["tiles"] == 1
    model = gemm_cycles(config, [{"m": 128, "k": 768, "n": 768}])
    assert model["exact"] and model["bound"] == "compute"
    slow = gemm_cycles(config, [{"m": 128, "k": 768, "n": 768}], bw=4)
    assert slow["bound"] == "memory" and not slow["exact"] and slow["cycles"] > 4 * model["cycles"]


def test_area_knobs_keep_the_default_config_and_shift_only_the_start():
    base = GemmConfig(rows=2, cols=2, mem_width=32, k_chunk=16, dim_width=8)
    assert "command_queue" not in base.to_dict() and "compact" not in base.to_dict()
    small = GemmConfig(rows=2, cols=2, mem_width=32, k_chunk=16, dim_width=8, command_queue=0,
                       stage_queue=3, compact=True)
    assert small.to_dict()["command_queue"] == 0 and small.to_dict()["compact"] is True
    # Without a command queue the first command reaches the scheduler 2 cycles sooner.
    assert [start_cycles(GemmConfig(dim_width=8, command_queue=q)) for q in (0, 1, 2, 4)] == [
        START + 6, START + 7, START + 8, START + 8]
    cmds = [dict(m=2, k=32, n=4), dict(m=4, k=64, n=8, bias=True)]
    assert gemm_cycles(small, cmds)["cycles"] == gemm_cycles(base, cmds)["cycles"] - 2


def scheduler_descriptors(config, commands, cycles, keep):
    """Run the tile scheduler of ``config`` on ``commands`` (back to back,
    its output always ready) for ``cycles`` more cycles; ``keep(payload)``
    of each descriptor it emits, those it returns None for left out."""
    dut = TileScheduler(config)
    got = []

    async def bench(ctx):
        ctx.set(dut.chunk.ready, 1)
        for c in commands:
            await stream_put(ctx, dut.cmd, c)
        await ctx.tick().repeat(cycles)

    async def monitor(ctx):
        async for _, _, valid, payload in ctx.tick().sample(dut.chunk.valid, dut.chunk.payload):
            if valid:
                kept = keep(payload)
                if kept is not None:
                    got.append(kept)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(monitor, background=True)
    sim.run()
    return got


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_scheduler_chunks(dataflow):
    """The scheduler's descriptors equal the cycle model's chunk walk; a bad
    command gives one error descriptor."""
    config = GemmConfig(rows=3, cols=5, dataflow=dataflow, mem_width=64, addr_width=12,
                        k_chunk=16, m_tile=4)
    cmd = dict(m=9, k=35, n=12, a_addr=0, b_addr=400, c_addr=1200, a_stride=40, b_stride=12,
               c_stride=48, tag=7)
    bad = dict(cmd, a_addr=4000, tag=8)
    got = scheduler_descriptors(config, (cmd, bad), 60, lambda payload: {
        name: int(getattr(payload, name)) for name in (
            "m_len", "n_len", "k_len", "tiles", "kblocks", "first", "last", "end",
            "error", "a_base", "b_base", "c_base", "tag")})
    expected = chunks(config, cmd)
    assert len(got) == len(expected) + 1
    for index, (g, e) in enumerate(zip(got, expected)):
        for key in ("m_len", "n_len", "k_len", "tiles", "kblocks", "first", "last"):
            assert g[key] == e[key], (index, key)
        assert g["end"] == (index == len(expected) - 1)
        assert not g["error"] and g["tag"] == 7
    second = got[3]
    assert (second["a_base"], second["b_base"], second["c_base"]) == (0, 400 + 5, 1200 + 5 * 4)
    assert got[-1]["error"] and got[-1]["tag"] == 8


@pytest.mark.parametrize("compact", [False, True])
def test_scheduler_under_stalls_keeps_order_and_takes_a_command_after_its_last_chunk(compact):
    """With the consumer's ``ready`` low at random, the descriptors are the
    chunk walk, in order, none lost or repeated, and the next command is
    taken only once the last descriptor of the one before has left."""
    config = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=12, k_chunk=8, m_tile=4,
                        compact=compact)
    dut = TileScheduler(config)
    cmds = [dict(m=5, k=20, n=6, a_addr=0, b_addr=400, c_addr=1200, a_stride=20, b_stride=6,
                 c_stride=24, tag=t) for t in (1, 2, 3)]
    got, taken, rng = [], [], np.random.default_rng(7)

    async def producer(ctx):
        for c in cmds:
            await stream_put(ctx, dut.cmd, c)

    async def consumer(ctx):
        for _ in range(400):
            ready = bool(rng.random() < 0.4)
            ctx.set(dut.chunk.ready, ready)
            await ctx.delay(1e-9)       # let the handshake settle
            if ready and ctx.get(dut.chunk.valid):
                payload = ctx.get(dut.chunk.payload)
                got.append((int(payload.tag), int(payload.k_len), int(payload.n_len),
                            int(payload.m_len), int(payload.end)))
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                taken.append(len(got))      # descriptors handed over, this cycle's too
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    sim.run()
    expected = [(c["tag"], e["k_len"], e["n_len"], e["m_len"], int(i == len(walk) - 1))
                for c in cmds for walk in [chunks(config, c)] for i, e in enumerate(walk)]
    assert got == expected
    ends = [i + 1 for i, g in enumerate(got) if g[-1]]
    assert taken == [0] + ends[:-1]     # each command once the one before has all left


# ---- bias and per-channel requantization (issue #15)

def _reference(a, b, bias, multipliers, shifts):
    """The epilogue spelled out with Python ints: int32-saturated
    ``A @ B + bias``, then per column ``(acc * m + 2**(s-1)) >> s`` saturated
    to int8 (no sum saturates in the callers)."""
    acc = [[sum(int(a[i, t]) * int(b[t, j]) for t in range(a.shape[1])) + int(bias[j])
            for j in range(b.shape[1])] for i in range(a.shape[0])]
    out = []
    for row in acc:
        out.append([])
        for j, value in enumerate(row):
            value = min(max(value, -2**31), 2**31 - 1)
            m, s = int(multipliers[j]), int(shifts[j])
            out[-1].append(min(max((value * m + ((1 << s) >> 1)) >> s, -128), 127))
    return np.array(out)


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_golden_bias_and_per_channel_match_a_plain_reference(dataflow):
    rng = np.random.default_rng(3)
    config = GemmConfig(rows=3, cols=5, dataflow=dataflow, mem_width=64, k_chunk=16)
    a, b = rng.integers(-128, 128, (7, 40)), rng.integers(-128, 128, (40, 9))
    bias = rng.integers(-2**20, 2**20, 9)
    multipliers = rng.integers(1, 2**CHANNEL_MULT_BITS, 9)
    shifts = rng.integers(20, 64, 9)
    got = gemm_golden(config, a, b, bias=bias, int8=True, multiplier=multipliers, shift=shifts)
    assert np.array_equal(got, _reference(a, b, bias, multipliers, shifts))
    assert np.array_equal(gemm_golden(config, a, b, bias=bias), a @ b + bias)
    # a scalar command scale is the same for every column
    scalar = gemm_golden(config, a, b, bias=bias, int8=True, multiplier=2**32 - 1, shift=45)
    assert np.array_equal(scalar, _reference(a, b, bias, [2**32 - 1] * 9, [45] * 9))


def test_golden_from_real_scales_is_within_half_an_lsb_of_float():
    rng = np.random.default_rng(4)
    config = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=32)
    a, b = rng.integers(-128, 128, (16, 64)), rng.integers(-128, 128, (64, 12))
    bias = rng.integers(-2**16, 2**16, 12)
    scales = 10.0 ** rng.uniform(-5, -2, 12)
    multipliers, shifts = split_scale_words(channel_scale_words(scales))
    got = gemm_golden(config, a, b, bias=bias, int8=True, multiplier=multipliers, shift=shifts)
    real = np.clip((a @ b + bias) * scales, -128, 127)
    assert np.abs(got - real).max() <= 0.5 + 1e-6
    assert np.any(got == 127) or np.any(got == -128) or np.abs(real).max() < 127


def test_bias_saturates_to_int32_after_the_accumulator():
    # acc_width 16: the product saturates to 32767, then the bias adds in int32.
    config = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=8, acc_width=16)
    a, b = np.full((1, 20), 127), np.full((20, 3), 127)
    got = gemm_golden(config, a, b, bias=[100000, -40000, 2**31 - 1])
    assert got.tolist() == [[132767, -7233, 2**31 - 1]]
    wide = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=8)
    c_old = np.array([[2**31 - 10, -(2**31) + 10]])
    got = gemm_golden(wide, np.zeros((1, 1)), np.zeros((1, 2)), c_old=c_old, bias=[20, -20])
    assert got.tolist() == [[2**31 - 1, -(2**31)]]
    with pytest.raises(ParameterError, match=r"^bias must have one value per column of B \(2\), "
                                             r"not shape \(3,\)$"):
        gemm_golden(wide, np.zeros((1, 1)), np.zeros((1, 2)), bias=[1, 2, 3])


def test_requantize_takes_one_multiplier_and_shift_per_column():
    x = np.array([[1000, -1000, 7, 2**31 - 1], [-3, 5, -7, -(2**31)]])
    multipliers = np.array([3, 5, 1, 2**32 - 1], dtype=np.uint32)
    shifts = np.array([4, 0, 1, 63])
    got = requantize(x, multipliers, shifts, 16)
    for j in range(4):
        assert np.array_equal(got[:, j], requantize(x[:, j], int(multipliers[j]), int(shifts[j]), 16))
    # exact beyond int64: (2**31 - 1) * (2**32 - 1) needs 63 bits, the rounding a 64th
    big = requantize(np.int64(2**31 - 1), np.uint32(2**32 - 1), 30, 40)
    assert big == ((2**31 - 1) * (2**32 - 1) + 2**29) >> 30
    assert requantize([[-1, 1]], [1, 1], [1, 1]).tolist() == [[0, 1]]   # ties toward +infinity


def test_command_errors_of_bias_and_per_channel():
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12)
    ok = dict(m=2, k=3, n=4, a_addr=0, b_addr=100, c_addr=200, a_stride=3, b_stride=4, c_stride=16)
    assert command_error(config, **ok, per_channel=True)                 # needs int8
    assert not command_error(config, **ok, int8=True, per_channel=True)
    assert command_error(config, **ok, accumulate=True, int8=True, bias=True)
    assert not command_error(config, **ok, accumulate=True, bias=True)
    assert not command_error(config, **ok, bias=True, bias_addr=4096 - 16)
    assert command_error(config, **ok, bias=True, bias_addr=4096 - 15)
    assert not command_error(config, **ok, bias_addr=4096)               # unused: not checked
    scale = dict(ok, int8=True, per_channel=True)
    assert not command_error(config, **scale, scale_addr=4096 - 16)
    assert command_error(config, **scale, scale_addr=4096 - 12)
    assert not command_error(config, **dict(scale, per_channel=False), scale_addr=4096)
    assert command_rejected(config, dict(ok, per_channel=1))
    assert not command_rejected(config, dict(ok, bias=1, bias_addr=8, tag=3, multiplier=9))


def test_run_commands_reads_bias_and_scale_words():
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12)
    image = np.zeros(4096, dtype=np.uint8)
    image[0:4] = [1, 2, 3, 4]          # A = [[1, 2], [3, 4]], B = I at 16
    image[16:20] = [1, 0, 0, 1]
    image[32:40] = np.array([100, -7], dtype="<i4").view(np.uint8)
    image[48:56] = scale_words([3, 1], [1, 0]).astype("<u4").view(np.uint8)
    cmd = dict(m=2, k=2, n=2, a_addr=0, b_addr=16, a_stride=2, b_stride=2, bias_addr=32,
               scale_addr=48)
    commands = [dict(cmd, c_addr=64, c_stride=8, bias=1),
                dict(cmd, c_addr=128, c_stride=2, bias=1, int8=1, per_channel=1),
                dict(cmd, c_addr=192, c_stride=2, int8=1, per_channel=1, multiplier=5),
                dict(cmd, c_addr=256, c_stride=8, per_channel=1)]       # rejected: int32
    assert run_commands(config, image, commands) == [False, False, False, True]
    c32 = np.ndarray((2, 2), dtype="<i4", buffer=image, offset=64, strides=(8, 4))
    assert c32.tolist() == [[101, -5], [103, -3]]
    c8 = np.ndarray((2, 2), dtype="<i1", buffer=image, offset=128, strides=(2, 1))
    assert c8.tolist() == [[127, -5], [127, -3]]        # (101 * 3 + 1) >> 1 = 152 -> 127
    plain = np.ndarray((2, 2), dtype="<i1", buffer=image, offset=192, strides=(2, 1))
    assert plain.tolist() == [[2, 2], [5, 4]]           # multiplier field unused: (x * 3 + 1) >> 1, x
    assert not image[256:272].any()


def test_ratio_to_mult_shift_keeps_to_its_bits():
    assert ratio_to_mult_shift(0.25, 26, 63) == (1, 2)
    assert ratio_to_mult_shift(3.0, 32, 63) == (3, 0)
    # a ratio just below 2**mult_bits rounds up to it: no negative shift
    with pytest.raises(ParameterError, match=r"^scale ratio 65535\.9 is too large"):
        ratio_to_mult_shift(65535.9)
    # a shift capped at max_shift keeps fewer bits instead of failing
    assert ratio_to_mult_shift(2.0 ** -60 * 1.5, 26, 63) == (3, 61)
    assert ratio_to_mult_shift(2.0 ** -60 * 1.3, 26, 63) == (5, 62)     # 10.4 / 2**63
    with pytest.raises(ParameterError, match=r"too small to represent \(below 2\*\*-63\)$"):
        ratio_to_mult_shift(3 * 2.0 ** -70, 16, 62)
    assert ratio_to_mult_shift(np.float32(0.5)) == (1, 1)


def test_scale_words_round_trip():
    rng = np.random.default_rng(5)
    scales = 2.0 ** rng.uniform(-38, 25, 500)
    words = channel_scale_words(scales)
    assert words.dtype == np.uint32
    multipliers, shifts = split_scale_words(words)
    assert multipliers.max() < 2**CHANNEL_MULT_BITS and shifts.max() <= 63 and multipliers.min() >= 1
    assert np.abs(multipliers / 2.0 ** shifts / scales - 1).max() < 2.0 ** -25
    assert np.array_equal(scale_words(multipliers, shifts), words)
    for scale in 2.0 ** rng.uniform(-31, 31, 50):      # full precision down to 2**-32
        mult, shift = command_scale(scale)
        assert mult < 2**32 and shift <= 63 and abs(mult / 2**shift / scale - 1) < 2.0 ** -31
    assert channel_scale_words(np.array([], dtype=float)).shape == (0,)
    assert channel_scale_words([2.0**-63]).tolist() == [1 | 63 << CHANNEL_MULT_BITS]


@pytest.mark.parametrize("scales, message", [
    ([1.0, 0.0], r"^scale\[1\]: scale ratio must be a positive finite number, not 0\.0$"),
    ([-0.5], r"^scale\[0\]: scale ratio must be a positive finite number, not -0\.5$"),
    ([np.inf], r"^scale\[0\]: scale ratio must be a positive finite number, not inf$"),
    ([np.nan], r"^scale\[0\]: scale ratio must be a positive finite number, not nan$"),
    ([2.0**26], r"^scale\[0\]: scale ratio 67108864\.0 is too large \(needs a negative shift\)$"),
    ([2.0**-66], r"^scale\[0\]: scale ratio .* is too small to represent \(below 2\*\*-64\)$"),
    ([[1.0]], r"^per-channel scales must be a 1-D array of real numbers, not float64 of shape \(1, 1\)$"),
    (["1"], r"^per-channel scales must be a 1-D array of real numbers, not <U1 of shape \(1,\)$"),
])
def test_bad_channel_scales(scales, message):
    with pytest.raises(ParameterError, match=message):
        channel_scale_words(scales)


def test_bad_command_scales_and_words():
    with pytest.raises(ParameterError, match=r"^scale ratio 4294967296\.0 is too large"):
        command_scale(2.0**32)
    with pytest.raises(ParameterError, match=r"^scale ratio must be a positive finite number, not True$"):
        command_scale(True)
    with pytest.raises(ParameterError, match=r"^per-channel multipliers must be in 0\.\.2\*\*26-1$"):
        scale_words([2**26], [0])
    with pytest.raises(ParameterError, match=r"^per-channel shifts must be in 0\.\.63$"):
        scale_words([1], [64])
    with pytest.raises(ParameterError, match=r"^multipliers and shifts must be 1-D integer arrays"):
        scale_words([1, 2], [0])


def test_cycle_model_reads_bias_and_scales_with_a_blocks_first_chunk():
    config = GemmConfig(rows=4, cols=4, mem_width=128, k_chunk=64)   # 16-byte beats, Q = 4
    cmd = dict(m=8, k=100, n=21)
    first, second = chunks(config, dict(cmd, bias=1, int8=1, per_channel=1))[:2]
    plain = chunks(config, cmd)[0]
    row = -(-first["n_len"] * 4 // 16)
    assert (first["n_len"], row) == (16, 4)
    assert load_beats(config, first) == load_beats(config, plain) + 2 * row
    assert load_beats(config, second) == load_beats(config, chunks(config, cmd)[1])
    acc = chunks(config, dict(cmd, accumulate=1, bias=1))[0]
    assert load_beats(config, acc) == load_beats(config, plain) + (4 + 1) * row
    # the writer: ceil(n_len / Q) cycles per row, int32 and int8 alike
    last = chunks(config, dict(cmd, int8=1))[-1]
    assert (last["m_len"], last["n_len"]) == (4, 5)
    assert write_cycles(config, last) == write_cycles(config, chunks(config, cmd)[-1]) == 4 * 2


def test_cycle_model_adds_the_first_chunks_extra_beats_when_compute_bound():
    config = GemmConfig(rows=4, cols=4, mem_width=128, k_chunk=64)
    cmd = dict(m=32, k=256, n=40)
    base = gemm_cycles(config, [cmd], lat=3)
    assert base["exact"]
    for extra, beats in [(dict(bias=1), 4), (dict(int8=1), 0), (dict(int8=1, per_channel=1), 4),
                         (dict(int8=1, per_channel=1, bias=1), 8)]:
        model = gemm_cycles(config, [dict(cmd, **extra)] * 3, lat=3)
        assert model["exact"]
        assert model["cycles"] == gemm_cycles(config, [cmd] * 3, lat=3)["cycles"] + beats, extra
    # a rejected command (per-channel int32) runs nothing
    assert gemm_cycles(config, [dict(cmd, per_channel=1)])["cycles"] == 8
    assert START > 0


def test_block_buffers_wait_for_the_writer(monkeypatch):
    """A block's old C, bias and scales reuse the block buffer of the block
    two before: with short K their load waits for that block's write."""
    import bertforge.sim.gemm_cycles as model
    config = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=32)
    plain, biased = dict(m=5, k=9, n=7), dict(m=5, k=9, n=7, bias=1)
    before = gemm_cycles(config, [plain])["cycles"], gemm_cycles(config, [biased])
    assert not before[1]["exact"] and before[1]["bound"] == "memory"
    monkeypatch.setattr(model, "RELEASE", model.RELEASE + 1)
    assert gemm_cycles(config, [plain])["cycles"] == before[0]          # no block jobs
    assert gemm_cycles(config, [biased])["cycles"] == before[1]["cycles"] + 1
    # long K: the chunks in between hide the wait
    long = dict(m=8, k=256, n=8, bias=1)
    assert gemm_cycles(config, [long])["exact"]


# ---- transposed stores (transpose_c)

def test_transposed_store_config_golden_and_write_cycles():
    """``transpose_c`` is a late field (absent from to_dict when off); the
    golden model writes C^T with ``c_stride`` between C's columns, checks
    C^T's extent and rejects accumulate; an engine without the field
    ignores it. The writer's cycles: an element a cycle after the first
    beat's pieces."""
    plain = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=10, k_chunk=8)
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=10, k_chunk=8, transpose_c=True)
    assert "transpose_c" not in plain.to_dict() and config.to_dict()["transpose_c"] is True
    assert config.name == plain.name + "_tc"
    with pytest.raises(ValueError, match="transpose_c must be false for the sparse engine"):
        SparseEngineConfig(rows=2, cols=2, mem_width=64, k_chunk=8, transpose_c=True)
    rng = np.random.default_rng(1)
    a, b = rng.integers(-128, 128, (3, 4)), rng.integers(-128, 128, (4, 5))
    cmd = dict(m=3, k=4, n=5, a_addr=0, b_addr=16, c_addr=64, a_stride=4, b_stride=5,
               c_stride=32, transpose_c=1)
    for cfg, layout in ((config, "transposed"), (plain, "row-major")):
        image = np.zeros(1024, dtype=np.uint8)
        image[0:12] = a.astype(np.int8).view(np.uint8).ravel()
        image[16:36] = b.astype(np.int8).view(np.uint8).ravel()
        assert run_commands(cfg, image, [cmd]) == [False]
        rows, cols = (5, 3) if layout == "transposed" else (3, 5)
        c = np.ndarray((rows, cols), dtype="<i4", buffer=image, offset=64, strides=(32, 4))
        assert np.array_equal(c.T if layout == "transposed" else c, a @ b)
    top = 1 << config.addr_width
    fits = dict(cmd, c_addr=top - 4 * 32 - 12)         # 4 strides, then 3 int32
    assert not command_rejected(config, fits) and not command_rejected(plain, fits)
    assert command_rejected(config, dict(fits, c_addr=fits["c_addr"] + 1))
    assert command_rejected(config, dict(cmd, accumulate=1))
    assert not command_rejected(plain, dict(cmd, accumulate=1))
    # write cycles of a 2 x 8 block (Q = 2: 4 pieces a row)
    block = dict(chunks(config, dict(m=2, k=8, n=8, transpose_c=1))[0])
    assert block["transpose_c"] and not chunks(plain, dict(m=2, k=8, n=8, transpose_c=1))[0]["transpose_c"]
    assert write_cycles(config, dict(block, transpose_c=False)) == 2 * 4
    assert write_cycles(config, block) == 16 + 0                          # int32: a piece a beat
    assert write_cycles(config, dict(block, int16=True)) == 16 + 1       # two pieces a beat
    assert write_cycles(config, dict(block, int8=True)) == 16 + 3        # a row a beat


def test_scheduler_emits_transposed_c_bases():
    """With ``transpose_c`` a chunk's C base is element [m0, n0] of C^T:
    ``c_addr + n0 * c_stride + m0 * size``; other commands keep theirs."""
    config = GemmConfig(rows=3, cols=5, mem_width=64, addr_width=12, k_chunk=16, transpose_c=True)
    cmd = dict(m=7, k=20, n=12, a_addr=0, b_addr=400, c_addr=1200, a_stride=20, b_stride=12,
               c_stride=9, int8=1, transpose_c=1, tag=7)
    plain = dict(cmd, transpose_c=0, c_stride=12, tag=8)
    got = scheduler_descriptors(config, (cmd, plain), 80, lambda payload: (
        int(payload.tag), int(payload.c_base), int(payload.transpose_c)) if int(payload.first) else None)
    walk = [(c["tag"], e["m0"], e["n0"]) for c in (cmd, plain) for e in chunks(config, c)
            if e["first"]]
    expected = [(tag, 1200 + n0 * 9 + m0, 1) if tag == 7 else (tag, 1200 + m0 * 12 + n0, 0)
                for tag, m0, n0 in walk]
    assert got == expected and len(got) == 2 * 3 * 3     # 3 blocks x 3 panels each
