"""LayerNorm in amaranth.sim (no Verilator): the pipelined rsqrt against its
reference; the unit with int8 inputs against the golden model."""

import random

import numpy as np

from amaranth.hdl import Module
from amaranth.sim import Simulator

from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.rsqrt import RSQRT_STAGES, RsqrtPipeline, rsqrt_reference
from bertforge.sim.layernorm_golden import layernorm_golden, layernorm_vector_stats


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


def test_int8_inputs_against_golden():
    """``in_width`` 8 (the int8 encoder top's unit, as in tiny.toml): int8
    ``x + r`` at its extremes (-256: both at -128; the largest variance,
    +254 / -256 alternating over 64 channels), a constant vector (z = 0,
    the output is beta), short vectors and random ones, with stalls:
    bit-exact against the golden model, saturating both ways."""
    from test_layernorm_second import _amaranth_run
    config = LayerNormConfig(lanes=4, h_max=64, in_width=8)
    rng = np.random.default_rng(8)
    lo, hi = -128, 127
    alternate = np.where(np.arange(64) % 2, hi, lo)
    xs = [alternate, np.full(64, lo), rng.integers(lo, hi + 1, 16), np.array([hi, lo, 0, 1]),
          rng.integers(-3, 4, 32), alternate[:8]]
    rs = [alternate, np.full(64, lo), rng.integers(lo, hi + 1, 16), np.array([hi, lo, -1, 0]),
          rng.integers(-3, 4, 32), -alternate[:8] - 1]
    gamma = rng.integers(lo, hi + 1, 64)
    beta = rng.integers(lo, hi + 1, 64)
    gamma[:4], beta[:4] = [lo, hi, 0, 64], [hi, lo, 0, 16]
    got = _amaranth_run(config, xs, rs, gamma, beta, stall_every=3)
    beat = 0
    for x, r in zip(xs, rs):
        n = len(x) // config.lanes
        data = np.concatenate([got[beat + b][0] for b in range(n)])
        beat += n
        assert data.tolist() == layernorm_golden(config, x, r, gamma, beta).tolist()
    assert beat == len(got)
    every = np.concatenate([g[0] for g in got])
    assert every.max() == hi and every.min() == lo
    # the largest-variance vector's D reaches the statistics' top bit: the
    # int16 unit's D of these values would leave its upper 17 bits unused
    _, _, d, _, _ = layernorm_vector_stats(2 * alternate)
    assert d.bit_length() == 28 == (64 ** 2 * 511 ** 2 // 4).bit_length()
