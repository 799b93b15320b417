"""GEMM engine: parameter checks, golden model, cycle model bookkeeping and the
tile scheduler in amaranth.sim (fast, no Verilator)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from config_helpers import config_tests
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.tile_scheduler import TileScheduler
from bertforge.sim.fixed_golden import requantize
from bertforge.sim.gemm_cycles import chunks, gemm_cycles, ideal_cycles
from bertforge.sim.gemm_golden import command_error, gemm_golden, reduction_pieces, run_commands
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
])


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


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_scheduler_chunks(dataflow):
    """The scheduler's descriptors equal the cycle model's chunk walk; a bad
    command gives one error descriptor."""
    config = GemmConfig(rows=3, cols=5, dataflow=dataflow, mem_width=64, addr_width=12,
                        k_chunk=16, m_tile=4)
    dut = TileScheduler(config)
    cmd = dict(m=9, k=35, n=12, a_addr=0, b_addr=400, c_addr=1200, a_stride=40, b_stride=12,
               c_stride=48, tag=7)
    bad = dict(cmd, a_addr=4000, tag=8)
    got = []

    async def bench(ctx):
        ctx.set(dut.chunk.ready, 1)
        for c in (cmd, bad):
            await stream_put(ctx, dut.cmd, c)
        await ctx.tick().repeat(60)

    async def monitor(ctx):
        async for _, _, valid, payload in ctx.tick().sample(dut.chunk.valid, dut.chunk.payload):
            if valid:
                got.append({name: int(getattr(payload, name)) for name in (
                    "m_len", "n_len", "k_len", "tiles", "kblocks", "first", "last", "end",
                    "error", "a_base", "b_base", "c_base", "tag")})

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(monitor, background=True)
    sim.run()
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
