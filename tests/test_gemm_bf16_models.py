"""The bf16 GEMM engine without Verilator: the binary32 add of the
accumulator (golden against exact rational arithmetic, the hardware adder
and the bf16 output rounding in amaranth.sim against the golden), the
:class:`~bertforge.rtl.accumulator.Accumulator` in amaranth.sim, the golden
model's order and its error against float64, parameter and command checks,
and the command line's one-line errors."""

from fractions import Fraction
import math

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from cli_helpers import assert_one_line_error, npy_flags, run_cli
from test_systolic_bf16_models import binary32_bits
from bertforge.rtl.arith import FP32_NAN, Bf16Arith
from bertforge.rtl.accumulator import Accumulator, accumulator_fields
from bertforge.rtl.engine import project
from bertforge.rtl.errors import ParameterError, ParameterTypeError
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.sparse_engine import SparseEngineConfig
from bertforge.rtl.systolic import SystolicArray
from bertforge.rtl.tile_scheduler import chunk_layout, command_layout
from bertforge.sim.gemm_cycles import gemm_cycles
from bertforge.sim.gemm_golden import (bf16_gemm_golden, command_rejected, fp32_add, gemm_golden,
                                       reduction_pieces)
from bertforge.sim.systolic_golden import bf16_matmul

BF16 = ml_dtypes.bfloat16
FP32_SPECIAL = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000,
                0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001,
                0xFFC00123, 0x3F800000, 0xBF800000, 0x3F800001, 0xB3800000, 0x4B800000,
                0x33800000, 0x00800001, 0x80800001, 0x7F000000]


def as_float(bits):
    return float(np.array(bits, dtype=np.uint32).view(np.float32))


def exact_add(x_bits, y_bits):
    """binary32 bits of ``round(x + y)`` by exact rational arithmetic, the
    documented rules written out independently of the golden model."""
    x, y = as_float(x_bits), as_float(y_bits)
    x = math.copysign(0.0, x) if abs(x) < 2.0 ** -126 else x    # DAZ
    y = math.copysign(0.0, y) if abs(y) < 2.0 ** -126 else y
    if math.isnan(x) or math.isnan(y) or (math.isinf(x) and math.isinf(y) and x != y):
        return FP32_NAN
    if math.isinf(x) or math.isinf(y):
        return 0xFF800000 if (x if math.isinf(x) else y) < 0 else 0x7F800000
    if x == 0 and y == 0:
        return 0x80000000 if math.copysign(1, x) < 0 and math.copysign(1, y) < 0 else 0
    return binary32_bits(Fraction(x) + Fraction(y))


def add_cases(seed, n):
    """(x, y) bits: the specials crossed, then random values of all
    exponents, near-cancellations and sums near overflow and underflow."""
    rng = np.random.default_rng(seed)
    cases = [(x, y) for x in FP32_SPECIAL for y in FP32_SPECIAL]
    for _ in range(n):
        x = int(rng.integers(0, 1 << 32))
        kind = rng.integers(4)
        if kind == 0:
            y = int(rng.integers(0, 1 << 32))
        elif kind == 1:      # -x give or take a few ulps: cancellation
            y = (x ^ 0x80000000) + int(rng.integers(-3, 4))
        elif kind == 2:      # close exponents
            y = (x & 0xFF800000) ^ int(rng.integers(0, 1 << 24)) ^ (int(rng.integers(2)) << 31)
        else:                # exponent apart by up to 30
            shift = int(rng.integers(0, 31)) << 23
            y = (x - shift if (x & 0x7F800000) > shift else x + shift) ^ int(rng.integers(0, 1 << 20))
        cases.append((x, y & 0xFFFFFFFF))
    return cases


def test_golden_add_is_exact_rounding():
    cases = add_cases(1, 3000)
    x = np.array([c[0] for c in cases], np.uint32).view(np.float32)
    y = np.array([c[1] for c in cases], np.uint32).view(np.float32)
    got = fp32_add(x, y).view(np.uint32)
    for (a, b), value in zip(cases, got):
        assert int(value) == exact_add(a, b), (hex(a), hex(b), hex(int(value)))


def test_hardware_add_and_bf16_rounding_match_golden():
    """:meth:`Bf16Arith.add` (the accumulator's and the writer's adder) and
    :meth:`Bf16Arith.round_to_bf16` in amaranth.sim against the golden
    add and ml_dtypes' float32 -> bfloat16 conversion."""
    m = Module()
    x, y = Signal(32), Signal(32)
    total, rounded = Signal(32), Signal(16)
    m.d.comb += [total.eq(Bf16Arith.add(m, x, y)), rounded.eq(Bf16Arith.round_to_bf16(x))]
    cases = add_cases(2, 800)
    xs = np.array([c[0] for c in cases], np.uint32)
    ys = np.array([c[1] for c in cases], np.uint32)
    expected = fp32_add(xs.view(np.float32), ys.view(np.float32)).view(np.uint32)
    finite = (xs & 0x7F800000) != 0x7F800000
    with np.errstate(invalid="ignore"):
        as_bf16 = xs.view(np.float32).astype(BF16).view(np.uint16)

    async def bench(ctx):
        for i, (a, b) in enumerate(cases):
            ctx.set(x, a)
            ctx.set(y, b)
            await ctx.delay(1e-9)
            assert ctx.get(total) == expected[i], (hex(a), hex(b), hex(ctx.get(total)))
            if finite[i] or a in (0x7F800000, 0xFF800000, FP32_NAN):   # sums' NaN is canonical
                assert ctx.get(rounded) == as_bf16[i], (hex(a), hex(ctx.get(rounded)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


class AccumulatorBench(Elaboratable):
    """An :class:`Accumulator` with its buffers; ``probe`` reads the
    accumulator buffer combinationally, ``old_w`` fills old C."""

    def __init__(self, config):
        P, Mt = config.panel, config.block_rows
        array = SystolicArray(config.systolic)
        self.acc = Accumulator(config, project(chunk_layout(config), accumulator_fields(config)),
                               array.signature.members["c"].signature)
        self.acc_mem = Memory(shape=unsigned(P * 32), depth=2 * Mt, init=[])
        self.old_mem = Memory(shape=unsigned(P * 32), depth=2 * Mt, init=[])
        self.old_w = self.old_mem.write_port()
        self.probe = self.acc_mem.read_port(domain="comb")

    def elaborate(self, platform):
        m = Module()
        m.submodules.acc, m.submodules.acc_mem, m.submodules.old_mem = \
            self.acc, self.acc_mem, self.old_mem
        acc_wr = self.acc_mem.write_port(granularity=32)
        wiring.connect(m, self.acc.rd, self.acc_mem.read_port(transparent_for=(acc_wr,)))
        wiring.connect(m, self.acc.wr, acc_wr)
        wiring.connect(m, self.acc.old, self.old_mem.read_port())
        return m


def test_accumulator_adds_binary32_in_order():
    """A 1x2 OS accumulator (one row per chunk, so back-to-back chunks hit
    the same buffer row and the add result is forwarded): blocks of three
    chunks from scratch (the first sum as it is) and of two onto old C,
    random and special values, against :func:`fp32_add` in order."""
    config = GemmConfig(rows=1, cols=2, mem_width=32, k_chunk=2, addr_width=8, arith="bf16")
    dut = AccumulatorBench(config)
    acc = dut.acc
    rng = np.random.default_rng(4)
    pool = np.array(FP32_SPECIAL + [int(v) for v in rng.integers(0, 1 << 32, 60)], np.uint32)
    trials = []
    for _ in range(40):
        rows = rng.choice(pool, (5, 2))
        if rng.integers(2):          # cancel the first row's values
            rows[1] = rows[0] ^ 0x80000000
        old = rng.choice(pool, 2)
        fresh = fp32_add(fp32_add(rows[0].view(np.float32), rows[1].view(np.float32)),
                         rows[2].view(np.float32))
        onto = fp32_add(fp32_add(old.view(np.float32), rows[3].view(np.float32)),
                        rows[4].view(np.float32))
        trials.append((rows, old, fresh.view(np.uint32), onto.view(np.uint32)))

    def word(values):
        return int(values[0]) | int(values[1]) << 32

    async def bench(ctx):
        for rows, old, fresh, onto in trials:
            ctx.set(dut.old_w.addr, 1)
            ctx.set(dut.old_w.data, word(old))
            ctx.set(dut.old_w.en, 1)
            await ctx.tick()
            ctx.set(dut.old_w.en, 0)
            chunks = [(1, 0, 0), (0, 0, 0), (0, 1, 0), (1, 0, 1), (0, 1, 1)]
            for row, (first, last, accumulate) in zip(rows, chunks):
                ctx.set(acc.chunk.payload, {"first": first, "last": last, "accumulate": accumulate,
                                            "tiles": 1})
                ctx.set(acc.chunk.valid, 1)
                ctx.set(acc.c.payload, {"data": [int(row[0]), int(row[1])], "last": 1})
                ctx.set(acc.c.valid, 1)
                await ctx.tick().until(acc.c.ready)
            ctx.set(acc.chunk.valid, 0)
            ctx.set(acc.c.valid, 0)
            await ctx.tick().repeat(3)
            for slot, expected in ((0, fresh), (1, onto)):
                ctx.set(dut.probe.addr, slot)
                await ctx.delay(1e-9)
                got = ctx.get(dut.probe.data)
                assert [got & 0xFFFFFFFF, got >> 32] == [int(v) for v in expected], \
                    (slot, [hex(int(v)) for v in expected], hex(got))
            for _ in range(2):       # the writer's tokens: both slots free again
                ctx.set(acc.released, 1)
                await ctx.tick()
            ctx.set(acc.released, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_golden_follows_the_dataflow_order():
    """The accumulator adds the array's sums per K chunk (OS) or weight
    block (WS): for data whose rounding depends on the order, the two
    dataflows differ, each equals its own piece-by-piece sum, and with one
    piece the golden is the array's :func:`bf16_matmul`."""
    os = GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=8, arith="bf16")
    ws = GemmConfig(rows=3, cols=2, dataflow="ws", mem_width=64, k_chunk=8, arith="bf16")
    assert reduction_pieces(ws, 10) == [(0, 3), (3, 4), (4, 7), (7, 8), (8, 10)]
    k = 40
    a = np.full((1, k), 2.0 ** -25).astype(BF16)
    a[0, 0] = 1
    b = np.ones((k, 1), dtype=BF16)
    c_os, c_ws = gemm_golden(os, a, b), gemm_golden(ws, a, b)
    assert c_os[0, 0] != c_ws[0, 0]
    for config, c in ((os, c_os), (ws, c_ws)):
        acc = None
        for start, stop in reduction_pieces(config, k):
            part = bf16_matmul(a[:, start:stop], b[start:stop])
            acc = part if acc is None else np.float32(np.float64(acc) + np.float64(part))
        assert c[0, 0] == acc[0, 0]
    short = np.random.default_rng(2).standard_normal((3, 8)).astype(BF16)
    assert np.array_equal(gemm_golden(os, short, short.T).view(np.uint32),
                          bf16_matmul(short, short.T).view(np.uint32))
    # bias and old C through the same add; bf16 output rounds the float32 result
    bias = np.array([1.5, -0.0, 3e38], np.float32)
    full = bf16_gemm_golden(os, short, short.T, bias=bias, c_old=np.ones((3, 3), np.float32))
    expected = fp32_add(fp32_add(np.ones((3, 3), np.float32), bf16_matmul(short, short.T)), bias)
    assert np.array_equal(full.view(np.uint32), expected.view(np.uint32))
    rounded = bf16_gemm_golden(os, short, short.T, bf16_out=True)
    assert rounded.dtype == BF16
    assert np.array_equal(rounded.view(np.uint16),
                          bf16_matmul(short, short.T).astype(BF16).view(np.uint16))


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_golden_error_against_float64_is_within_the_bound(dataflow):
    """|C - A @ B - bias| <= gamma(K + 1) (|A| @ |B| + |bias|) against float64
    (K rounded adds in array and accumulator, one for the bias), for a
    long K; the error is not zero, and typically far below the bound."""
    config = GemmConfig(rows=4, cols=4, dataflow=dataflow, mem_width=64, k_chunk=64,
                        m_tile=8, arith="bf16")
    rng = np.random.default_rng(7)
    k = 2000
    a = rng.standard_normal((6, k)).astype(BF16)
    b = (rng.standard_normal((k, 5)) * 8).astype(BF16)
    bias = rng.standard_normal(5).astype(np.float32)
    c = gemm_golden(config, a, b, bias=bias).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64 + bias
    steps = (k + 1) * 2.0 ** -24
    bound = steps / (1 - steps) * (np.abs(a64) @ np.abs(b64) + np.abs(bias))
    error = np.abs(c - exact)
    assert np.all(error <= bound) and error.max() > 0
    assert np.max(error / bound) < 0.25


def test_config_arith_field():
    config = GemmConfig(rows=8, cols=8, mem_width=128, arith="bf16")
    assert (config.width, config.bf16, config.name) == (16, True, "gemm_8x8_os_bf16")
    assert config.systolic.arith == "bf16"
    assert config.to_dict()["arith"] == "bf16"
    assert "arith" not in GemmConfig().to_dict()          # earlier configs: same headers
    assert GemmConfig(arith="int16") == GemmConfig(width=16)
    assert GemmConfig(arith="int8").to_dict() == GemmConfig().to_dict()
    assert "bf16_out" in command_layout(config).members
    assert "bf16_out" not in command_layout(GemmConfig()).members


@pytest.mark.parametrize("fields, error, message", [
    (dict(arith="fp16"), ParameterError, r"^arith must be 'int', 'int8', 'int16' or 'bf16', not 'fp16'$"),
    (dict(arith=16), ParameterTypeError, r"^arith must be a string, not 16$"),
    (dict(arith="bf16", acc_width=24), ParameterError,
     r"^acc_width must be an integer >= 32, not 24$"),      # bf16 sums are binary32
    (dict(arith="bf16", rows=8, cols=8, mem_width=64), ParameterError,
     r"^mem_width must be at least max\(rows, cols\) \* width = 128, not 64$"),
    (dict(arith="bf16", mem_width=64, k_chunk=6), ParameterError,
     r"^k_chunk must be a multiple of mem_width // width = 4, not 6$"),
])
def test_bad_parameters(fields, error, message):
    with pytest.raises(error, match=message):
        GemmConfig(**fields)


def test_sparse_engine_refuses_bf16():
    with pytest.raises(ParameterError, match=r"^arith must be 'int' for the sparse engine "
                                             r"\(integer PEs\), not 'bf16'$"):
        SparseEngineConfig(arith="bf16")


def test_engine_elaborates_without_a_requantizer():
    """The bf16 engine's writer has no requantizer (no DSP blocks there)."""
    from amaranth.back import rtlil
    text = rtlil.convert(GemmEngine(GemmConfig(rows=1, cols=2, mem_width=32, k_chunk=2,
                                               addr_width=8, m_tile=1, arith="bf16")))
    assert "requantizer" not in text and "acc2_prior" in text


def test_command_checks():
    config = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12, arith="bf16")
    ok = dict(m=2, k=3, n=4, a_addr=0, b_addr=64, c_addr=128, a_stride=6, b_stride=8, c_stride=16)
    assert not command_rejected(config, ok)
    for bad in (dict(int8=1), dict(int16=1), dict(per_channel=1, int8=1),
                dict(accumulate=1, bf16_out=1), dict(m=0)):
        assert command_rejected(config, dict(ok, **bad)), bad
    assert not command_rejected(config, dict(ok, accumulate=1, bias=1))
    # C's element size: 4 bytes, or 2 with bf16_out
    end = dict(ok, m=1, n=3, c_addr=(1 << 12) - 6)
    assert command_rejected(config, end) and not command_rejected(config, dict(end, bf16_out=1))
    # an integer engine has no bf16_out: ignored
    assert not command_rejected(GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12),
                                dict(ok, bf16_out=1))
    # the cycle model is the integer engine's (same pipeline): a bf16 command
    # costs what an int16 one does
    int16 = GemmConfig(rows=2, cols=2, mem_width=64, addr_width=12, width=16)
    cmds = [dict(ok, m=9, k=70, n=7, bias=1), dict(ok, bf16_out=1)]
    assert gemm_cycles(config, cmds) == gemm_cycles(int16, [cmds[0], dict(ok, int16=1)])


FLAGS = ["sim", "gemm", "--preset", "tiny", "--arith", "bf16"]


@pytest.mark.parametrize("extra, message", [
    (["--m", "2", "--k", "2", "--n", "2", "--int8"], "--int8 requantizes; the bf16 engine does not"),
    (["--m", "2", "--k", "2", "--n", "2", "--scale"], "--scale requantizes; the bf16 engine does not"),
    (["--m", "2", "--k", "2", "--n", "2", "--shift", "3"], "--shift requantizes"),
])
def test_cli_refuses_requantization(extra, message):
    assert_one_line_error(run_cli(*FLAGS, *extra), message)


def test_cli_bf16_out_needs_bf16():
    assert_one_line_error(run_cli("sim", "gemm", "--preset", "tiny", "--m", "2", "--k", "2",
                                  "--n", "2", "--bf16-out"), "--bf16-out needs --arith bf16")


def test_cli_refuses_bad_files(tmp_path):
    a = np.ones((3, 4), np.float32)
    ints = run_cli(*FLAGS, *npy_flags(tmp_path, a=a.astype(np.int16), b=a.T))
    assert_one_line_error(ints, "holds int16 values; with --arith bf16 it must hold floats")
    bias = run_cli(*FLAGS, *npy_flags(tmp_path, a=a, b=a.T, bias=np.ones(3, np.int32)))
    assert_one_line_error(bias, "with --arith bf16 it must hold N = 3 floats")
    shapes = run_cli(*FLAGS, *npy_flags(tmp_path, a=a, b=a))
    assert_one_line_error(shapes, "A must be M x K and B K x N")
