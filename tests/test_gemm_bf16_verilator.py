"""The bf16 GEMM engine (``GemmConfig(arith="bf16")``) on its emitted Verilog
(harness with HDL memory) in Verilator, against the bit-exact golden model
(:func:`bertforge.sim.gemm_golden.bf16_gemm_golden`) and the cycle model.

One config in the default run (a 3x2 WS array on 64-bit memory: weight
blocks of 3 in beats of 4 elements, so blocks are padded inside a beat and
at K's end); 2x2 OS, 4x4 OS with three multiply stages, 4x4 WS and 8x8 (both
dataflows) are marked slow. Per config one run checks exact cycles on
compute-bound commands back to back, one puts random shapes, extremes
(largest and smallest normals, subnormals, zeros of both signs, Inf and NaN,
cancellation, long K), accumulate, bias, bf16 output and bad commands in one
queue behind a memory with random latency and stalls on every stream.
"""

import json

import ml_dtypes
import numpy as np
import pytest

from cli_helpers import npy_flags, run_cli
from bertforge.generators.gemm_sim import bf16_gemm_errors, layout_problems, read_matrix, simulate_gemm
from bertforge.rtl.gemm import GemmConfig
from bertforge.sim.gemm_golden import bf16_gemm_golden, matrix_view

BF16 = ml_dtypes.bfloat16
INFO = ml_dtypes.finfo(BF16)
MAX, TINY, SUB = float(INFO.max), float(INFO.tiny), float(INFO.smallest_subnormal)
F32_MAX = float(np.finfo(np.float32).max)

WS_3X2 = GemmConfig(rows=3, cols=2, dataflow="ws", mem_width=64, addr_width=15, k_chunk=16,
                    m_tile=4, arith="bf16")
# Memory words twice the integer tests' (2-byte operands): with fewer lanes
# a panel is one tile, and a chunk's loads outlast its compute (memory bound).
SLOW = [
    GemmConfig(rows=2, cols=2, mem_width=64, addr_width=15, k_chunk=32, m_tile=16, arith="bf16"),
    GemmConfig(rows=4, cols=4, mem_width=128, addr_width=15, k_chunk=16, multiply_stages=3,
               arith="bf16"),
    GemmConfig(rows=4, cols=4, dataflow="ws", mem_width=128, addr_width=15, k_chunk=16, m_tile=16,
               arith="bf16"),
    GemmConfig(rows=8, cols=8, mem_width=256, addr_width=16, k_chunk=32, m_tile=16, arith="bf16"),
    GemmConfig(rows=8, cols=8, dataflow="ws", mem_width=256, addr_width=16, k_chunk=32, m_tile=16,
               arith="bf16"),
]

from helpers import GEMM_STRESS as STRESS


def bf(rows):
    return np.array(rows, dtype=np.float64).astype(BF16)


def compute_bound(config):
    """Commands whose loads hide under compute (panel-wide N, long K)."""
    p, mt, kc = config.panel, config.block_rows, config.k_chunk
    return [dict(m=mt, k=2 * kc, n=p, bias=True),
            dict(m=2 * mt, k=4 * kc, n=2 * p),
            dict(m=mt, k=3 * kc, n=p, pad=3),
            dict(m=mt, k=2 * kc, n=p, bf16_out=1)]


def extremes(config):
    """Problems at the edges of the format (index -> what it shows)."""
    long_k = 5 * config.k_chunk + 3
    rng = np.random.default_rng(3)
    ones = np.ones((4, 3))
    # 1 then many 2**-25: in order each add rounds back to 1 (float64: 1 + K 2**-25)
    creep = np.full((1, long_k), 2.0 ** -25)
    creep[0, 0] = 1.0
    return {
        # max normal: MAX + MAX overflows to +-inf; MAX - MAX + 1 cancels to 1
        "overflow": dict(m=3, k=4, n=3, a=bf([[MAX, MAX, 0, 0], [MAX, -MAX, 1, 0],
                                               [-MAX, -MAX, 0, 0]]), b=bf(ones)),
        # min normal squared (2**-252) flushes to a zero of its sign; subnormal
        # operands are zeros (2**-133 * 2**100 would be 2**-33)
        "tiny": dict(m=3, k=2, n=2, a=bf([[TINY, 0], [-TINY, -0.0], [SUB, -SUB]]),
                     b=bf([[TINY, 2.0 ** 100], [2.0 ** 100, 1]])),
        # inf * 0 and inf - inf are NaN, NaN in is NaN out, inf * x is inf;
        # K = 5 in beats of 4 or 8: A's next row (inf) sits in lanes past K
        "special": dict(m=4, k=5, n=3, a=bf([[1, 2, 3, 1, 1], [np.inf, 1, 0, 1, 1],
                                             [np.inf, -np.inf, 1, 0, 0], [np.nan, 1, 1, 1, 1]]),
                        b=bf([[0, 1, 2], [1, 1, 1], [-1, 2, 0], [1, 1, 1], [1, 1, 1]])),
        # order: 2**100 + 1 - 2**100 is +0 (float64: 1)
        "cancel": dict(m=2, k=3, n=2, a=bf([[2.0 ** 100, 1, -2.0 ** 100], [3, -3, 0]]),
                       b=bf([[1, 1], [1, 1], [1, 1]])),
        "long_k": dict(m=3, k=long_k, n=3,
                       a=np.vstack([creep, rng.standard_normal((2, long_k))]).astype(BF16),
                       b=np.ones((long_k, 3)).astype(BF16)),
        "max_min": dict(m=4, k=9, n=3, extreme=True),
        # accumulate onto float32 extremes: subnormal (a zero), NaN with a
        # payload (the one NaN), -0 + -0, inf
        "c_old": dict(m=2, k=2, n=3, accumulate=1, a=bf([[0, 0], [-TINY, 1]]),
                      b=bf([[TINY, 1, 1], [-0.0, 0, -0.0]]),
                      c_old=np.array([[0x00000100, 0xFFC00123, 0x80000000],
                                      [0x80000000, 0x7F800000, 0x40A00000]], np.uint32).view(np.float32)),
        # bias: x + (-0) is x; a float32 past bf16's largest rounds to inf in
        # bf16; 1 + 2**-8 ties to even (1), 1 + 3 * 2**-8 rounds up
        "bf16_out": dict(m=1, k=2, n=4, bf16_out=1, a=bf([[0, 0]]), b=bf(np.zeros((2, 4))),
                         bias=np.array([F32_MAX, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -0.0],
                                       np.float32)),
    }


def stress(config):
    """Random shapes and extremes with bias, accumulate and bad commands."""
    top = 1 << config.addr_width
    rng = np.random.default_rng(config.rows * 7 + config.cols)
    random_shapes = [dict(m=int(m), k=int(k), n=int(n)) for m, k, n in rng.integers(1, 24, (3, 3))]
    good = random_shapes + [dict(m=7, k=13, n=5)] + list(extremes(config).values()) + [
        dict(m=20, k=3 * config.k_chunk + 5, n=2 * config.panel + 3, bias=True),
        dict(m=7, k=13, n=5, accumulate=1, same_c_as=3),
        dict(m=9, k=21, n=2 * config.panel + 3, bias=True, bf16_out=1, pad=1),
        dict(raw=dict(m=1, k=2, n=2, c_addr=top - 4, c_stride=4, bf16_out=1)),  # fits as bf16
    ]
    bad = [dict(raw=dict(m=2, k=2, n=2, int8=1)), dict(raw=dict(m=2, k=2, n=2, int16=1)),
           dict(raw=dict(m=2, k=2, n=2, int8=1, per_channel=1)),
           dict(raw=dict(m=2, k=2, n=2, accumulate=1, bf16_out=1)),
           dict(raw=dict(m=0, k=2, n=2)),
           dict(raw=dict(m=1, k=2, n=3, c_addr=top - 4, c_stride=6, bf16_out=1))]
    return good + bad, [False] * len(good) + [True] * len(bad)


def check(result, commands):
    assert result["match"], result
    assert result["passed"], result["log"]
    assert result["completions"] == len(commands)


def run_exact(config, tmp_path):
    problems = compute_bound(config)
    image, commands = layout_problems(config, problems, np.random.default_rng(5))
    result = simulate_gemm(config, image, commands, seed=5, lat_min=3, workdir=tmp_path / "exact")
    check(result, commands)
    assert result["model_exact"], "the compute-bound commands should be compute bound"
    assert result["cycles"] == result["model_cycles"]
    # the error against float64 GEMMs of the same bf16 operands, within its bound
    outputs = [read_matrix(config, result["image"], c) for c in commands]
    problems = [dict(p, a=read_operand(config, result["image"], c, "a"),
                     b=read_operand(config, result["image"], c, "b"),
                     bias=read_bias(result["image"], c)) for p, c in zip(problems, commands)]
    errors = bf16_gemm_errors(problems, outputs)
    assert 0 < errors["max_rel_error_vs_float64"] <= errors["error_bound_vs_float64"], errors
    return result


def read_operand(config, image, cmd, name):
    rows, cols = (cmd["m"], cmd["k"]) if name == "a" else (cmd["k"], cmd["n"])
    return matrix_view(image, cmd[f"{name}_addr"], cmd[f"{name}_stride"], rows, cols, BF16).copy()


def read_bias(image, cmd):
    return matrix_view(image, cmd["bias_addr"], 4, 1, cmd["n"], "<f4")[0].copy() if cmd.get("bias") \
        else None


def run_stress(config, tmp_path, seed):
    problems, expected_errors = stress(config)
    image, commands = layout_problems(config, problems, np.random.default_rng(seed))
    result = simulate_gemm(config, image, commands, seed=seed, workdir=tmp_path / "stress", **STRESS)
    check(result, commands)
    assert result["stalls"]
    assert result["errors"] == expected_errors
    # The extremes really happened (the golden model agreed on every bit).
    first = 4      # three random shapes and a 7x13x5, then the extremes
    cases = extremes(config)
    c = {name: read_matrix(config, result["image"], commands[first + i])
         for i, name in enumerate(cases)}
    assert c["overflow"][0, 0] == np.inf and c["overflow"][2, 0] == -np.inf
    assert c["overflow"][1, 0] == 1.0
    tiny = c["tiny"].view(np.uint32)
    assert tiny[0, 0] == 0 and tiny[1, 0] == 0x80000000 and tiny[2, 1] == 0   # flushed, DAZ
    assert np.isnan(c["special"][1, 0]) and np.isnan(c["special"][2, 2]) and np.isnan(c["special"][3]).all()
    assert np.isfinite(c["special"][0]).all()              # the padding lane's inf stays out
    assert np.all(np.isnan(c["special"]) <= (c["special"].view(np.uint32) == 0x7FC00000))
    assert c["cancel"].view(np.uint32)[0, 0] == 0 and c["cancel"].view(np.uint32)[1, 0] == 0
    errors = bf16_gemm_errors([cases["long_k"]], [c["long_k"]])
    assert 0 < errors["max_rel_error_vs_float64"] <= errors["error_bound_vs_float64"]
    assert (~np.isfinite(c["max_min"])).any()
    assert list(c["c_old"].view(np.uint32).ravel()) == [0, 0x7FC00000, 0, 0x80000000, 0x7F800000,
                                                         0x40A00000]
    assert list(c["bf16_out"].view(np.uint16)[0]) == [0x7F80, 0x3F80, 0x3F82, 0]
    return result


@pytest.mark.parametrize("config", [WS_3X2, *(pytest.param(c, marks=pytest.mark.slow) for c in SLOW)],
                         ids=lambda c: c.name)
def test_bf16_engine(config, tmp_path):
    run_exact(config, tmp_path)
    run_stress(config, tmp_path, seed=config.rows * 10 + config.cols)


CLI_FLAGS = ["sim", "gemm", "--rows", "3", "--cols", "2", "--dataflow", "ws", "--mem-width", "64",
             "--addr-width", "15", "--k-chunk", "16", "--m-tile", "4", "--arith", "bf16"]


@pytest.mark.parametrize("bf16_out", [False, True], ids=["float32", "bf16_out"])
def test_cli_float32_files(tmp_path, bf16_out):
    """``sim gemm --arith bf16 --a --b --bias --out``: float32 files in (one
    note line), float32 C out, bit-exact, the error against float64 within
    its bound (the same hardware model as :data:`WS_3X2`)."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((6, 21)).astype(np.float32)
    b = rng.standard_normal((21, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    result = run_cli(*CLI_FLAGS, *npy_flags(tmp_path, a=a, b=b, bias=bias), "--json",
                     *(["--bf16-out"] if bf16_out else []))
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: A converted from float32 to bfloat16 (round to nearest even): 126 of "
                     "126 values changed; B converted from float32 to bfloat16 (round to nearest "
                     "even): 105 of 105 values changed"]
    summary = json.loads(result.stdout)
    assert summary["match"] and summary["design"] == "gemm_3x2_ws_bf16"
    assert 0 < summary["max_rel_error_vs_float64"] <= summary["error_bound_vs_float64"]
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.float32 and c.shape == (6, 5)
    expected = bf16_gemm_golden(WS_3X2, a.astype(BF16), b.astype(BF16), bias=bias,
                                bf16_out=bf16_out).astype(np.float32)
    assert np.array_equal(c.view(np.uint32), expected.view(np.uint32))
