"""Group multipliers of 4-bit weights in the GEMM engine
(``GemmConfig(weight_group=...)``, issue 36): a command with ``w4`` has
packed 4-bit B and a 4-bit multiplier code per group of ``weight_group`` K
rows (one chunk) and output column, which the accumulator decodes
(``GROUP_MULTS``) and multiplies the chunk's sums by. Other commands run
dense int8 B on the same engine.

Fast: whole small engines in amaranth.sim against the golden model (w4 and
dense commands mixed, extremes, every code, bad commands), the code layout,
the cycle model's beats, the parameter checks, and the Verilator model with
exact cycles and behind random stalls."""

import dataclasses

import numpy as np
import pytest

from bertforge.generators.gemm_sim import layout_problems, read_matrix
from bertforge.rtl.accumulator import GROUP_MULTS
from bertforge.rtl.errors import ParameterError
from bertforge.rtl.gemm import GemmConfig
from bertforge.sim.gemm_cycles import b_rows, chunks, load_beats
from bertforge.sim.gemm_golden import gemm_golden, group_mults_view, run_commands
from bertforge.sim.lowbit_golden import MULT_CODES
from bertforge.sim.payload_np import pack_codes

from helpers import gemm_exact, gemm_stressed
from test_gemm_amaranth import run_engine

G8 = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=13, k_chunk=8, weight_group=8)


def w4_problem(rng, m, k, n, *, extreme=False, group=8, **extra):
    """A command of 4-bit weights with random codes (every code once when
    there are 16 or more), as given operands ``a``, ``b``, ``codes``
    (groups of ``group`` K rows)."""
    groups = -(-k // group)
    codes = rng.integers(0, 16, (groups, n))
    if codes.size >= 16:
        codes.ravel()[:16] = rng.permutation(16)
    if extreme:
        a, b = rng.choice([-128, 127], (m, k)), rng.choice([-8, 7], (k, n))
        a[0], b[:, 0] = -128, -8          # the largest sum: K * 128 * 8 * 256
        codes[:] = 15
    else:
        a, b = rng.integers(-128, 128, (m, k)), rng.integers(-8, 8, (k, n))
    return dict(m=m, k=k, n=n, a=a, b=b, codes=codes, **extra)


def dense_product(problem):
    """The problem's A @ (B times its group multipliers), as int64."""
    mult = np.repeat(np.asarray(GROUP_MULTS)[problem["codes"]], 8, axis=0)[:problem["k"]]
    return problem["a"] @ (problem["b"] * mult)


def test_codes_table_is_the_formats():
    assert list(GROUP_MULTS) == MULT_CODES.tolist()
    assert GROUP_MULTS[0] == 19 and GROUP_MULTS[-1] == 256


def test_code_layout_two_a_byte_along_n():
    codes = np.array([[1, 2, 15], [0, 7, 8]])
    assert pack_codes(codes).tolist() == [[0x21, 0x0F], [0x70, 0x08]]
    rng = np.random.default_rng(1)
    prob = w4_problem(rng, 2, 13, 5)
    image, (cmd,) = layout_problems(G8, [prob])
    assert cmd["w4"] == 1 and cmd["b_stride"] == 5
    mult = group_mults_view(G8, image, cmd["mult_addr"], 13, 5)
    assert np.array_equal(mult, np.repeat(np.asarray(GROUP_MULTS)[prob["codes"]], 8, axis=0)[:13])
    with pytest.raises(ValueError, match="0 .. 15"):
        pack_codes([[16]])


def test_mixed_b_read_in_amaranth():
    """The B buffer read of an engine with group multipliers
    (``packed_read`` with ``packed``): a packed chunk's row ``k`` is nibble
    ``k % 2`` of word ``k // 2`` of its slot, sign-extended; a dense
    chunk's is word ``k`` as it is; same one-cycle latency."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.memory import Memory
    from amaranth.lib.wiring import In, Out
    from bertforge.rtl.engine import read_port
    from bertforge.rtl.loader import packed_read
    from bertforge.sim.payload_np import unpack_int4
    kc, mb = G8.k_chunk, G8.mem_bytes
    rng = np.random.default_rng(4)
    words = rng.integers(0, 256, (2 * kc, mb), dtype=np.uint8)
    words[0], words[1] = 0x87, 0x78                    # (7, -8) and (-8, 7) in every lane

    class Reader(wiring.Component):
        def __init__(self):
            super().__init__({"addr": In(range(2 * kc)), "packed": In(1), "data": Out(G8.mem_width)})

        def elaborate(self, platform):
            m = Module()
            mem = m.submodules.mem = Memory(shape=G8.mem_width, depth=2 * kc,
                                            init=[int.from_bytes(w.tobytes(), "little") for w in words])
            port = read_port(2 * kc, G8.mem_width).signature.flip().create()
            packed_read(m, "b", G8, port, mem, self.packed)
            m.d.comb += [port.addr.eq(self.addr), self.data.eq(port.data)]
            return m

    dut = Reader()
    reads = [(slot, k, packed) for slot in (0, 1) for k in range(kc) for packed in (1, 0)]
    reads += [(int(rng.integers(2)), int(rng.integers(kc)), int(rng.integers(2))) for _ in range(40)]

    def want(slot, k, packed):
        if not packed:
            return words[slot * kc + k].tolist()
        lanes = unpack_int4(words[slot * kc + k // 2])[k % 2::2]
        return [int(v) & 0xFF for v in lanes]

    async def bench(ctx):
        for slot, k, packed in reads:
            ctx.set(dut.addr, slot * kc + k)
            ctx.set(dut.packed, packed)
            await ctx.tick()
            got = ctx.get(dut.data).to_bytes(mb, "little")
            assert list(got) == want(slot, k, packed), (slot, k, packed)

    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert want(0, 0, 1) == [7] * mb and want(0, 1, 1) == [0xF8] * mb


def test_w4_chunks_read_half_of_b_and_a_code_beat():
    cmd = dict(m=2, k=13, n=2, w4=1)
    assert [b_rows(G8, ch) for ch in chunks(G8, cmd)] == [4 + 1, 3 + 1]
    assert [b_rows(G8, ch) for ch in chunks(G8, dict(cmd, w4=0))] == [8, 5]
    assert [load_beats(G8, ch, b_rows(G8, ch)) for ch in chunks(G8, cmd)] == [4 + 5, 4 + 4]
    plain = dataclasses.replace(G8, weight_group=0)
    assert [b_rows(plain, ch) for ch in chunks(plain, cmd)] == [8, 5]     # no w4 field there


def engine_problems(rng):
    return [w4_problem(rng, 3, 20, 5, bias=True, scale=np.array([3e-5, 1e-4, 5e-5, 1e-5, 2e-5])),
            dict(m=4, k=17, n=5, pad=1),                                  # dense int8 B
            w4_problem(rng, 4, 32, 9, pad=3),                             # every code
            w4_problem(rng, 2, 24, 3, extreme=True),                      # -128/127 x -8/7 x 256
            w4_problem(rng, 2, 9, 3, extreme=True, int8=1, multiplier=1, shift=0),   # saturates
            w4_problem(rng, 5, 6, 7, accumulate=1, bias=True),
            dict(raw=dict(m=2, k=9, n=3, b_addr=0, b_stride=3, w4=1,       # codes leave memory
                          mult_addr=(1 << 13) - 3)),
            dict(raw=dict(m=2, k=9, n=3, b_addr=0, b_stride=3, w4=1,       # codes just fit
                          mult_addr=(1 << 13) - 4, c_addr=64, c_stride=12, a_stride=9))]


def test_engine_with_group_multipliers_in_amaranth():
    rng = np.random.default_rng(7)
    problems = engine_problems(rng)
    image, commands = layout_problems(G8, problems, rng)
    expected = image.copy()
    errors = run_commands(G8, expected, commands)
    assert errors == [False] * 6 + [True, False]
    done, _ = run_engine(G8, image, commands, limit=6000)
    assert done == [(c["tag"], int(e)) for c, e in zip(commands, errors)]
    assert np.array_equal(image, expected)
    # The golden model against the operands as drawn (int32 C).
    for index in (2, 3):
        assert np.array_equal(read_matrix(G8, image, commands[index]), dense_product(problems[index]))
    assert np.abs(dense_product(problems[3])).max() == 24 * 128 * 8 * 256
    assert set(read_matrix(G8, image, commands[4]).ravel().tolist()) <= {-128, 127}


def test_group_parameter_checks():
    with pytest.raises(ParameterError, match=r"^k_chunk must equal weight_group = 32 \(a chunk's "
                                             r"sums take one multiplier\), not 64$"):
        GemmConfig(rows=4, cols=4, mem_width=128, k_chunk=64, weight_group=32)
    with pytest.raises(ParameterError, match=r"^weight_group must be a power of two, not 24$"):
        GemmConfig(rows=4, cols=4, mem_width=64, k_chunk=24, weight_group=24)
    with pytest.raises(ParameterError, match=r"^weight_group needs an output stationary int8 "):
        GemmConfig(rows=4, cols=4, mem_width=128, k_chunk=32, weight_group=32, dataflow="ws")
    with pytest.raises(ParameterError, match=r"^weight_group needs an output stationary int8 "):
        GemmConfig(rows=4, cols=4, mem_width=128, k_chunk=32, weight_group=32, weight_bits=4)
    with pytest.raises(ParameterError, match=r"^weight_group needs an output stationary int8 "):
        GemmConfig(rows=4, cols=4, mem_width=256, k_chunk=32, weight_group=32, arith="int16")
    with pytest.raises(ParameterError, match=r"^k_chunk must be a multiple of mem_width // width "
                                             r"= 64, not 32$"):
        GemmConfig(rows=16, cols=16, mem_width=512, k_chunk=32, weight_group=32)
    with pytest.raises(ParameterError, match=r"^weight_group must be a non-negative integer"):
        GemmConfig(weight_group=-1)
    config = GemmConfig(rows=4, cols=4, mem_width=128, k_chunk=32, weight_group=32)
    assert config.name == "gemm_4x4_os_g32" and config.to_dict()["weight_group"] == 32
    assert "weight_group" not in GemmConfig().to_dict()


# ---- Verilator: one model, 2x2 output stationary, groups of 16

VG = GemmConfig(rows=2, cols=2, mem_width=32, addr_width=15, k_chunk=16, weight_group=16)


def test_engine_with_group_multipliers_in_verilator(tmp_path):
    rng = np.random.default_rng(5)
    p, kc = VG.panel, VG.k_chunk
    # Compute bound: exact cycles (B's beats halved, a code beat a chunk).
    bound = [w4_problem(rng, 2, 2 * kc, p, bias=True, scale=np.linspace(2e-5, 3e-4, p), group=16),
             w4_problem(rng, 4, 4 * kc, 2 * p, group=16),
             dict(m=2, k=3 * kc, n=p),                                  # dense, between
             w4_problem(rng, 2, 3 * kc, p, pad=3, group=16)]
    gemm_exact(VG, bound, rng, tmp_path / "exact")

    # Random shapes, extremes, saturation and bad commands behind random stalls.
    shapes = [(int(m), int(k), int(n)) for m, k, n in rng.integers(1, 40, (4, 3))]
    given = [w4_problem(rng, m, k, n, pad=i % 2, group=16) for i, (m, k, n) in enumerate(shapes)]
    given.append(w4_problem(rng, 3, 3 * kc + 5, 2 * p + 1, extreme=True, group=16))
    problems = given + [
        dict(m=6, k=23, n=9, extreme=True, int8=1, multiplier=1, shift=0),     # dense, saturates
        w4_problem(rng, 6, 40, 5, extreme=True, int8=1, multiplier=1, shift=0, group=16),
        w4_problem(rng, 5, 6, 7, accumulate=1, bias=True, group=16),
        dict(raw=dict(m=2, k=33, n=4, b_addr=0, b_stride=4, w4=1,       # codes leave memory
                      mult_addr=(1 << 15) - 5)),
        dict(raw=dict(m=2, k=33, n=4, b_addr=0, b_stride=4, w4=1,       # codes just fit
                      mult_addr=(1 << 15) - 6, a_addr=0, a_stride=3, c_addr=(1 << 15) - 64,
                      c_stride=16))]
    out, commands = gemm_stressed(VG, problems, rng, tmp_path / "stress")
    for prob, cmd in zip(given, commands):
        assert np.array_equal(read_matrix(VG, out, cmd), dense_product16(prob))


def dense_product16(problem):
    mult = np.repeat(np.asarray(GROUP_MULTS)[problem["codes"]], 16, axis=0)[:problem["k"]]
    return gemm_golden(VG, problem["a"], problem["b"] * mult)
