"""The GELU unit's per-channel output scales (``channel_scales``: the low-bit
encoder's int8 GEMM operand ``g``, smoothed per channel, from int16 FFN
pre-activations): amaranth.sim, the emitted Verilog in Verilator with
stalls, parameters."""

import dataclasses

import numpy as np
import pytest
from amaranth.sim import Simulator

from bertforge.generators.gelu_sim import random_gelu_input, simulate_gelu
from bertforge.rtl.errors import ParameterError, ParameterTypeError
from bertforge.rtl.gelu import GELU_Y, Gelu, GeluConfig
from bertforge.sim.fixed_golden import channel_scale_words
from bertforge.sim.gelu_cycles import gelu_cycles
from bertforge.sim.gelu_golden import gelu_golden

#: int16 in at LSB 1/512 (minilm.toml's GELU input), int8 out per channel.
CHANNELS = GeluConfig(lanes=4, in_width=16, out_width=8, in_mult=2, in_shift=0,
                      channel_scales=True, channels_max=32)


def _words(rng, channels):
    """Per-channel output LSBs from 1/256 to 1/4 (smoothing factors times a
    tensor scale): the int8 outputs saturate on the fine channels."""
    lsb = 2.0 ** rng.uniform(-8, -2, channels)
    return channel_scale_words(2.0 ** -GELU_Y.frac_bits / lsb).astype(np.int64)


def _amaranth_run(config, x, words, stall_every=0):
    dut = Gelu(config)
    lanes = config.lanes
    rows, length = x.shape
    n = length // lanes
    got = []

    async def source(ctx):
        for b in range(n):
            ctx.set(dut.scales.payload, {"words": words[b * lanes:(b + 1) * lanes].tolist(),
                                         "last": b == n - 1})
            ctx.set(dut.scales.valid, 1)
            await ctx.tick()
        ctx.set(dut.scales.valid, 0)
        for row in x:
            for b in range(n):
                ctx.set(dut.x.payload, {"data": row[b * lanes:(b + 1) * lanes].tolist(),
                                        "last": b == n - 1})
                ctx.set(dut.x.valid, 1)
                await ctx.tick().until(dut.x.ready)
                if stall_every and b % stall_every == 1:     # a gap
                    ctx.set(dut.x.valid, 0)
                    await ctx.tick()
        ctx.set(dut.x.valid, 0)

    async def sink(ctx):
        cycle = 0
        while len(got) < rows * n:
            ctx.set(dut.y.ready, not (stall_every and cycle % stall_every == 0))
            await ctx.tick()
            cycle += 1

    async def monitor(ctx):
        async for _, _, valid, ready, payload in ctx.tick().sample(dut.y.valid, dut.y.ready,
                                                                   dut.y.payload):
            if valid and ready:
                got.append((list(payload.data), payload.last))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.add_process(monitor)
    sim.run_until(1e-6 * (4 * rows * n + 200))
    data = np.array([g[0] for g in got]).reshape(rows, length)
    return data, [bool(g[1]) for g in got]


def test_amaranth_channel_scales_against_golden():
    rng = np.random.default_rng(4)
    x = random_gelu_input(CHANNELS, 6, 16, rng)
    x[0] = [-32768, 32767, 0, -1, 1, 2048, -2048, 4096] * 2
    words = _words(rng, 16)
    for stall in (0, 3):
        data, last = _amaranth_run(CHANNELS, x, words, stall)
        want = gelu_golden(CHANNELS, x, words)
        assert data.tolist() == want.tolist()
        assert last == [(b % 4) == 3 for b in range(len(last))]
    assert 127 in want                                  # saturated (GELU's negatives are small)
    # each channel takes its own word: channel 0's word everywhere differs
    assert not np.array_equal(want, gelu_golden(CHANNELS, x, np.full(16, words[0])))


def test_verilator_channel_scales_stalls_and_cycles():
    rng = np.random.default_rng(12)
    x = random_gelu_input(CHANNELS, 9, 32, rng)
    x[0, :8] = [-32768, 32767, 0, -1, 1, 2048, -2048, 4096]
    words = _words(rng, 32)
    words[:2] = channel_scale_words([2.0 ** -24, 2.0 ** 8])   # coarse: all 0; fine: saturates
    clean = simulate_gelu(CHANNELS, x, seed=1, words=words)
    assert clean["passed"] and clean["match"]
    assert clean["cycles"] == clean["model_cycles"] == gelu_cycles(CHANNELS, x.size // 4)
    want = gelu_golden(CHANNELS, x, words)
    assert np.array_equal(clean["outputs"], want)
    assert set(want[:, 0].tolist()) == {0} and {-128, 127} <= set(want[:, 1].tolist())
    shorter = x[:, :16]                                     # rows shorter than the words loaded
    stalled = simulate_gelu(CHANNELS, shorter, seed=2, x_gap=0.3, y_stall=0.5, words=words[:16])
    assert stalled["passed"] and stalled["match"] and stalled["cycles"] > stalled["model_cycles"]
    assert np.array_equal(stalled["outputs"], gelu_golden(CHANNELS, shorter, words[:16]))


def test_channel_scales_parameters():
    with pytest.raises(ParameterTypeError, match=r"^channel_scales must be a bool"):
        dataclasses.replace(CHANNELS, channel_scales="yes")
    with pytest.raises(ParameterError, match=r"^channels_max must be a multiple of lanes \(4\), not 30$"):
        dataclasses.replace(CHANNELS, channels_max=30)
    with pytest.raises(ParameterError, match=r"^channels_max must be an integer <= 4096"):
        dataclasses.replace(CHANNELS, channels_max=4100)
    off = dataclasses.replace(CHANNELS, channel_scales=False, channels_max=4096)
    assert "channel_scales" not in off.to_dict() and "channels_max" not in off.to_dict()
    assert off.name == "gelu_l4_i16_o8" and CHANNELS.name == "gelu_l4_i16_o8_c32"
    assert "scales" not in Gelu(off).signature.members
    x = np.zeros((1, 8), np.int64)
    with pytest.raises(ParameterError, match=r"^words \(one scale word per channel\) are required"):
        simulate_gelu(CHANNELS, x)
    with pytest.raises(ParameterError, match=r"^8 channels need as many scale words, not shape \(4,\)"):
        simulate_gelu(CHANNELS, x, words=np.ones(4, np.int64))
    with pytest.raises(ParameterError, match=r"^rows of 36 exceed channels_max = 32"):
        simulate_gelu(CHANNELS, np.zeros((1, 36), np.int64), words=np.ones(36, np.int64))
