"""GEMM engine on its emitted Verilog (harness with HDL memory) in Verilator.

Six hardware configs by default (each costs a build): 2x2 OS, 3x5 WS,
4x4 OS (three multiply stages), the iCEBreaker's engine (the serial one,
2x2, no command queue), the staged 2x2 with the small-FPGA knobs (no
command queue, stage queues of 3, compact buffers and requantizer) and a
4x4 OS engine that stores C transposed (``transpose_c``); 4x4 WS, 3x5 OS,
8x8 (both dataflows) and the 3x5 WS and small-FPGA engines with
``transpose_c`` are marked slow. Per config one run checks
exact cycles on compute-bound commands back to back (for the serial engine,
which is never compute bound, on a memory of fixed latency), one run puts
the issue's shapes, accumulate, int8 saturation and bad commands in one
queue behind a memory with random latency and random stalls on every
stream.
"""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from bertforge.generators.analyze import load_hardware
from bertforge.generators.blocks import PRESETS
from bertforge.generators.gemm_sim import layout_problems, read_matrix, simulate_gemm
from bertforge.boards.targets import board
from bertforge.generators.gemm_board import gemm_top_config
from bertforge.rtl.gemm import GemmConfig
from bertforge.sim.coverage import uncovered
from bertforge.sim.gemm_cycles import gemm_cycles
from bertforge.sim.gemm_harness import MAX_COMMANDS
from bertforge.sim.gemm_golden import matrix_view

from helpers import (GEMM_INT32_LIMITS, gemm_long_count_commands, gemm_saturating_problems,
                     gemm_top_bits_commands)
from helpers import gemm_pair_problems as pair_problems

TINY = dataclasses.replace(PRESETS["gemm"]["tiny"], addr_width=15)   # 2x2 OS, as the CLI test
WS_3X5 = GemmConfig(rows=3, cols=5, dataflow="ws", mem_width=64, addr_width=15, k_chunk=16,
                    m_tile=8)
# Three multiply stages and MULT18X18D cells (their simulation model), as
# the ECP5 board builds: two more cycles of array latency, and the
# requantizer's products in the cells' input and output registers.
OS_4X4 = GemmConfig(rows=4, cols=4, mem_width=64, addr_width=15, k_chunk=16, multiply_stages=3,
                    multiplier_cell="ecp5")
# The iCEBreaker board's engine (its GEMM_BOARD_DEFAULTS: the serial engine,
# 2x2, 8-bit sizes, no command queue), with a larger memory for the issue's
# shapes; and the staged engine with the same knobs (stage queues of 3,
# compact buffers and requantizer).
ICE40 = dataclasses.replace(gemm_top_config(board("icebreaker"), 12).engine, addr_width=15)
COMPACT = dataclasses.replace(ICE40, serial=False)
# Transposed stores (the encoder's K^T): a 4x4 OS engine whose int8, int16
# and int32 rows are one, two and four beats.
TRANSPOSED = GemmConfig(rows=4, cols=4, mem_width=64, addr_width=15, k_chunk=16, transpose_c=True)
SLOW = [
    GemmConfig(rows=4, cols=4, dataflow="ws", mem_width=64, addr_width=15, k_chunk=16, m_tile=8),
    # 128-bit memory: with 64 bits the panel is one 5-wide tile and a chunk's
    # loads (22 beats) outlast its compute (16 cycles), so it is memory bound.
    GemmConfig(rows=3, cols=5, mem_width=128, addr_width=15, k_chunk=16),
    GemmConfig(rows=8, cols=8, mem_width=128, addr_width=16, k_chunk=32, m_tile=16),
    GemmConfig(rows=8, cols=8, dataflow="ws", mem_width=128, addr_width=16, k_chunk=32, m_tile=16),
    dataclasses.replace(WS_3X5, transpose_c=True),
    dataclasses.replace(COMPACT, transpose_c=True),
]

from helpers import GEMM_STRESS as STRESS


def compute_bound(config):
    """Commands whose loads hide under compute (panel-wide N, long K)."""
    p, mt = config.panel, config.block_rows
    # The bias and scales load with the first chunk, before the array starts.
    return [dict(m=mt, k=2 * config.k_chunk, n=p, bias=True, scale=np.linspace(2e-4, 3e-3, p)),
            dict(m=2 * mt, k=4 * config.k_chunk, n=2 * p),
            dict(m=mt, k=3 * config.k_chunk, n=p, pad=3),
            dict(m=mt, k=2 * config.k_chunk, n=p, int8=1, multiplier=5, shift=14),
            dict(m=mt, k=2 * config.k_chunk, n=p, int16=1, multiplier=5, shift=6)]


def issue_shapes(config):
    """The issue's shapes, accumulate, int8 at the limits and bad commands."""
    top = 1 << config.addr_width
    rng = np.random.default_rng(config.rows * 7 + config.cols)
    random_shapes = [dict(m=int(m), k=int(k), n=int(n)) for m, k, n in rng.integers(1, 24, (2, 3))]
    return random_shapes + [
        dict(m=1, k=1, n=1),
        dict(m=7, k=13, n=5),
        dict(m=31, k=17, n=29, pad=1),
        dict(m=9, k=1, n=6),                                    # K = 1
        dict(m=20, k=3 * config.k_chunk + 5, n=2 * config.panel + 3),   # > every buffer
        dict(m=16, k=48, n=48),                                 # BERT projection, scaled
        dict(m=16, k=8, n=16), dict(m=16, k=16, n=8),           # attention, scaled
        dict(m=5, k=6, n=7, accumulate=1),                      # C += A @ B, random old C
        dict(m=7, k=13, n=5, accumulate=1, same_c_as=3),        # accumulate onto command 3
        dict(m=6, k=40, n=9, extreme=True, int8=1, multiplier=1, shift=0),       # saturates
        dict(m=6, k=40, n=9, extreme=True, int8=1, multiplier=3, shift=16),      # rounds
        dict(m=4, k=40, n=4, extreme=True),                     # -128 * -128 sums
        dict(raw=dict(m=0, k=3, n=3)), dict(raw=dict(m=3, k=0, n=3)), dict(raw=dict(m=3, k=3, n=0)),
        dict(raw=dict(m=2, k=4, n=2, a_addr=top - 7, a_stride=4)),        # A leaves memory
        dict(raw=dict(m=2, k=2, n=2, c_addr=top - 8, c_stride=16)),       # C leaves memory
        dict(raw=dict(m=2, k=2, n=2, accumulate=1, int8=1)),              # not supported
        dict(m=3, k=2, n=4, tag=200),
        # Bias and per-channel requantization (issue 15).
        dict(m=9, k=21, n=2 * config.panel + 3, bias=True),            # int32 + bias, edges
        dict(m=6, k=40, n=4, extreme=True,                              # acc + bias saturates
             bias=np.array([2**31 - 1, -2**31, 2**31 - 1, 5])),
        dict(m=7, k=13, n=11, bias=True, scale=np.linspace(1e-3, 2e-2, 11)),
        dict(m=5, k=30, n=6, extreme=True, bias=True,                   # requantizer extremes
             multipliers=np.array([2**26 - 1, 1, 0, 2**25, 12345, 2**26 - 1]),
             shifts=np.array([63, 0, 5, 40, 17, 33])),
        dict(m=4, k=9, n=5, bias=True, int8=1, multiplier=2**32 - 1, shift=40),
        dict(m=5, k=6, n=7, accumulate=1, bias=True),                   # C += A @ B + bias
        dict(raw=dict(m=2, k=2, n=2, per_channel=1)),                   # scales need int8
        dict(raw=dict(m=2, k=2, n=2, bias=1, bias_addr=top - 4)),       # bias leaves memory
        dict(raw=dict(m=2, k=2, n=3, int8=1, per_channel=1, scale_addr=top - 8)),
        # int16 output (issue 16): saturating, per channel, rows of several beats.
        dict(m=6, k=40, n=9, extreme=True, int16=1, multiplier=1, shift=0),
        dict(m=7, k=13, n=2 * config.panel + 3, bias=True, int16=1,
             scale=np.linspace(1e-2, 2e-1, 2 * config.panel + 3), pad=1),
        dict(raw=dict(m=2, k=2, n=2, int8=1, int16=1)),                 # one output type
        dict(raw=dict(m=2, k=2, n=2, accumulate=1, int16=1)),           # not supported
        dict(raw=dict(m=2, k=2, n=3, int16=1, c_addr=top - 10, c_stride=6)),  # C leaves memory
    ]


def run_pairs(config, tmp_path, seed):
    """:func:`pair_problems` behind the stressed memory, completions held
    off more often (4+ cycles at a time): a short run (30 commands)."""
    problems = pair_problems(config)
    image, commands = layout_problems(config, problems, np.random.default_rng(seed))
    result = simulate_gemm(config, image, commands, seed=seed, workdir=tmp_path / "pairs",
                           **dict(STRESS, p_done=200))
    check(result, commands, config)
    return result


#: Cover points no run can hit, and why: the engine reads only into room it
#: has reserved, so it takes every read beat it asked for (the staged
#: engines' loader holds ``rd_data.ready`` high while a request is
#: outstanding, rtl/loader.py): read data is never refused.
WAIVED = {f"gemm.rd_data.refused:{b}" for b in ("1", "2-3", "4+")}


def check(result, commands, config):
    assert result["match"], result
    assert result["passed"], result["log"]
    assert result["completions"] == len(commands)


def run_exact(config, tmp_path):
    image, commands = layout_problems(config, compute_bound(config), np.random.default_rng(5))
    result = simulate_gemm(config, image, commands, seed=5, lat_min=3, workdir=tmp_path / "exact")
    check(result, commands, config)
    assert result["model_exact"], "the compute-bound commands should be compute bound"
    assert result["cycles"] == result["model_cycles"]
    return result


def run_stress(config, tmp_path, seed):
    image, commands = layout_problems(config, issue_shapes(config), np.random.default_rng(seed))
    result = simulate_gemm(config, image, commands, seed=seed, workdir=tmp_path / "stress", **STRESS)
    check(result, commands, config)
    assert result["stalls"]
    assert result["errors"] == ["raw" in p for p in issue_shapes(config)]
    # Saturation really happened: the int8 outputs reach both limits.
    saturated = read_matrix(config, result["image"], commands[12])
    assert saturated.max() == 127 and saturated.min() == -128
    saturated = read_matrix(config, result["image"], commands[-5])
    assert saturated.max() == 2**15 - 1 and saturated.min() == -2**15
    return result


@pytest.mark.parametrize("config", [TINY, WS_3X5, OS_4X4, ICE40, COMPACT],
                         ids=["gemm_2x2_os", "gemm_3x5_ws", "gemm_4x4_os", "gemm_2x2_os_ice40",
                              "gemm_2x2_os_compact"])
def test_engine(config, tmp_path):
    exact = run_exact(config, tmp_path)
    stress = run_stress(config, tmp_path, seed=config.rows * 10 + config.cols)
    pairs = run_pairs(config, tmp_path, seed=config.rows)
    # every functional cover point (sim/funcov_tb.py, the harness's bits) of the three runs
    assert uncovered([exact, stress, pairs], WAIVED) == []
    # and none that did not happen: the exact run's memory and completions
    # never stall (no p_* knob), so no output is ever held and the engine
    # never fills up (a cover bit stuck at 1 would hide a missing stimulus)
    assert held_outputs(exact) == []


def held_outputs(result):
    """The ``stalled`` and ``full`` bins that ``result``'s run hit."""
    return [f"{point}:{name}" for point, bins in result["functional_coverage"].items()
            if point.endswith((".stalled", ".full")) for name, hits in bins.items() if hits]


def test_serial_engine_behind_a_command_queue(tmp_path):
    """The serial engine with a command queue of 2: the first command takes
    2 cycles more to reach the scheduler, the others wait at the queue's
    head; the cycles stay exact. (Without the queue the same commands take
    the model's cycles: ``run_exact(ICE40)`` in :func:`test_engine`.)"""
    result = run_exact(dataclasses.replace(ICE40, command_queue=2), tmp_path)
    _, commands = layout_problems(ICE40, compute_bound(ICE40), np.random.default_rng(5))
    assert result["cycles"] == gemm_cycles(ICE40, commands, lat=3)["cycles"] + 2


@pytest.mark.slow
@pytest.mark.parametrize("config", SLOW, ids=lambda c: c.name)
def test_engine_slow(config, tmp_path):
    run_exact(config, tmp_path)
    run_stress(config, tmp_path, seed=config.rows * 10 + config.cols + 1)


def test_every_other_chunk_waits_for_its_slot(tmp_path):
    """Issues 35/36: six m=4, k=16, n=4 commands back to back at latency 8
    load 24 beats a chunk for 16 cycles of compute, so every other chunk
    waits for its operand slot (``SLOT_FREE``: 4 cycles more than with
    the 3 the model had, measured 251); the walk is exact."""
    config = OS_4X4
    image, commands = layout_problems(config, [dict(m=4, k=16, n=4)] * 6, np.random.default_rng(3))
    result = simulate_gemm(config, image, commands, seed=3, lat_min=8, workdir=tmp_path / "slot")
    check(result, commands, config)
    assert result["bound"] == "memory"
    assert result["cycles"] == gemm_cycles(config, commands, lat=8)["cycles"]


def attention_commands(config, which, heads=12, S=16, H=384, d=32):
    """The low-bit program's attention GEMMs of one layer
    (:mod:`bertforge.sim.encoder_run`): per head the scores (S x d x S,
    A = q's head slice, rows H apart, B = its K^T rows, int32 out) or the
    context (S x S x d, A = the head's P, B = V's head slice, int8 out at
    ctx's head slice); random int8 q, K^T, P and V. ``(image, commands)``."""
    rng = np.random.default_rng(1)
    image = np.zeros(1 << config.addr_width, np.uint8)
    q, kt, scores, p, v, ctx = 0, 8192, 16384, 32768, 40960, 49152
    for base, rows, cols in ((q, S, H), (kt, H, S), (p, heads * S, S), (v, S, H)):
        matrix_view(image, base, cols, rows, cols, np.int8)[...] = rng.integers(-128, 128, (rows, cols))
    commands = []
    for h in range(heads):
        if which == "scores":
            c = dict(m=S, k=d, n=S, a_addr=q + h * d, a_stride=H, b_addr=kt + h * d * S, b_stride=S,
                     c_addr=scores + h * S * S * 4, c_stride=4 * S, multiplier=1, shift=0, int8=0)
        else:
            c = dict(m=S, k=S, n=d, a_addr=p + h * S * S, a_stride=S, b_addr=v + h * d, b_stride=H,
                     c_addr=ctx + h * d, c_stride=H, multiplier=12345, shift=20, int8=1)
        commands.append(dict(c, int16=0, accumulate=0, tag=h))
    return image, commands


def minilm_engine(name):
    """The encoder top's engine of ``generators/configs/<name>.toml`` (its
    [gemm], storing transposed, a 64 KiB memory) and the config's latency."""
    hw = load_hardware(Path(__file__).parent.parent / "generators" / "configs" / f"{name}.toml")
    return dataclasses.replace(hw.gemm, transpose_c=True, addr_width=16), hw.mem_latency


@pytest.mark.parametrize("name", ["minilm_int8", pytest.param("minilm_w4a8", marks=pytest.mark.slow)])
def test_minilm_attention_gemms_exact(name, tmp_path):
    """Issues 35/36: a layer's 12 score and 12 context GEMMs of all-MiniLM
    at 16 tokens, as the low-bit top runs them, take the model's cycles.
    The scores load 48 one-beat rows for 32 cycles of compute, so the
    loader's idle cycle between two chunks' requests (``ISSUE_GAP``)
    adds a cycle per command (measured 730 on minilm_int8, 746 on
    minilm_w4a8; the model had 719 and 735); minilm_int8's context waits
    for its operand slot every other command (609; the walk had 598 and
    ``analyze``, extrapolating from two commands, 543)."""
    config, lat = minilm_engine(name)
    for which in ("scores", "context"):
        image, commands = attention_commands(config, which)
        result = simulate_gemm(config, image, commands, lat_min=lat, workdir=tmp_path / which)
        check(result, commands, config)
        assert result["cycles"] == gemm_cycles(config, commands, lat=lat)["cycles"], which


def test_memory_bound_model_within_two_percent(tmp_path):
    """A slow memory (2 bytes per cycle): not exact, but the model's estimate
    is within 2%."""
    config = TINY
    image, commands = layout_problems(config, [dict(m=16, k=96, n=16)], np.random.default_rng(9))
    result = simulate_gemm(config, image, commands, seed=9, lat_min=4, bw=2,
                           workdir=tmp_path / "slow")
    check(result, commands, config)
    assert result["bound"] == "memory" and not result["model_exact"]
    assert abs(result["cycles"] - result["model_cycles"]) <= 0.02 * result["model_cycles"]


def test_writer_stalled_holds_back_the_array(tmp_path):
    """Writes held off almost always (p_wr 250/256): both accumulator
    slots wait for the writer while the array has the next block's rows,
    so the accumulator must refuse them (``c.ready`` low with ``c.valid``
    high: an accumulator that takes them anyway fails here, mutant 6 of
    docs/verification-coverage.md); 12 one-chunk blocks stay bit-exact."""
    config = TINY
    problems = [dict(m=config.block_rows, k=config.k_chunk, n=config.panel) for _ in range(12)]
    image, commands = layout_problems(config, problems, np.random.default_rng(11))
    result = simulate_gemm(config, image, commands, seed=11, p_wr=250, workdir=tmp_path / "held")
    check(result, commands, config)


def test_refused_command_with_k_of_16_bits_keeps_its_tag(tmp_path):
    """A command whose K has its top bit set (40,000: A leaves memory) is
    refused with its own tag (the completions' tags are checked), and the
    next command runs."""
    config = TINY
    problems = [dict(raw=dict(m=1, k=40000, n=1)), dict(m=3, k=5, n=2)]
    image, commands = layout_problems(config, problems, np.random.default_rng(12))
    result = simulate_gemm(config, image, commands, seed=12, workdir=tmp_path / "k16")
    check(result, commands, config)
    assert result["errors"] == [True, False] and result["tags_ok"]
    assert held_outputs(result) == []


def test_far_rows_and_a_bias_at_the_top_of_memory(tmp_path):
    """Over random memory: row strides with their top bit set (17,424 and
    16,400 bytes: the rows of A, then of B, half a memory apart), and a bias that
    ends exactly at the top of memory (the largest accepted), stay
    bit-exact; so does C += A @ B with A's stride 2,064 (bit 11: the loader's
    descriptors carry the accumulate flag beside the stride); and B ending
    exactly at the top of memory is accepted, one byte further refused (the
    range check's shift-and-add of (K - 1) * b_stride)."""
    config = TINY
    top = 1 << config.addr_width
    image = np.random.default_rng(13).integers(0, 256, top, dtype=np.uint8)
    commands = [dict(m=2, k=8, n=2, a_addr=0, a_stride=17424, b_addr=64, b_stride=16,
                     c_addr=256, c_stride=16, tag=0),
                dict(m=2, k=2, n=8, a_addr=512, a_stride=16, b_addr=576, b_stride=16400,
                     c_addr=640, c_stride=32, tag=1),
                dict(m=2, k=4, n=3, a_addr=768, a_stride=16, b_addr=800, b_stride=16,
                     c_addr=896, c_stride=16, bias=1, bias_addr=top - 12, tag=2),
                dict(m=2, k=4, n=3, a_addr=1024, a_stride=2064, b_addr=1100, b_stride=16,
                     c_addr=1200, c_stride=16, accumulate=1, tag=3)]
    b_at_top = dict(m=2, k=7, n=3, a_addr=1300, a_stride=16, b_stride=24, c_addr=1400,
                    c_stride=16)
    commands += [dict(b_at_top, b_addr=top - 6 * 24 - 3, tag=4),
                 dict(b_at_top, b_addr=top - 6 * 24 - 2, tag=5)]
    result = simulate_gemm(config, image, commands, seed=13, workdir=tmp_path / "far")
    check(result, commands, config)
    assert result["errors"] == [False] * 5 + [True]
    assert held_outputs(result) == []


def test_every_field_at_its_top_bits(tmp_path):
    """Command fields at their top bits. A refused command with every size
    at 0xFFFF, every address and stride at 0x7FFF, all flags, the largest
    multiplier, shift and tag (the range check's shift-and-add runs on them
    all), between accepted ones, so that each bit of the command queue and
    the scheduler rises and falls. Then accepted commands whose strides and
    addresses set bits 3 to 14 (rows half a memory apart, C and the bias
    near the top of memory, the scales ending exactly there, per-channel
    scales with a C stride of bit 10) and tags above 32: bit-exact over
    random memory, the refused ones refused with their own tags."""
    config = TINY
    image = np.random.default_rng(15).integers(0, 256, 1 << config.addr_width, dtype=np.uint8)
    commands = gemm_top_bits_commands(config)
    result = simulate_gemm(config, image, commands, seed=15, workdir=tmp_path / "top")
    check(result, commands, config)
    assert result["errors"] == [False, True, False, False, True, False] and result["tags_ok"]
    assert held_outputs(result) == []


def test_long_k_m_and_n_count_past_bit_13(tmp_path):
    """K = 20,000 (625 chunks), M = 9,000 (4,500 blocks) and N = 9,000
    (1,125 panels), each with the other sizes 1 or 2 and strides of 0 (one
    row of A or B read again and again), so that the scheduler's chunk
    offsets and what is left of m, n and k count through bits 3 to 14 and
    back: bit-exact over random memory."""
    config = TINY
    image = np.random.default_rng(16).integers(0, 256, 1 << config.addr_width, dtype=np.uint8)
    commands = gemm_long_count_commands()
    result = simulate_gemm(config, image, commands, seed=16, workdir=tmp_path / "long")
    check(result, commands, config)
    assert result["errors"] == [False] * 3 and result["tags_ok"]


def test_forty_commands_fill_the_harness_queue(tmp_path):
    """The harness's whole command queue (``MAX_COMMANDS``, 40), every
    other command refused (a size of 0, two output types, by turns): each
    completion's error flag lands in its own bit of ``errors``, bits 36 to
    39 included (the stress run has 36 commands); the accepted ones, int16
    with multiplier 2**b and shift b for b = 12 to 31 (a multiplier bit the other tests
    leave clear: 17), stay bit-exact."""
    config = TINY
    refused = [dict(raw=dict(m=0, k=2, n=2)), dict(raw=dict(m=2, k=2, n=2, int8=1, int16=1))]
    # the accepted ones: int16 with a walking-one multiplier 2**b, shift b
    # (C = A @ B, saturated), b = 12 .. 31: each bit of the descriptor's
    # multiplier carries the scale
    problems = [refused[i // 2 % 2] if i % 2 else
                dict(m=1, k=2, n=2, int16=1, multiplier=1 << (12 + i // 2), shift=12 + i // 2)
                for i in range(MAX_COMMANDS)]
    image, commands = layout_problems(config, problems, np.random.default_rng(17))
    result = simulate_gemm(config, image, commands, seed=17, workdir=tmp_path / "forty")
    check(result, commands, config)
    assert result["errors"] == [i % 2 == 1 for i in range(MAX_COMMANDS)]


def test_accumulate_saturates_and_per_channel_scales_without_bias(tmp_path):
    """C += A @ B from old C at the int32 limits, pushed past them (the
    accumulator's saturating add, both columns of the array, both ways),
    and per-channel scales with no bias (the scale vector is then the
    loader's first job), int8 and int16; then an M of 130 (bit 7 of the
    command set: the queue sample's mutant 22 XORs it into B's top
    address bit)."""
    config = TINY
    problems = gemm_saturating_problems() + [dict(m=130, k=2, n=2)]
    image, commands = layout_problems(config, problems, np.random.default_rng(14))
    result = simulate_gemm(config, image, commands, seed=14, workdir=tmp_path / "limits")
    check(result, commands, config)
    assert result["errors"] == [False] * 4 and held_outputs(result) == []
    assert read_matrix(config, result["image"], commands[0]).tolist() == GEMM_INT32_LIMITS


def transposed(problems):
    """``problems`` with C stored transposed, but those that accumulate or
    whose C another accumulates onto (old C is read row by row)."""
    targets = {p["same_c_as"] for p in problems if "same_c_as" in p}
    return [p if "raw" in p or p.get("accumulate") or index in targets else dict(p, transpose_c=1)
            for index, p in enumerate(problems)]


def test_engine_stores_c_transposed(tmp_path):
    """Transposed stores (an element a write) take the model's cycles when
    compute bound, one by one and back to back; with random latency and
    stalls the issue's shapes stay bit-exact, accumulating commands after
    writer-bound transposed ones included (the loader's block count must
    not wrap), and accumulate with ``transpose_c`` or a C^T that leaves
    memory is rejected."""
    config = TRANSPOSED
    problems = transposed(compute_bound(config))
    for index, problem in enumerate(problems):
        image, commands = layout_problems(config, [problem], np.random.default_rng(5))
        result = simulate_gemm(config, image, commands, seed=5, lat_min=3,
                               workdir=tmp_path / f"exact{index}")
        check(result, commands, config)
        assert result["model_exact"] and result["cycles"] == result["model_cycles"], index
    image, commands = layout_problems(config, problems, np.random.default_rng(5))
    result = simulate_gemm(config, image, commands, seed=5, lat_min=3, workdir=tmp_path / "all")
    check(result, commands, config)
    assert result["cycles"] == result["model_cycles"]
    top = 1 << config.addr_width
    shapes = transposed(issue_shapes(config)) + [
        dict(raw=dict(m=2, k=2, n=2, transpose_c=1, accumulate=1)),           # not supported
        dict(raw=dict(m=2, k=2, n=3, transpose_c=1, c_addr=top - 20, c_stride=8)),  # C^T leaves
        dict(raw=dict(m=2, k=2, n=2, transpose_c=1, c_addr=top - 16, c_stride=8)),  # C^T fits
    ]
    image, commands = layout_problems(config, shapes, np.random.default_rng(3))
    result = simulate_gemm(config, image, commands, seed=3, workdir=tmp_path / "stress", **STRESS)
    check(result, commands, config)
    assert result["stalls"] and result["errors"][-3:] == [True, True, False]
    assert sum("transpose_c" in c for c in commands) >= 20
