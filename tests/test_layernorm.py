"""LayerNorm unit: parameters, integer rsqrt, golden model accuracy, emitted
Verilog in Verilator against the golden and cycle models, command line."""

import dataclasses
import json
import math
import random

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from bertforge.generators.cli import main
from bertforge.generators.emit import emit_verilog
from bertforge.generators.layernorm_sim import random_layernorm_data, simulate_layernorm
from bertforge.rtl.layernorm import LN_OUT_LATENCY, LN_STATS_LATENCY, LayerNorm, LayerNormConfig
from bertforge.rtl.rsqrt import RSQRT_FRAC, RSQRT_STAGES, RsqrtPipeline, rsqrt_reference
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.layernorm_golden import (layernorm_config_for_scale,
                                            layernorm_golden, layernorm_reference_int8)

#: 4 lanes, int16 x + r, int8 gamma/beta; the CLI tests use the same design.
SMALL = LayerNormConfig(lanes=4, h_max=64)
#: 3 lanes, int32 x, no residual, int16 gamma/beta, a non-power-of-two output scale.
WIDE = layernorm_config_for_scale(
    LayerNormConfig(lanes=3, h_max=48, in_width=32, add_residual=False, param_width=16,
                    gamma_frac=12, beta_frac=10), 0.05)


@pytest.mark.parametrize("fields, error, message", [
    ({"lanes": 0}, ValueError, r"^lanes must be a positive integer, not 0$"),
    ({"lanes": 65}, ValueError, r"^lanes must be an integer <= 64, not 65$"),
    ({"h_max": 8192}, ValueError, r"^h_max must be an integer <= 4096, not 8192$"),
    ({"lanes": 16, "h_max": 100}, ValueError, r"^h_max must be a multiple of lanes \(16\), not 100$"),
    ({"h_max": "768"}, TypeError, r"^h_max must be an integer, not '768'$"),
    ({"in_width": 8}, ValueError, r"^in_width must be 16 or 32, not 8$"),
    ({"add_residual": 1}, TypeError, r"^add_residual must be a bool, not 1$"),
    ({"param_width": 12}, ValueError, r"^param_width must be 8 or 16, not 12$"),
    ({"gamma_frac": 8}, ValueError, r"^gamma_frac must be an integer <= 7, not 8$"),
    ({"beta_frac": 21}, ValueError, r"^beta_frac must be an integer <= 20, not 21$"),
    ({"out_mult": 0}, ValueError, r"^out_mult must be a positive integer, not 0$"),
    ({"out_shift": -2}, ValueError, r"^out_shift must be a non-negative integer, not -2$"),
])
def test_bad_parameters(fields, error, message):
    with pytest.raises(error, match=message):
        LayerNormConfig(**fields)


def test_component_needs_config():
    with pytest.raises(TypeError, match=r"^config must be a LayerNormConfig, not None$"):
        LayerNorm(None)


def test_rsqrt_reference_accuracy():
    rng = random.Random(0)
    values = list(range(1, 3000)) + [rng.getrandbits(rng.randint(1, 95)) | 1 for _ in range(5000)]
    values += [(1 << k) - 1 for k in range(1, 96)] + [1 << k for k in range(96)]
    for d in values:
        r, e = rsqrt_reference(d)
        assert abs(r * 2.0 ** -(RSQRT_FRAC + e) * math.sqrt(d) - 1) < 3e-6, d
    assert rsqrt_reference(0) == (0, 0)


def test_rsqrt_pipeline_matches_reference():
    """The pipelined RTL rsqrt, in Amaranth's simulator, one new D per cycle."""
    width = 70
    rng = random.Random(1)
    values = [0, 1, 2, 3, 4, (1 << width) - 1, 1 << (width - 1)]
    values += [rng.getrandbits(rng.randint(1, width)) for _ in range(60)]
    m = Module()
    rsqrt = RsqrtPipeline(width)
    rsqrt.add_to(m)
    results = []

    async def bench(ctx):
        for cycle in range(len(values) + RSQRT_STAGES):
            if cycle < len(values):
                ctx.set(rsqrt.d, values[cycle])
            await ctx.tick()
            if cycle + 1 >= RSQRT_STAGES:
                results.append((ctx.get(rsqrt.r), ctx.get(rsqrt.e)))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert results[:len(values)] == [rsqrt_reference(d) for d in values]


def _bert_vectors(config, count, length, seed):
    return random_layernorm_data(config, count, length, np.random.default_rng(seed))


def test_golden_within_one_lsb_of_float_over_variance_range():
    """Variance log-uniform over [1e-2, 1e4] (real units), BERT-like means
    and outliers: at most 1 int8 LSB from the float reference."""
    config = LayerNormConfig(h_max=768)
    xs, rs, gamma, beta = _bert_vectors(config, 160, 768, 2)
    errors = np.concatenate([np.abs(layernorm_golden(config, x, r, gamma, beta)
                                    - layernorm_reference_int8(config, x, r, gamma, beta))
                             for x, r in zip(xs, rs)])
    assert errors.max() <= 1
    assert errors.mean() < 0.05
    for lo, hi in ((1e-2, 1.2e-2), (0.9e4, 1e4)):          # both ends of the range
        xs, rs, gamma, beta = random_layernorm_data(config, 8, 768, np.random.default_rng(3),
                                                    var_range=(lo, hi))
        for x, r in zip(xs, rs):
            ref = layernorm_reference_int8(config, x, r, gamma, beta)
            assert np.abs(layernorm_golden(config, x, r, gamma, beta) - ref).max() <= 1


def test_golden_one_fixed_input_scale_over_variance_range():
    """int32 inputs with one LSB (2**-10, an accumulator scale) for every
    vector, variance 1e-2 to 1e4 real units: within 1 LSB."""
    config = LayerNormConfig(h_max=768, in_width=32)
    rng = np.random.default_rng(12)
    gamma = np.clip(np.round(rng.normal(1, 0.3, 768) * 64), -128, 127)
    beta = np.clip(np.round(rng.normal(0, 1, 768) * 16), -128, 127)
    for var in np.logspace(-2, 4, 25):
        real = rng.normal(rng.uniform(-2, 2) * np.sqrt(var), np.sqrt(var), (2, 768))
        x, r = np.round(real * 2 ** 10).astype(np.int64)
        ref = layernorm_reference_int8(config, x, r, gamma, beta)
        assert np.abs(layernorm_golden(config, x, r, gamma, beta) - ref).max() <= 1


def test_golden_extremes_and_constant_vectors():
    rng = np.random.default_rng(4)
    config = LayerNormConfig(h_max=768)
    gamma = rng.integers(-128, 128, 768)
    beta = rng.integers(-128, 128, 768)
    lo, hi = -32768, 32767
    for value in (lo, hi, 0, 1234):                          # variance 0 gives beta
        x = np.full(768, value)
        assert np.array_equal(layernorm_golden(config, x, x, gamma, beta), beta)
    cases = [np.where(np.arange(768) % 2, hi, lo), np.where(np.arange(768) == 5, hi, lo),
             np.full(768, hi) - (np.arange(768) == 0), rng.integers(lo, hi + 1, 768)]
    for x in cases:
        for r in (x, np.zeros(768, np.int64)):
            got = layernorm_golden(config, x, r, gamma, beta)
            ref = layernorm_reference_int8(config, x, r, gamma, beta)
            assert np.abs(got - ref).max() <= 1
    one = LayerNormConfig(h_max=768, add_residual=False)
    assert layernorm_golden(one, [77], None, [64], [-9])[0] == -9        # H = 1
    extremes = [np.full(48, -(1 << 31)), np.where(np.arange(48) % 3, (1 << 31) - 1, -(1 << 31))]
    g16 = rng.integers(-32768, 32768, 48)
    b16 = rng.integers(-32768, 32768, 48)
    for x in extremes:
        ref = layernorm_reference_int8(WIDE, x, None, g16, b16)
        assert np.abs(layernorm_golden(WIDE, x, None, g16, b16) - ref).max() <= 1


def test_cycle_model():
    # One vector: n beats in, the statistics latency, n beats out.
    assert layernorm_cycles(SMALL, [64]) == 16 + LN_STATS_LATENCY + LN_OUT_LATENCY + 15
    # Non-decreasing lengths: the inputs back to back, then the last vector's output.
    assert layernorm_cycles(SMALL, [8, 64, 64]) == 34 + LN_STATS_LATENCY + LN_OUT_LATENCY + 15
    # A short vector after a long one waits for the long one's output.
    assert layernorm_cycles(SMALL, [64, 4]) == 32 + LN_STATS_LATENCY + LN_OUT_LATENCY
    with pytest.raises(ValueError, match=r"^vector length 6 is not a multiple of lanes=4"):
        layernorm_cycles(SMALL, [6])


def test_verilog_is_deterministic():
    tiny = LayerNormConfig(lanes=1, h_max=4)
    text = emit_verilog(tiny)
    assert text == emit_verilog(dataclasses.replace(tiny))
    assert "module layernorm_l1_h4_i16_p8_res" in text


def _small_data(seed):
    """Mixed lengths (4 to h_max) of realistic vectors plus extremes."""
    rng = np.random.default_rng(seed)
    xs, rs = [], []
    for length in (64, 4, 16, 64, 60, 8, 4, 4, 32):
        x, r, _, _ = random_layernorm_data(SMALL, 1, length, rng)
        xs += x
        rs += r
    lo, hi = -32768, 32767
    idx = np.arange(64)
    xs += [np.full(64, hi), np.where(idx % 2, hi, lo), np.where(idx == 7, hi, 0), np.full(4, lo)]
    rs += [np.full(64, hi), np.where(idx % 3, lo, hi), np.zeros(64, np.int64), np.full(4, lo)]
    _, _, gamma, beta = random_layernorm_data(SMALL, 1, 64, rng)
    gamma[:3] = [-128, 127, 0]
    beta[:3] = [127, -128, 5]
    return xs, rs, gamma, beta


def test_verilator_small_clean_then_stalls():
    xs, rs, gamma, beta = _small_data(5)
    clean = simulate_layernorm(SMALL, xs, rs, gamma, beta, seed=5)
    assert clean["passed"] and clean["match"]
    assert clean["cycles"] == clean["model_cycles"] == layernorm_cycles(SMALL, [len(x) for x in xs])
    for x, r, y in zip(xs, rs, clean["outputs"]):
        assert np.array_equal(y, layernorm_golden(SMALL, x, r, gamma, beta))
    assert clean["max_abs_err"] <= 1
    assert np.array_equal(clean["outputs"][9], beta)        # constant vector -> beta
    stalled = simulate_layernorm(SMALL, xs, rs, gamma, beta, seed=6, x_gap=0.3, y_stall=0.5)
    assert stalled["passed"] and stalled["match"] and stalled["cycles"] > stalled["model_cycles"]
    short = [np.arange(4) * k for k in range(40)]              # 40 one-beat vectors back to back
    burst = simulate_layernorm(SMALL, short, [np.zeros(4, np.int64)] * 40, gamma, beta, seed=7)
    assert burst["match"] and burst["cycles"] == burst["model_cycles"]
    assert burst["cycles"] == 40 + LN_STATS_LATENCY + LN_OUT_LATENCY


def test_verilator_int32_no_residual_stalls():
    rng = np.random.default_rng(8)
    xs, _, gamma, beta = random_layernorm_data(WIDE, 5, 48, rng)
    xs += [np.full(48, -(1 << 31)), np.where(np.arange(48) % 2, (1 << 31) - 1, -(1 << 31)),
           np.full(3, (1 << 31) - 1), rng.integers(-(1 << 31), 1 << 31, 24)]
    gamma[:2] = [-32768, 32767]
    result = simulate_layernorm(WIDE, xs, None, gamma, beta, seed=9, x_gap=0.2, y_stall=0.3)
    assert result["passed"] and result["match"] and result["max_abs_err"] <= 1
    for x, y in zip(xs, result["outputs"]):
        assert np.array_equal(y, layernorm_golden(WIDE, x, None, gamma, beta))


def test_cli_sim_random_json(capsys):
    assert main(["sim", "layernorm", "--lanes", "4", "--h-max", "64", "--vectors", "3",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["match"] and out["cycles"] == out["model_cycles"]
    assert out["ideal_cycles"] == 48 and out["max_abs_err"] <= 1


def test_cli_sim_user_data(tmp_path):
    rng = np.random.default_rng(10)
    x = rng.integers(-3000, 3000, (3, 32)).astype(np.int16)
    r = rng.integers(-3000, 3000, (3, 32)).astype(np.int16)
    gamma = rng.integers(-128, 128, 32).astype(np.int8)
    beta = rng.integers(-128, 128, 32).astype(np.int8)
    for name, array in (("x", x), ("r", r), ("g", gamma), ("b", beta)):
        np.save(tmp_path / f"{name}.npy", array)
    args = ["sim", "layernorm", "--lanes", "4", "--h-max", "64", "--x", str(tmp_path / "x.npy"),
            "--residual", str(tmp_path / "r.npy"), "--gamma", str(tmp_path / "g.npy"),
            "--beta", str(tmp_path / "b.npy"), "--out", str(tmp_path / "y.npy"), "--stall", "0.3"]
    assert main(args) == 0
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.int8 and y.shape == (3, 32)
    for k in range(3):
        assert np.array_equal(y[k], layernorm_golden(SMALL, x[k], r[k], gamma, beta))


@pytest.mark.parametrize("setup, args, message", [
    (lambda d: (d / "x.npy").write_bytes(b"\x93NUMPY garbage"), ["--x", "{d}/x.npy"],
     "is not a readable .npy file"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 6), np.int16)), ["--x", "{d}/x.npy"],
     "multiple of lanes=4"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 128), np.int16)), ["--x", "{d}/x.npy"],
     "at most h_max=64"),
    (lambda d: np.save(d / "x.npy", np.zeros((2, 8), np.int16)), ["--x", "{d}/x.npy"],
     "give --residual R.npy"),
    (lambda d: [np.save(d / "x.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "r.npy", np.zeros((2, 4), np.int16))],
     ["--x", "{d}/x.npy", "--residual", "{d}/r.npy"], "it must have the shape of X"),
    (lambda d: [np.save(d / "x.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "r.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "g.npy", np.zeros(8, np.int16) + 300)],
     ["--x", "{d}/x.npy", "--residual", "{d}/r.npy", "--gamma", "{d}/g.npy", "--beta", "{d}/g.npy"],
     "int8 values must lie in"),
    (lambda d: [np.save(d / "x.npy", np.zeros((2, 8), np.int16)),
                np.save(d / "r.npy", np.zeros((2, 8), np.int16))],
     ["--x", "{d}/x.npy", "--residual", "{d}/r.npy", "--gamma", "{d}/r.npy"],
     "--gamma and --beta go together"),
    (lambda d: None, ["--length", "6"], "multiple of lanes=4"),
    (lambda d: None, ["--h-max", "62"], "h_max must be a multiple of lanes (4), not 62"),
])
def test_cli_bad_input(tmp_path, capsys, setup, args, message):
    setup(tmp_path)
    argv = ["sim", "layernorm", "--lanes", "4", "--h-max", "64"]
    argv += [a.format(d=tmp_path) for a in args]
    if "--x" in args:
        argv += ["--out", str(tmp_path / "y.npy")]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y.npy").exists()


def test_cli_generate(tmp_path):
    assert main(["generate", "layernorm", "--lanes", "2", "--h-max", "8", "-o", str(tmp_path)]) == 0
    sidecar = json.loads((tmp_path / "layernorm_l2_h8_i16_p8_res.json").read_text())
    names = {port["name"] for port in sidecar["ports"]}
    assert {"x__payload", "r__valid", "params__payload", "y__ready"} <= names


@pytest.mark.slow
def test_verilator_bert_base_16_lanes():
    """128 vectors of 768 at 16 lanes: >= 0.95 * lanes elements per cycle."""
    config = LayerNormConfig(lanes=16, h_max=768)
    xs, rs, gamma, beta = _bert_vectors(config, 128, 768, 11)
    result = simulate_layernorm(config, xs, rs, gamma, beta, seed=11)
    assert result["match"] and result["cycles"] == result["model_cycles"]
    assert result["elements_per_cycle"] >= 0.95 * 16 and result["max_abs_err"] <= 1


@pytest.mark.slow
def test_bench_layernorm_small(tmp_path):
    from bertforge.generators.layernorm_sim import bench_layernorm
    rows = bench_layernorm(tmp_path, lanes=(4,), vectors=4, length=64, synth=True)
    assert rows[0]["match"] and rows[0]["cycles"] == rows[0]["model_cycles"]
    assert rows[0]["ecp5_luts"] > 0
    assert (tmp_path / "bench.md").exists()
