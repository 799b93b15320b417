"""The layernorm unit's int8 second output (``second_output``: the low-bit
encoder's smoothed GEMM operand beside the int16 residual): amaranth.sim,
the emitted Verilog in Verilator with stalls, parameters, and the Verilog
of the unit without it unchanged."""

import dataclasses

import numpy as np
import pytest
from amaranth.sim import Simulator

from bertforge.generators.layernorm_sim import random_layernorm_data, simulate_layernorm
from bertforge.rtl.errors import ParameterError, ParameterTypeError
from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from bertforge.sim.fixed_golden import ratio_to_mult_shift
from bertforge.sim.layernorm_cycles import layernorm_cycles
from bertforge.sim.layernorm_golden import layernorm_golden, layernorm_second

#: int16 in, int16 gamma/beta/output (as minilm.toml's unit), 4 lanes.
TWO = LayerNormConfig(lanes=4, h_max=32, in_width=16, param_width=16, gamma_frac=12,
                      beta_frac=12, out_width=16, out_shift=19, second_output=True)


def _second(config, length, rng, scale):
    """A random second pair (gamma2 up to 4, beta2 up to 2 in real units)
    and the run-time scale of an int8 LSB of ``scale``."""
    top = (1 << (config.param_width - 1)) - 1
    gamma2 = np.clip(np.floor(rng.normal(0, 1.5, length) * 2 ** config.gamma_frac), -top - 1, top)
    beta2 = np.clip(np.floor(rng.normal(0, 1.0, length) * 2 ** config.beta_frac), -top - 1, top)
    mult, shift = ratio_to_mult_shift(2.0 ** -(14 + config.gamma_frac) / scale)
    return gamma2.astype(np.int64), beta2.astype(np.int64), mult, shift


def _amaranth_run(config, xs, rs, gamma, beta, second=None, stall_every=0):
    """Load the parameters, stream the vectors, collect (data, data2) per
    output beat (data2 None without ``second``); ``stall_every``:
    ``y.ready`` low every that many cycles."""
    dut = LayerNorm(config)
    lanes, n = config.lanes, len(gamma) // config.lanes
    beats = [(x[i:i + lanes], r[i:i + lanes], i + lanes == len(x))
             for x, r in zip(xs, rs) for i in range(0, len(x), lanes)]
    got = []

    async def params(ctx):
        for b in range(n):
            s = slice(b * lanes, (b + 1) * lanes)
            beat = {"gamma": gamma[s].tolist(), "beta": beta[s].tolist(), "last": b == n - 1}
            if second:
                gamma2, beta2, mult2, shift2 = second
                beat.update(gamma2=gamma2[s].tolist(), beta2=beta2[s].tolist(), mult2=mult2,
                            shift2=shift2)
            ctx.set(dut.params.payload, beat)
            ctx.set(dut.params.valid, 1)
            await ctx.tick()
        ctx.set(dut.params.valid, 0)
        for x, r, last in beats:
            ctx.set(dut.x.payload, {"data": x.tolist(), "last": last})
            ctx.set(dut.r.payload, r.tolist())
            ctx.set(dut.x.valid, 1)
            ctx.set(dut.r.valid, 1)
            await ctx.tick().until(dut.x.ready)
        ctx.set(dut.x.valid, 0)
        ctx.set(dut.r.valid, 0)

    async def sink(ctx):
        cycle = 0
        while len(got) < len(beats):
            ready = not (stall_every and cycle % stall_every == 0)
            ctx.set(dut.y.ready, ready)
            await ctx.tick()
            cycle += 1
        ctx.set(dut.y.ready, 0)

    async def monitor(ctx):
        async for _, _, valid, ready, payload in ctx.tick().sample(dut.y.valid, dut.y.ready,
                                                                   dut.y.payload):
            if valid and ready:
                got.append((list(payload.data), list(payload.data2) if second else None))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(params)
    sim.add_testbench(sink)
    sim.add_process(monitor)
    sim.run_until(1e-6 * (40 * len(beats) + 400))
    return got


def test_amaranth_second_output_against_golden():
    rng = np.random.default_rng(3)
    xs, rs, gamma, beta = random_layernorm_data(TWO, 4, 16, rng)
    xs.append(np.full(8, 5))                      # constant: z = 0, both outputs beta
    rs.append(np.zeros(8, np.int64))
    second = _second(TWO, 16, rng, 0.02)          # small LSB: saturation at int8 too
    got = _amaranth_run(TWO, xs, rs, gamma, beta, second, stall_every=3)
    beat = 0
    for x, r in zip(xs, rs):
        n = len(x) // TWO.lanes
        data = np.concatenate([got[beat + b][0] for b in range(n)])
        data2 = np.concatenate([got[beat + b][1] for b in range(n)])
        beat += n
        assert data.tolist() == layernorm_golden(TWO, x, r, gamma, beta).tolist()
        assert data2.tolist() == layernorm_second(TWO, x, r, *second).tolist()
    assert beat == len(got)
    every = np.concatenate([g[1] for g in got])
    assert every.max() == 127 and every.min() == -128      # saturated both ways


def test_verilator_second_output_stalls_and_cycles():
    rng = np.random.default_rng(11)
    xs, rs, gamma, beta = [], [], None, None
    for length in (32, 4, 16, 32, 8):
        x, r, gamma, beta = random_layernorm_data(TWO, 2, length, rng) if length == 32 else (
            *random_layernorm_data(TWO, 2, length, rng)[:2], gamma, beta)
        xs += x
        rs += r
    lo, hi = -32768, 32767
    xs += [np.full(32, hi), np.where(np.arange(32) % 2, hi, lo), np.array([-1, 1, 0, -1])]
    rs += [np.full(32, hi), np.where(np.arange(32) % 3, lo, hi), np.array([1, -1, 1, 0])]
    gamma2, beta2, mult2, shift2 = _second(TWO, 32, rng, 0.05)
    gamma2[:4] = [-32768, 32767, 0, -1]
    beta2[:4] = [32767, -32768, 0, 1]
    second = (gamma2, beta2, mult2, shift2)
    clean = simulate_layernorm(TWO, xs, rs, gamma, beta, seed=1, second=second)
    assert clean["passed"] and clean["match"]
    assert clean["cycles"] == clean["model_cycles"] == layernorm_cycles(TWO, [len(x) for x in xs])
    for x, r, y, y2 in zip(xs, rs, clean["outputs"], clean["outputs2"]):
        assert np.array_equal(y, layernorm_golden(TWO, x, r, gamma, beta))
        assert np.array_equal(y2, layernorm_second(TWO, x, r, *second))
    assert {-128, 127} <= set(np.concatenate(clean["outputs2"]).tolist())
    stalled = simulate_layernorm(TWO, xs, rs, gamma, beta, seed=2, x_gap=0.3, y_stall=0.5,
                                 second=second)
    assert stalled["passed"] and stalled["match"] and stalled["cycles"] > stalled["model_cycles"]
    for y2, want in zip(stalled["outputs2"], clean["outputs2"]):
        assert np.array_equal(y2, want)


def test_second_output_parameters():
    with pytest.raises(ParameterTypeError, match=r"^second_output must be a bool"):
        dataclasses.replace(TWO, second_output=1)
    assert TWO.name.endswith("_two") and TWO.to_dict()["second_output"] is True
    off = dataclasses.replace(TWO, second_output=False)
    assert "second_output" not in off.to_dict()        # earlier configs' headers unchanged
    assert not off.name.endswith("_two")
    assert "data2" not in LayerNorm(off).y.payload.shape().members
    rng = np.random.default_rng(0)
    xs, rs, gamma, beta = random_layernorm_data(TWO, 1, 8, rng)
    with pytest.raises(ParameterError, match=r"^second \(gamma2, beta2, mult2, shift2\) is required"):
        simulate_layernorm(TWO, xs, rs, gamma, beta)
    with pytest.raises(ParameterError, match=r"^gamma2 \(4,\) and beta2 \(8,\) must have gamma's"):
        simulate_layernorm(TWO, xs, rs, gamma, beta, second=(gamma[:4], beta, 1, 0))
