"""Fast Amaranth-simulator check of small ButterflyEngines (2 lanes, n_max =
16 and 4): every length from 2 to n_max, both modes and the inverse FFT,
full-scale random data, bit-exact against the golden models; a bad command
raises ``error``."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from bertforge.rtl.butterfly import MODES, ButterflyConfig, ButterflyEngine
from bertforge.sim.butterfly_golden import butterfly_fft, butterfly_linear
from bertforge.sim.stream_sim import add_watchdog, stream_get, stream_put


def run_engine(config, commands, x_vectors, weights):
    """Send ``commands`` (dicts), weight beats and x beats; return the output
    beats (lists of (re, im) per lane) and the error flag after each command."""
    dut = ButterflyEngine(config)
    outputs, errors = [], []
    expected = sum(c["n"] * c["groups"] for c in commands if c["mode"] != MODES["weights"]
                   and 2 <= c["n"] <= config.n_max and c["n"] & (c["n"] - 1) == 0
                   and c["groups"])

    async def send_commands(ctx):
        for command in commands:
            await stream_put(ctx, dut.cmd, command)
            errors.append(ctx.get(dut.error))     # the cycle after the command is taken

    def send(port, beats):
        async def bench(ctx):
            for beat in beats:
                await stream_put(ctx, port, beat)
        return bench

    async def collect(ctx):
        while len(outputs) < expected:
            y = await stream_get(ctx, dut.y)
            outputs.append(([(e["re"], e["im"]) for e in y["data"]], y["last"]))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(send_commands)
    sim.add_testbench(send(dut.w, weights), background=True)
    sim.add_testbench(send(dut.x, x_vectors), background=True)
    sim.add_testbench(collect)
    add_watchdog(sim, 5000)
    sim.run()
    return outputs, errors


def beats(config, re, im):
    lanes = config.lanes
    groups = -(-re.shape[0] // lanes)
    full = np.zeros((groups * lanes, re.shape[1], 2), dtype=np.int64)
    full[: re.shape[0], :, 0], full[: re.shape[0], :, 1] = re, im
    return [[{"re": int(full[g * lanes + l, k, 0]), "im": int(full[g * lanes + l, k, 1])}
             for l in range(lanes)] for g in range(groups) for k in range(re.shape[1])]


@pytest.mark.parametrize("n_max", [16, 4])
def test_small_engine_all_lengths_and_modes(n_max):
    config = ButterflyConfig(n_max=n_max, lanes=2)
    rng = np.random.default_rng(7)
    commands, x_all, w_all, golden = [], [], [], []
    for n in (2, 4, 8, 16)[:n_max.bit_length() - 1]:
        m = n.bit_length() - 1
        batch = 3
        re, im = rng.integers(-32768, 32768, (2, batch, n))
        weights = rng.integers(-32768, 32768, (m, n // 2, 4))
        commands.append({"mode": MODES["weights"], "n": n, "groups": 0, "shift": 0, "mult": 0})
        w_all += [[int(v) for v in row] for row in weights.reshape(-1, 4)]
        for mode in ("linear", "fft", "ifft"):
            commands.append({"mode": MODES[mode], "n": n, "groups": 2, "shift": 17, "mult": 3})
            x_all += beats(config, re, im)
            if mode == "linear":
                want = (butterfly_linear(config, re, weights, 3, 17), np.zeros_like(re))
            else:
                want = butterfly_fft(config, re, im, inverse=mode == "ifft")
            golden.append((n, batch, want))
    for bad_n in (6, 1):
        commands.insert(1, {"mode": MODES["fft"], "n": bad_n, "groups": 1, "shift": 0, "mult": 0})
    outputs, errors = run_engine(config, commands, x_all, w_all)
    assert errors == [0, 1, 1] + [0] * (len(commands) - 3)
    offset = 0
    for n, batch, (want_re, want_im) in golden:
        chunk = outputs[offset:offset + 2 * n]
        offset += 2 * n
        values = np.array([[v for lane in beat for v in lane] for beat, _ in chunk])
        values = values.reshape(2, n, 2, 2).transpose(0, 2, 1, 3).reshape(4, n, 2)[:batch]
        assert np.array_equal(values[..., 0], want_re)
        assert np.array_equal(values[..., 1], want_im)
        assert [last for _, last in chunk] == [False] * (2 * n - 1) + [True]
    assert offset == len(outputs)
