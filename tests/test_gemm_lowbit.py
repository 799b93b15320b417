"""4-bit weights in the GEMM engine (``GemmConfig(weight_bits=4)``, issue
36): B packed two K rows to a byte row, unpacked and sign-extended at the B
buffer's read port (:class:`~bertforge.rtl.loader.Int4Unpack`).

Fast: the unpacker in amaranth.sim against ``unpack_int4``, the packed
memory layout against the golden model's, whole small engines (both
dataflows) in amaranth.sim, and the parameter checks. One Verilator model
(2x2 OS): compute-bound commands with exact cycles and half of B's beats,
then random shapes, extremes and bad commands behind random stalls."""

import dataclasses

import numpy as np
import pytest
from amaranth.sim import Simulator

from bertforge.generators.gemm_sim import layout_problems, random_operands, read_matrix
from bertforge.rtl.errors import ParameterError, ParameterTypeError
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.loader import Int4Unpack
from bertforge.rtl.sparse_engine import SparseEngineConfig
from bertforge.sim.gemm_cycles import b_rows, chunks, gemm_cycles, load_beats
from bertforge.sim.gemm_golden import gemm_golden, packed_b_view, run_commands
from bertforge.sim.lowbit_golden import pack_int4, unpack_int4

from helpers import gemm_exact, gemm_stressed
from test_gemm_amaranth import run_engine


@pytest.mark.parametrize("width, lanes, mem_width", [(8, 4, 32), (16, 2, 32), (8, 3, 32)])
def test_unpack_sign_extends_each_lanes_nibble(width, lanes, mem_width):
    rng = np.random.default_rng(width + lanes)
    nbytes = mem_width // 8
    words = [bytes([0x87] * nbytes), bytes([0x78] * nbytes), bytes([0xF0, 0x0F, 0x80, 0x08])]
    words += [rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes() for _ in range(40)]
    dut = Int4Unpack(lanes=lanes, width=width, mem_width=mem_width)
    mask = (1 << width) - 1

    async def bench(ctx):
        for word in words:
            unpacked = unpack_int4(np.frombuffer(word, np.uint8))    # low, high, low, ...
            for high in (0, 1):
                ctx.set(dut.i, int.from_bytes(word, "little"))
                ctx.set(dut.high, high)
                await ctx.delay(1e-9)
                got = ctx.get(dut.o)
                want = unpacked[high::2][:lanes]
                lanes_out = [(got >> (width * j)) & mask for j in range(lanes)]
                assert lanes_out == [int(v) & mask for v in want]

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


def test_unpack_covers_both_extremes():
    # The first two words above: 0x87 is (7, -8), 0x78 is (-8, 7).
    assert unpack_int4(np.array([0x87, 0x78], np.uint8)).tolist() == [7, -8, -8, 7]


def test_packed_b_layout_is_pack_int4_along_k():
    config = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=12, k_chunk=8, weight_bits=4)
    rng = np.random.default_rng(3)
    for k in (1, 2, 7, 8):
        b = rng.integers(-8, 8, size=(k, 5))
        image, (cmd,) = layout_problems(config, [dict(m=2, k=k, n=5, a=np.ones((2, k), int), b=b)])
        assert cmd["b_stride"] == 5
        assert np.array_equal(packed_b_view(image, cmd["b_addr"], cmd["b_stride"], k, 5), b)
        even = np.concatenate([b, np.zeros((k % 2, 5), int)])
        raw = image[cmd["b_addr"]:cmd["b_addr"] + even.size // 2].reshape(-1, 5)
        assert np.array_equal(raw, pack_int4(even.T).T)


def test_b_reads_take_half_the_beats():
    config = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=12, k_chunk=8)
    packed = dataclasses.replace(config, weight_bits=4)
    cmd = dict(m=2, k=13, n=2)
    dense = [load_beats(config, ch) for ch in chunks(config, cmd)]
    assert [b_rows(packed, ch) for ch in chunks(packed, cmd)] == [4, 3]
    assert [b_rows(config, ch) for ch in chunks(config, cmd)] == [8, 5]
    four = [load_beats(packed, ch, b_rows(packed, ch)) for ch in chunks(packed, cmd)]
    # A: 2 rows x 2 beats, then 1 x 2; B: 8 and 5 rows -> 4 and 3 beats.
    assert dense == [4 + 8, 4 + 5] and four == [4 + 4, 4 + 3]
    assert gemm_cycles(packed, [cmd])["cycles"] <= gemm_cycles(config, [cmd])["cycles"]


def engine_problems(config):
    p = config.panel
    return [dict(m=3, k=11, n=5, bias=True, scale=np.array([3e-3, 1e-2, 5e-2, 1e-3, 2e-3])),
            dict(m=4, k=17, n=2 * p + 1, pad=1),                    # odd K, past the chunk
            dict(m=2, k=20, n=3, extreme=True),                     # -128/127 by -8/7
            dict(m=2, k=9, n=3, extreme=True, int8=1, multiplier=1, shift=0),    # saturates
            dict(m=5, k=6, n=7, accumulate=1, bias=True),
            dict(raw=dict(m=2, k=5, n=2, b_addr=(1 << config.addr_width) - 5, b_stride=2))]


@pytest.mark.parametrize("dataflow, arith", [("os", "int8"), ("ws", "int8"), ("os", "int16"),
                                             ("ws", "int16")])
def test_engine_with_packed_weights_in_amaranth(dataflow, arith):
    config = GemmConfig(rows=2, cols=2, dataflow=dataflow, mem_width=32, addr_width=12,
                        k_chunk=8, m_tile=4, arith=arith, weight_bits=4)
    problems = engine_problems(config)
    rng = np.random.default_rng(7)
    image, commands = layout_problems(config, problems, rng)
    expected = image.copy()
    errors = run_commands(config, expected, commands)
    done, _ = run_engine(config, image, commands)
    assert errors == [False] * 5 + [True]
    assert done == [(c["tag"], int(e)) for c, e in zip(commands, errors)]
    assert np.array_equal(image, expected)
    a, b = random_operands(config, np.random.default_rng(0), 2, 20, 3, extreme=True)
    top = (1 << (config.width - 1)) - 1
    assert set(np.unique(b)) == {-8, 7} and set(np.unique(a)) == {-top - 1, top}


def test_parameters():
    with pytest.raises(ParameterError, match=r"^weight_bits must be 8 or 4, not 2$"):
        GemmConfig(weight_bits=2)
    with pytest.raises(ParameterTypeError, match=r"^weight_bits must be an integer, not '4'$"):
        GemmConfig(weight_bits="4")
    with pytest.raises(ParameterError, match=r"^weight_bits 4 needs arith 'int' and serial False, "
                                             r"not 'bf16' and False$"):
        GemmConfig(arith="bf16", weight_bits=4)
    with pytest.raises(ParameterError, match=r"^weight_bits 4 needs arith 'int' and serial False, "
                                             r"not 'int' and True$"):
        GemmConfig(rows=2, cols=2, serial=True, weight_bits=4)
    with pytest.raises(ParameterError, match=r"^weight_bits must be 8 for the sparse engine, not 4$"):
        SparseEngineConfig(weight_bits=4)
    with pytest.raises(ParameterError, match=r"^lanes must be an integer <= 4, not 5$"):
        Int4Unpack(lanes=5, width=8, mem_width=32)
    with pytest.raises(ParameterError, match=r"^width must be 8 or 16, not 4$"):
        Int4Unpack(lanes=2, width=4, mem_width=32)
    config = GemmConfig(weight_bits=4)
    assert config.name == "gemm_4x4_os_w4" and config.to_dict()["weight_bits"] == 4
    assert "weight_bits" not in GemmConfig().to_dict()
    GemmEngine(config)


# ---- Verilator: one model, 2x2 output stationary

W4 = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=15, k_chunk=16, weight_bits=4)


def test_engine_with_packed_weights_in_verilator(tmp_path):
    p, kc = W4.panel, W4.k_chunk
    # Compute bound: exact cycles (the model counts B's beats halved).
    bound = [dict(m=2, k=2 * kc, n=p, bias=True, scale=np.linspace(2e-3, 3e-2, p)),
             dict(m=4, k=4 * kc, n=2 * p),
             dict(m=2, k=3 * kc, n=p, pad=3)]
    gemm_exact(W4, bound, np.random.default_rng(5), tmp_path / "exact")

    # Random shapes, extremes, saturation and bad commands behind random stalls.
    rng = np.random.default_rng(11)
    shapes = [(int(m), int(k), int(n)) for m, k, n in rng.integers(1, 24, (3, 3))]
    shapes += [(1, 1, 1), (7, 13, 5), (20, 3 * kc + 5, 2 * p + 3), (4, 40, 4)]   # > every buffer
    dense = []       # operands given: checked below against gemm_golden on them, dense
    for index, (m, k, n) in enumerate(shapes):
        a, b = random_operands(W4, rng, m, k, n, extreme=index == len(shapes) - 1)  # -128 x -8
        dense.append(dict(m=m, k=k, n=n, a=a, b=b, pad=index % 2))
    problems = dense + [
        dict(m=6, k=40, n=9, extreme=True, int8=1, multiplier=1, shift=0),   # saturates
        dict(m=5, k=6, n=7, accumulate=1, bias=True),
        dict(m=7, k=13, n=11, bias=True, scale=np.linspace(1e-3, 2e-2, 11)),
        dict(raw=dict(m=2, k=3, n=4, b_addr=(1 << 15) - 5, b_stride=4)),   # B leaves memory
        dict(raw=dict(m=2, k=3, n=4, b_addr=(1 << 15) - 8, b_stride=4,      # B just fits
                      a_addr=0, a_stride=3, c_addr=(1 << 15) - 64, c_stride=16))]
    rng = np.random.default_rng(12)
    out, commands = gemm_stressed(W4, problems, rng, tmp_path / "stress")
    for prob, cmd in zip(dense, commands):
        assert np.array_equal(read_matrix(W4, out, cmd), gemm_golden(W4, prob["a"], prob["b"]))
    assert set(np.unique(dense[-1]["b"])) == {-8, 7}
    saturated = read_matrix(W4, out, commands[len(dense)])
    assert saturated.max() == 127 and saturated.min() == -128
