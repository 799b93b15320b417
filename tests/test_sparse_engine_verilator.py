"""The sparse GEMM engine (rtl/sparse_engine.py) in Verilator, in its
HDL harness (one build: 2x2 array, m_max 8, 64-bit memory, K chunks of 32),
against the golden model (the dense engine's on the decompressed weights)
and the cycle model; plus its config checks and models without a simulator."""

import dataclasses

import numpy as np
import pytest

from bertforge.generators.sparse_engine_sim import layout_sparse_problems, read_c, simulate_sparse_engine
from bertforge.rtl.staged_engine import StagedEngine
from bertforge.rtl.sparse_engine import SparseEngineConfig, SparseEngine, pack_sparse_command
from bertforge.sim.gemm_golden import gemm_golden
from bertforge.sim.sparse_engine_cycles import sparse_engine_cycles
from bertforge.sim.sparse_engine_golden import run_sparse_commands, sparse_command_error
from bertforge.sim.sparse_golden import compressed_rows, prune_nm
from bertforge.sim.coverage import uncovered

from helpers import (GEMM_INT32_LIMITS, gemm_long_count_commands, gemm_pair_problems,
                     gemm_saturating_problems, gemm_top_bits_commands)

TINY = SparseEngineConfig(rows=2, cols=2, mem_width=64, k_chunk=32, m_tile=16, m_max=8, addr_width=15)
#: The ECP5 boards' multiply pipeline (three stages, MULT18X18D cells): only
#: the array and the requantizer differ from TINY's Verilog.
ECP5 = dataclasses.replace(TINY, multiply_stages=3, multiplier_cell="ecp5")
BUILDS = pytest.mark.parametrize("config", [TINY, ECP5], ids=["1-multiply-stage", "ecp5-multipliers"])


@BUILDS
def test_compute_bound_commands_match_golden_and_cycle_model(config, tmp_path):
    """Full panels, several K chunks, every M of the array: measured == model
    (also with the multiply pipeline of the ECP5 board tops)."""
    problems = [dict(m=4, k=64, n=8, pat_n=4, pat_m=8), dict(m=2, k=61, n=8, pat_n=3, pat_m=4),
                dict(m=4, k=64, n=8, pat_n=8, pat_m=8), dict(m=4, k=64, n=8, pat_n=2, pat_m=8),
                dict(m=4, k=64, n=8, pat_n=1, pat_m=4), dict(m=2, k=96, n=8, pat_n=2, pat_m=8)]
    image, commands = layout_sparse_problems(config, problems, np.random.default_rng(1))
    model = sparse_engine_cycles(config, commands)
    assert model["exact"] and model["bound"] == "compute"
    result = simulate_sparse_engine(config, image, commands, seed=1, workdir=tmp_path)
    assert result["passed"], result["log"]
    assert result["match"]
    assert result["cycles"] == result["model_cycles"] == model["cycles"]


def test_edges_partial_groups_accumulate_int8_and_bad_commands_with_stalls(tmp_path):
    """Edge blocks, K not a multiple of M or of k_chunk, accumulate, int8
    output, extremes, and rejected commands between good ones; run clean and
    with random memory latency and stalls on every stream."""
    rng = np.random.default_rng(2)
    problems = [
        dict(m=5, k=77, n=7, pat_n=2, pat_m=4),
        dict(m=4, k=40, n=5, pat_n=1, pat_m=8, pad=3),
        dict(m=3, k=9, n=2, pat_n=8, pat_m=8),
        dict(m=2, k=33, n=3, pat_n=3, pat_m=8, accumulate=1),
        dict(m=3, k=5, n=2, pat_n=1, pat_m=2, int8=1, multiplier=3, shift=9),
        dict(m=3, k=70, n=5, pat_n=1, pat_m=1, extreme=True),
        dict(m=2, k=45, n=3, pat_n=5, pat_m=8, extreme=True),
    ]
    image, commands = layout_sparse_problems(TINY, problems, rng)
    good = dict(commands[0])
    bad = [dict(good, pat_m=3), dict(good, pat_n=0), dict(good, pat_n=5, pat_m=4),
           dict(good, pat_m=16, pat_n=1), dict(good, idx_stride=1 << 14), dict(good, k=0)]
    commands = commands[:3] + bad + commands[3:]
    expected = run_sparse_commands(TINY, image.copy(), commands)
    assert expected == [False] * 3 + [True] * 6 + [False] * 4
    results = []
    stalls = dict(lat_min=3, lat_mask=7, p_req=60, p_data=80, p_wr=70, p_cmd=50, p_done=90)
    for name, knobs in (("clean", {}), ("stalls", stalls)):
        result = simulate_sparse_engine(TINY, image, commands, seed=3, workdir=tmp_path / name, **knobs)
        assert result["passed"], result["log"]
        assert result["match"] and result["errors"] == expected
        for cmd, problem in zip(commands[:3], problems[:3]):
            assert read_c(result["image"], cmd).shape == (problem["m"], problem["n"])
        results.append(result)
    # every kind of command after every kind, and A and C at the top of
    # memory (compressed weights and indices: zeros 2 KiB below it)
    zeros = (1 << TINY.addr_width) - 2048
    image, commands = layout_sparse_problems(TINY, gemm_pair_problems(
        TINY, pat_n=1, pat_m=2, b_addr=zeros, b_stride=2, idx_addr=zeros, idx_stride=2), rng)
    pairs = simulate_sparse_engine(TINY, image, commands, seed=4, workdir=tmp_path / "pairs",
                                   **dict(stalls, p_done=200))
    assert pairs["passed"] and pairs["match"]
    # every functional cover point (sim/funcov_tb.py, the harness's bits) of the three runs
    assert uncovered(results + [pairs], WAIVED) == []


#: Cover points no run can hit, and why: the engine reads only into room it
#: has reserved and takes every read beat it asked for (its loader holds
#: ``rd_data.ready`` high while a request is outstanding, rtl/loader.py).
WAIVED = {f"sparse_engine.rd_data.refused:{b}" for b in ("1", "2-3", "4+")}


def requantization_problems(rng):
    """Commands whose requantization reaches the bits the other tests leave
    alone (issue 40: the sparse engine's mutants 2, 11, 12, 18, 21, 24):
    a per-tensor multiplier with bits 26, 27 and 30 set on an int8 C with
    negative sums and K = 40 (bit 5) and tag 0x81 (bit 7); an int16 C
    with multiplier ``2**27`` (a unit of bit 11 moves outputs by 1/8);
    and per-channel scales of 8-bit multipliers (a bit is a large part of
    each) on 8 columns, their scale words at an address with bit 11 set
    (after a filler problem)."""
    multipliers = [int(v) | 0x20 for v in rng.integers(1, 256, 8)]
    return [
        dict(m=3, k=40, n=5, pat_n=2, pat_m=4, int8=1, multiplier=0x4C3A5F21, shift=38,
             tag=0x81),
        dict(m=4, k=64, n=8, pat_n=4, pat_m=8, int16=1, multiplier=1 << 27, shift=29),
        dict(m=4, k=96, n=8, pat_n=4, pat_m=8),
        dict(m=4, k=48, n=8, pat_n=2, pat_m=4, int16=1, multipliers=multipliers,
             shifts=[8] * 8),
    ]


@BUILDS
def test_requantization_corners(config, tmp_path):
    """(Also on the ECP5 build: its requantizer's products are in the
    multiplier cells.)"""
    rng = np.random.default_rng(9)
    image, commands = layout_sparse_problems(config, requantization_problems(rng), rng)
    assert commands[3]["scale_addr"] >> 11 & 1 and commands[0]["tag"] == 0x81
    result = simulate_sparse_engine(config, image, commands, seed=9, workdir=tmp_path)
    assert result["passed"], result["log"]
    assert result["match"] and not any(result["errors"])
    # the int8 C has values of both signs, and the int16 ones are not all saturated
    c = [read_c(result["image"], cmd) for cmd in commands]
    assert c[0].min() < 0 < c[0].max()
    assert all(np.count_nonzero(np.abs(c[i]) < 32767) > c[i].size // 2 for i in (1, 3))


def valid_indices(image, cmd):
    """Write ``cmd``'s compressed indices into a random memory ``image``:
    row r gets index ``r % pat_n`` in every column (0 to N-1 in each group,
    in order; within K when N = 1 or M divides K)."""
    for r in range(compressed_rows(cmd["k"], cmd["pat_n"], cmd["pat_m"])):
        at = cmd["idx_addr"] + r * cmd["idx_stride"]
        image[at:at + cmd["n"]] = r % cmd["pat_n"]


def test_every_field_at_its_top_bits(tmp_path):
    """The dense engine's commands of fields at their top bits
    (``gemm_top_bits_commands``: refused ones with every field at its top,
    accepted ones whose addresses and strides set bits 3 to 14) with
    patterns (8:8, 2:2, 1:4, 1:1; the refused ones 15:15) and indices whose
    addresses and strides set bits 1 to 14 too (the last ending 2 bytes
    below the top of memory): bit-exact over random memory, the refused
    ones refused with their own tags; one of N = 0, and the refused one
    again with patterns 1:1 and 8:8."""
    top = 1 << TINY.addr_width
    image = np.random.default_rng(15).integers(0, 256, top, dtype=np.uint8)
    most = (1 << TINY.pattern_bits) - 1
    refused = dict(pat_n=most, pat_m=most, idx_addr=top - 1, idx_stride=top - 1)
    extras = [dict(pat_n=8, pat_m=8, idx_addr=0x0800, idx_stride=0x0400), refused,
              dict(pat_n=2, pat_m=2, idx_addr=0x3000, idx_stride=0x4FF0),
              dict(pat_n=1, pat_m=4, idx_addr=0x1554, idx_stride=0x2AAA), refused,
              dict(pat_n=1, pat_m=1, idx_addr=0x6800, idx_stride=0)]
    commands = [dict(cmd, **extra) for cmd, extra in zip(gemm_top_bits_commands(TINY), extras)]
    for cmd in commands[:1] + commands[2:4] + commands[5:]:
        valid_indices(image, cmd)
    # N = 0: a good pattern, refused by the scheduler (its last panel's length 0);
    # every field at its top with patterns 1:1 and 8:8 (the pattern check's
    # compressed rows and their spans at their largest: 65,535 rows and 65,536)
    commands += [dict(commands[1], pat_n=1, pat_m=1, tag=0x12),
                 dict(commands[1], pat_n=8, pat_m=8, tag=0x13), dict(commands[5], n=0, tag=0x11)]
    errors = [False, True, False, False, True, False, True, True, True]
    assert run_sparse_commands(TINY, image.copy(), commands) == errors
    result = simulate_sparse_engine(TINY, image, commands, seed=15, workdir=tmp_path)
    assert result["passed"], result["log"]
    assert result["match"] and result["errors"] == errors
    assert result["tags_ok"]


def test_long_k_m_and_n_count_past_bit_13(tmp_path):
    """The dense engine's long commands (``gemm_long_count_commands``: K =
    20,000, M = 9,000, N = 9,000) as 1:8, 1:2 and 1:1 sparse ones, so that
    the scheduler's and the pattern check's counts run through bits 3 to 14:
    one row of zero indices (stride 0) for the first two; the N = 9,000
    command reads its 9,000 indices before the M = 9,000 one (now last)
    writes its C over them. Bit-exact over random memory."""
    image = np.random.default_rng(16).integers(0, 256, 1 << TINY.addr_width, dtype=np.uint8)
    long_k, long_m, long_n = gemm_long_count_commands()
    zeros = dict(idx_addr=0, idx_stride=0)
    commands = [dict(long_k, a_addr=0x2400, pat_n=1, pat_m=8, **zeros),
                dict(long_n, a_addr=0x7F00, b_addr=0x2400, c_addr=0x4800, pat_n=1, pat_m=2, **zeros),
                dict(long_m, a_addr=0x2400, b_addr=0x7F08, c_addr=0x0000, pat_n=1, pat_m=1,
                     idx_addr=0x7F0C, idx_stride=0)]
    image[:long_n["n"]] = 0
    image[0x7F0C] = 0
    result = simulate_sparse_engine(TINY, image, commands, seed=16, workdir=tmp_path)
    assert result["passed"], result["log"]
    assert result["match"] and result["errors"] == [False] * 3 and result["tags_ok"]


def test_k_offsets_past_bit_10_with_stalls(tmp_path):
    """K = 2,048 (chunk offsets 1,024 to 2,016 set bit 10) with random
    memory latency and stalls, so the scheduler holds a chunk offset for
    varying numbers of cycles before the next descriptor leaves (issue 40,
    the sparse engine's current mutant 8: bit 12 of the offset flipped
    whenever bit 10 is set; the register then alternates every held cycle,
    and the long clean run above always takes it on the right cycle).
    Bit-exact over random memory."""
    rng = np.random.default_rng(17)
    image, commands = layout_sparse_problems(TINY, [dict(m=2, k=2048, n=2, pat_n=1, pat_m=2)], rng)
    stalls = dict(lat_min=3, lat_mask=7, p_req=60, p_data=80, p_wr=70, p_cmd=50, p_done=90)
    result = simulate_sparse_engine(TINY, image, commands, seed=17, workdir=tmp_path, **stalls)
    assert result["passed"], result["log"]
    assert result["match"] and result["errors"] == [False]


def test_m_with_bit_11_accepted(tmp_path):
    """An accepted command with M = 2,049 (bits 11 and 0; the accepted M of
    the other tests never set bit 11): issue 40, the sparse engine's current
    mutant 47 (bit 11 of the pattern check's held command tied to 0).
    Bit-exact."""
    rng = np.random.default_rng(18)
    image, commands = layout_sparse_problems(
        TINY, [dict(m=2049, k=8, n=2, pat_n=1, pat_m=2, int8=1, multiplier=3, shift=9)], rng)
    result = simulate_sparse_engine(TINY, image, commands, seed=18, workdir=tmp_path)
    assert result["passed"], result["log"]
    assert result["match"] and result["errors"] == [False]


def test_memory_bound_model_within_two_percent(tmp_path):
    """A slow memory (2 bytes per cycle, the harness's read bandwidth
    limit): bit-exact, memory bound, and the cycle model within 2% (7,819
    cycles measured, 7,822 modelled). A harness whose bandwidth tokens are
    not capped (issue 40, the sparse engine's current mutant 15) bursts
    after idle cycles: 7,401."""
    rng = np.random.default_rng(9)
    image, commands = layout_sparse_problems(TINY, [dict(m=16, k=96, n=16, pat_n=2, pat_m=4)], rng)
    result = simulate_sparse_engine(TINY, image, commands, seed=9, lat_min=4, bw=2, workdir=tmp_path)
    assert result["passed"], result["log"]
    assert result["match"] and result["bound"] == "memory" and not result["model_exact"]
    assert abs(result["cycles"] - result["model_cycles"]) <= 0.02 * result["model_cycles"]


@BUILDS
def test_bias_and_accumulate_at_the_int32_limits(config, tmp_path):
    """The dense engine's saturating problems (``gemm_saturating_problems``,
    1:1: old C at the int32 limits pushed past them; per-channel scales
    without a bias) and biases: at the int32 limits on old C at the limits
    (the writer's saturating add, both ways), on 12 columns accumulating
    (old C and bias in all 8 lanes of a panel, a last panel of 4) and on 6
    (int8); per-channel scales after a bias (the loader's scale job after
    its bias job); and 128 columns of per-channel scales, every shift 0 to
    63 in both requantizer lanes. Bit-exact; on the ECP5 build too (its
    array and requantizer differ)."""
    lo, hi = -(1 << 31), (1 << 31) - 1
    rng = np.random.default_rng(14)
    problems = gemm_saturating_problems("w", pat_n=1, pat_m=1) + [
        dict(gemm_saturating_problems("w", pat_n=1, pat_m=1)[0], bias=[hi, lo]),
        dict(m=3, k=40, n=12, pat_n=2, pat_m=4, accumulate=1, bias=True),
        dict(m=2, k=16, n=6, pat_n=1, pat_m=2, bias=True, int8=1, multiplier=1 << 20, shift=28),
        dict(m=3, k=9, n=5, pat_n=3, pat_m=4, bias=True, int16=1, scale=np.linspace(2e-2, 9e-2, 5)),
        # every shift in each of the requantizer's two lanes (columns 2s and
        # 2s + 1 shift by s), large multipliers, biases at the int32 limits
        dict(m=2, k=8, n=128, pat_n=1, pat_m=2, int16=1, bias=[hi, lo] * 64,
             multipliers=rng.integers(1 << 25, 1 << 26, 128), shifts=np.arange(128) // 2)]
    image, commands = layout_sparse_problems(config, problems, rng)
    result = simulate_sparse_engine(config, image, commands, seed=14, workdir=tmp_path)
    assert result["passed"], result["log"]
    assert result["match"] and result["errors"] == [False] * 8
    assert read_c(result["image"], commands[0]).tolist() == GEMM_INT32_LIMITS
    assert read_c(result["image"], commands[3]).tolist() == [[hi, -1], [-1, lo]]


def test_results_equal_the_dense_product_of_the_pruned_weights(tmp_path):
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (6, 50))
    w = prune_nm(rng.integers(-128, 128, (50, 9)), 3, 8)
    image, commands = layout_sparse_problems(TINY, [dict(m=6, k=50, n=9, pat_n=3, pat_m=8, a=a, w=w)])
    result = simulate_sparse_engine(TINY, image, commands, workdir=tmp_path)
    assert result["match"]
    assert np.array_equal(read_c(result["image"], commands[0]), a @ w)
    assert np.array_equal(read_c(result["image"], commands[0]), gemm_golden(TINY, a, w))


@pytest.mark.parametrize("fields, error, message", [
    ({"dataflow": "ws"}, ValueError, r"^dataflow must be 'os' for the sparse engine, not 'ws'$"),
    ({"command_queue": 0}, ValueError,
     r"^command_queue must be 4 for the sparse engine \(it keeps its own command queue\), not 0$"),
    ({"m_max": 3}, ValueError, r"^m_max must be 2, 4, 8 or 16, not 3$"),
    ({"m_max": "8"}, TypeError, r"^m_max must be an integer, not '8'$"),
    ({"m_max": 16, "mem_width": 64}, ValueError, r"^m_max must divide mem_width // width = 8, not 16$"),
    ({"rows": 0}, ValueError, r"^rows must be a positive integer, not 0$"),
])
def test_bad_config_fails_at_construction(fields, error, message):
    base = dict(rows=2, cols=2, mem_width=64, k_chunk=32)
    with pytest.raises(error, match=message):
        SparseEngineConfig(**{**base, **fields})


def test_engine_takes_only_a_sparse_config():
    with pytest.raises(TypeError, match=r"^config must be a SparseEngineConfig, not 3$"):
        SparseEngine(3)
    engine = SparseEngine(TINY)
    assert isinstance(engine, StagedEngine)
    assert TINY.name == "sparse_engine_2x2_m8" and TINY.sparse.m_max == 8


def test_command_packing_and_error_rules():
    cmd = {"m": 3, "k": 5, "n": 2, "pat_n": 2, "pat_m": 4, "idx_addr": 100, "idx_stride": 7}
    packed = pack_sparse_command(TINY, cmd)
    assert packed > 0 and pack_sparse_command(TINY, dict(cmd, pat_n=3)) != packed
    ok = {**{key: 0 for key in ("a_addr", "b_addr", "c_addr", "accumulate", "int8",
                                "multiplier", "shift")},
          "a_stride": 8, "b_stride": 8, "c_stride": 16, **cmd}
    assert not sparse_command_error(TINY, ok)
    assert sparse_command_error(TINY, dict(ok, pat_m=8, pat_n=9))
    assert sparse_command_error(TINY, dict(ok, idx_addr=(1 << 15) - 4))


def test_cycle_model_speedup_tends_to_m_over_n_when_compute_bound():
    config = SparseEngineConfig(rows=8, cols=8, m_tile=16, addr_width=22)
    base = {"m": 32, "k": 768, "n": 96, "a_stride": 768, "b_stride": 96, "c_stride": 384,
            "idx_stride": 96}
    dense = sparse_engine_cycles(config, [dict(base, pat_n=1, pat_m=1)])
    for n, m in [(1, 4), (2, 4), (2, 8), (4, 8)]:
        sparse = sparse_engine_cycles(config, [dict(base, pat_n=n, pat_m=m)])
        assert sparse["exact"]
        assert 0.9 * m / n <= dense["cycles"] / sparse["cycles"] <= m / n


SLOW_ENGINES = [
    SparseEngineConfig(rows=3, cols=2, mem_width=128, k_chunk=64, m_tile=16, m_max=16, addr_width=16),
    SparseEngineConfig(rows=2, cols=3, width=16, mem_width=64, k_chunk=32, m_tile=16, m_max=4,
                     addr_width=16),
]


@pytest.mark.slow
@pytest.mark.parametrize("config", SLOW_ENGINES, ids=lambda c: f"{c.name}-w{c.width}")
def test_more_engines(config, tmp_path):
    """m_max 16 (1:16, 2:16, dense 16:16) and int16 operands, clean and with stalls."""
    patterns = [(n, m) for m in (1, 2, 4, 8, 16) if m <= config.m_max for n in range(1, m + 1)
                if n in (1, 2, 3, m)]
    rng = np.random.default_rng(config.m_max)
    problems = [dict(m=int(rng.integers(1, 8)), k=int(rng.integers(1, 150)),
                     n=int(rng.integers(1, 12)), pat_n=n, pat_m=m, extreme=(i % 4 == 3))
                for i, (n, m) in enumerate(patterns)]
    image, commands = layout_sparse_problems(config, problems, rng)
    for name, knobs in (("clean", {}), ("stalls", dict(lat_min=2, lat_mask=15, p_req=40, p_data=90,
                                                         p_wr=60, p_cmd=30, p_done=70))):
        result = simulate_sparse_engine(config, image, commands, seed=5, workdir=tmp_path / name,
                                        **knobs)
        assert result["passed"], result["log"]
        assert result["match"]
        if name == "clean" and result["model_exact"]:
            assert result["cycles"] == result["model_cycles"]
