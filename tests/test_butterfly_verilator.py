"""cocotb tests of the emitted ButterflyEngine Verilog in Verilator.

Per design (n_max = 256; lanes 1, 2, 8): one run of many commands back to
back (rejected commands, weight loads, linear, fft and ifft at n = 2, 4, 8,
64, 256, random data and extremes) that must match the golden model bit for
bit. The run is cut into segments (a job marked ``isolate`` waits until the
engine is empty); within each segment the commands run back to back (same
length batches, and mixed lengths, modes and weight loads), and every job's
first input and last output cycle must equal the cycle model's queue
timeline. Then the same commands with random gaps on every input stream and
output backpressure, which must still match with nothing lost or duplicated.
"""

import json

import numpy as np
import pytest

from bertforge.generators.butterfly_sim import simulate_butterfly
from bertforge.generators.cli import main
from bertforge.rtl.butterfly import ButterflyConfig
from bertforge.sim.butterfly_cycles import butterfly_cycles, butterfly_groups
from bertforge.sim.butterfly_golden import butterfly_fft, butterfly_linear
from bertforge.sim.coverage import uncovered

DESIGNS = [
    ButterflyConfig(n_max=256, lanes=1, width=16, weight_width=8),
    ButterflyConfig(n_max=256, lanes=2, width=16, weight_width=16),
    ButterflyConfig(n_max=256, lanes=8, width=16, weight_width=8),
]


def design_id(config):
    return f"n{config.n_max}-l{config.lanes}-w{config.weight_width}"


class Jobs:
    def __init__(self, config, seed):
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.jobs, self.arrays = [], {}
        self.hi = (1 << (config.width - 1)) - 1
        self.lo = -self.hi - 1

    def add(self, job, **arrays):
        j = len(self.jobs)
        self.jobs.append(job)
        for key, value in arrays.items():
            self.arrays[f"{key}_{j}"] = np.asarray(value, dtype=np.int64)

    def weights(self, n, weights=None, isolate=False):
        if weights is None:
            lim = 1 << (self.config.weight_width - 1)
            weights = self.rng.integers(-lim, lim, (n.bit_length() - 1, n // 2, 4))
        self.add({"mode": "weights", "n": n, "isolate": isolate}, w=weights)
        return weights

    def vectors(self, mode, n, batch, re=None, im=None, isolate=False, mult=1, shift=None):
        if re is None:
            re = self.rng.integers(self.lo, self.hi + 1, (batch, n))
        if im is None:
            im = self.rng.integers(self.lo, self.hi + 1, (batch, n))
        job = {"mode": mode, "n": n, "batch": batch, "isolate": isolate}
        if mode == "linear":
            job.update(mult=mult, shift=self.config.weight_width if shift is None else shift)
        self.add(job, x_re=re, x_im=im)


def mixed_jobs(config, seed):
    lanes = config.lanes
    j = Jobs(config, seed)
    # Rejected: n not a power of two, n > n_max, n < 2, no vectors. Each
    # raises error; the next valid command clears it.
    for mode, n, groups in (("fft", 12, 1), ("linear", 512, 1), ("ifft", 1, 1), ("fft", 16, 0)):
        j.add({"mode": mode, "n": n, "groups": groups})
        j.add({"mode": "fft", "n": 4, "batch": 1}, x_re=[[1, 2, 3, 4]], x_im=[[0, 0, 0, -1]])
    j.weights(4)
    j.vectors("linear", 4, 2 * lanes + 1, isolate=True)
    j.vectors("fft", 4, 2 * lanes, isolate=True)
    j.vectors("ifft", 8, lanes + 1)
    j.vectors("fft", 64, 2 * lanes, isolate=True)
    j.weights(256)
    j.vectors("linear", 256, lanes, isolate=True)
    j.vectors("fft", 256, 2 * lanes, isolate=True)
    j.vectors("ifft", 256, lanes)
    # Extremes: all max, all min, alternating signs, an impulse (n = 64 and 2).
    for n in (64, 2):
        full = np.full((1, n), j.hi)
        alternating = np.where(np.arange(n) % 2 == 0, j.lo, j.hi)[None, :]
        impulse = np.zeros((1, n), dtype=np.int64)
        impulse[0, 5 % n] = j.lo
        for re, im in ((full, full), (full * 0 + j.lo, full * 0 + j.lo),
                       (alternating, -1 - alternating), (impulse, impulse[:, ::-1])):
            batch = lanes
            j.vectors("fft", n, batch, np.repeat(re, batch, 0), np.repeat(im, batch, 0))
            j.vectors("ifft", n, batch, np.repeat(re, batch, 0), np.repeat(im, batch, 0))
    # Linear extremes at n = 8: saturating weights and data, shift 0 and 15.
    lim = 1 << (config.weight_width - 1)
    j.weights(8, np.full((3, 4, 4), -lim))
    x8 = np.full((lanes, 8), j.lo)
    j.vectors("linear", 8, lanes, x8, shift=0)
    j.vectors("linear", 8, lanes, -x8 - 1, shift=15, mult=65535)
    j.weights(8)
    j.vectors("linear", 8, lanes, np.where(np.arange(8) % 2 == 0, j.lo, j.hi)[None, :].repeat(lanes, 0))
    # FFT outputs past full scale: square corners that follow bin 1's
    # twiddles (n = 8) give it 1.2 times full scale, in each component and
    # sign; group g's lane l takes kind (g + l) % 4, so every lane clamps
    # its re and im high and low (the output clamps' lines).
    w = np.exp(-2j * np.pi * np.arange(8) / 8)
    corner = lambda value: np.where(value >= 0, j.hi, j.lo)     # noqa: E731
    kinds = [(corner(w.real), corner(-w.imag)), (corner(-w.real), corner(w.imag)),
             (corner(w.imag), corner(w.real)), (corner(-w.imag), corner(-w.real))]
    order = [(g + lane) % 4 for g in range(4) for lane in range(lanes)]
    j.corners = len(j.jobs)
    j.vectors("fft", 8, 4 * lanes, np.array([kinds[k][0] for k in order]),
              np.array([kinds[k][1] for k in order]))
    # Modes and lengths back to back without waiting.
    j.vectors("fft", 8, 3 * lanes)
    j.vectors("linear", 8, lanes + 1)
    # shift 12 (bit 3 set) on small data: an unsaturated linear job whose
    # shift has more than three bits (the others use 0, 15 saturated and 16)
    small = (np.arange(lanes * 8).reshape(lanes, 8) * 37) % 401 - 200
    j.vectors("linear", 8, lanes, small, small[:, ::-1], shift=12)
    # shift 10 with small weights and data (none saturates in 3 stages):
    # the products' bits from 9 up reach the rounding of every stage, so an
    # error of 512 in a product moves outputs (mutation testing, seed 2)
    small_w = min(1024, (1 << (config.weight_width - 1)) - 1)
    j.weights(8, j.rng.integers(-small_w, small_w + 1, (3, 4, 4)))
    j.vectors("linear", 8, 4 * lanes, j.rng.integers(-256, 257, (4 * lanes, 8)), shift=10)
    # an even multiplier and a shift of 32: every other job's multiplier is
    # odd (bit 0 never fell) and its shift below 32 (bit 5 never rose)
    j.vectors("linear", 8, lanes, mult=0xAAAA, shift=32)
    j.vectors("ifft", 64, lanes)
    # n = 2: one 2x2 block / one radix-2 stage, lanes > n/2 on 8 lanes.
    j.weights(2, isolate=True)
    j.vectors("linear", 2, 2 * lanes + 1)
    j.vectors("fft", 2, 3 * lanes + 1)
    j.vectors("ifft", 2, 1)
    x2 = np.array([[j.lo, j.lo], [j.hi, j.lo], [j.lo, 0]] * lanes)
    j.vectors("linear", 2, 3 * lanes, x2, shift=0)
    # Batches of one length back to back (checked against the closed form).
    j.vectors("fft", 64, 2 * lanes, isolate=True)
    j.vectors("ifft", 64, lanes + 1)
    j.vectors("fft", 64, 1)
    # Mixed lengths, modes and weight loads back to back.
    j.vectors("fft", 2, lanes, isolate=True)
    j.weights(8)
    j.vectors("linear", 8, 2 * lanes)
    j.vectors("linear", 2, lanes + 1)       # reads the n = 8 load's first block
    j.vectors("ifft", 256, lanes)
    j.vectors("fft", 4, 1)
    j.vectors("fft", 2, 2 * lanes)
    j.vectors("ifft", 32, lanes + 1)
    # Back to back, the pairs of command kinds (sim.butterfly_tb.JOB_KINDS)
    # the jobs above leave out: ifft twice, rejected after each kind and
    # before each, weights twice (the second load's first beat waits for its
    # command) and weights at their extremes.
    lim = 1 << (config.weight_width - 1)
    j.vectors("ifft", 4, 1)
    j.add({"mode": "fft", "n": 6, "groups": 1})
    j.add({"mode": "ifft", "n": 4, "groups": 0})
    j.vectors("linear", 4, lanes)
    j.add({"mode": "linear", "n": 1, "groups": 1})
    j.vectors("ifft", 4, 1)
    j.weights(4, np.resize([lim - 1, 0, -1, 1, -lim], (2, 2, 4)))
    j.weights(4)
    j.add({"mode": "fft", "n": 2 * config.n_max, "groups": 1})
    j.weights(4)
    j.vectors("fft", 4, 1)
    j.weights(4)
    j.vectors("ifft", 4, lanes)
    # every length the engine takes (n = 16 and 128 are in no job above)
    j.vectors("linear", 16, lanes)
    j.vectors("ifft", 128, lanes)
    # a multiplier with bits 6 and 11 set on unsaturated data (the others:
    # 1, 65,535 saturated and 0xAAAA at shift 32, whose outputs are 0 or
    # -1; mutation testing of the narrowed RTL, seed 1: bit 6 of the
    # product stage's mult tied to 0 passed them)
    small_w = min(1024, (1 << (config.weight_width - 1)) - 1)
    j.weights(8, j.rng.integers(-small_w, small_w + 1, (3, 4, 4)))
    j.vectors("linear", 8, 4 * lanes, j.rng.integers(-4096, 4097, (4 * lanes, 8)),
              mult=0x0841, shift=21)
    # a multiplier with bit 13 set on 7 groups (slot 1 of the 3 descriptor
    # slots holds 2 or 3 of them, one at least not the job's last; the
    # others with bit 13, 65,535 and 0xAAAA, are one group each; mutation
    # testing of the narrowed RTL, seed 2: slot 1's last flag flipped when
    # its mult bit 13 is set passed them)
    j.vectors("linear", 8, 7 * lanes, j.rng.integers(-4096, 4097, (7 * lanes, 8)),
              mult=0x2001, shift=23)
    # linear outputs just above the low clamp, -32,767 to -28,673 (identity
    # weights, n = 2, shift 0; mutation testing, seed 2: lane 1's low clamp
    # compared against -28,672 instead of -32,768 passed every other job,
    # whose outputs are small or saturated)
    j.weights(2, np.array([[[1, 0, 0, 1]]]))
    j.vectors("linear", 2, 2 * lanes, j.rng.integers(-32767, -28672, (2 * lanes, 2)), shift=0)
    return j

#: Segments of :func:`mixed_jobs` (each starts at an isolated job).
SEGMENTS = 9


def check_against_golden(config, jobs, result):
    """Recompute every job's golden output here (independently of the tb)."""
    memory = np.zeros((config.log_n_max, config.n_max // 2, 4), dtype=np.int64)
    checked = 0
    for index, job in enumerate(jobs.jobs):
        n = job["n"]
        if job["mode"] == "weights":
            memory[: n.bit_length() - 1, : n // 2] = jobs.arrays[f"w_{index}"]
            continue
        if f"x_re_{index}" not in jobs.arrays or job.get("groups") == 0:
            continue
        re, im = jobs.arrays[f"x_re_{index}"], jobs.arrays[f"x_im_{index}"]
        if job["mode"] == "linear":
            want_re = butterfly_linear(config, re, memory[: n.bit_length() - 1, : n // 2],
                                       job["mult"], job["shift"])
            want_im = np.zeros_like(want_re)
        else:
            want_re, want_im = butterfly_fft(config, re, im, job["mode"] == "ifft")
        assert np.array_equal(result["outputs"][f"y_re_{index}"], want_re), index
        assert np.array_equal(result["outputs"][f"y_im_{index}"], want_im), index
        checked += 1
    return checked


@pytest.mark.parametrize("config", DESIGNS, ids=design_id)
def test_mixed_commands_match_golden_and_cycle_model(config, tmp_path):
    jobs = mixed_jobs(config, seed=config.lanes)
    result = simulate_butterfly(config, jobs.jobs, jobs.arrays, seed=1, workdir=tmp_path / "clean")
    assert result["passed"], result["log"]
    assert result["match"] and result["problems"] == []
    assert result["errors_checked"] == len(jobs.jobs)
    # Every compute job and every segment matches the cycle model.
    computes = [job for job in jobs.jobs if job.get("batch")]
    assert result["model_checked"] == len(result["jobs"]) == len(computes) == 61
    for job in result["jobs"]:
        assert job["cycles"] == job["model_cycles"]
    segments = result["segments"]
    assert len(segments) == SEGMENTS
    for segment in segments:
        assert segment["cycles"] == segment["model_cycles"]
    # Same-length batches back to back: the closed form of all their groups.
    same = next(seg for seg in segments if jobs.jobs[seg["jobs"][0]]["n"] == 64
                and seg["jobs"][1] - seg["jobs"][0] == 2)
    groups = sum(butterfly_groups(config, jobs.jobs[k]["batch"])
                 for k in range(same["jobs"][0], same["jobs"][1] + 1))
    assert same["cycles"] == butterfly_cycles(config, 64, groups * config.lanes)
    assert check_against_golden(config, jobs, result) == len(result["jobs"])
    # Saturation is reached in the linear extremes.
    assert any(np.max(np.abs(v)) >= 32767 for k, v in result["outputs"].items() if "re" in k)
    # and in the FFT's outputs, both components at both ends
    for part in ("re", "im"):
        bin1 = result["outputs"][f"y_{part}_{jobs.corners}"][:, 1]
        assert bin1.max() == 32767 and bin1.min() == -32768

    # with stalls, after a run cut short by a reset while the output was
    # held off (mutation testing, seed 2: the output queue's reset tied to 0
    # passed the clean runs)
    stalled = simulate_butterfly(config, jobs.jobs, jobs.arrays, seed=2, cmd_gap=0.3, x_gap=0.4,
                                 w_gap=0.4, y_stall=0.5, reset_after=300,
                                 workdir=tmp_path / "stalls")
    assert stalled["passed"], stalled["log"]
    assert min(stalled["beats_before_reset"]) > 0        # commands and vectors taken
    assert stalled["match"] and stalled["problems"] == []
    assert stalled["cycles"] > result["cycles"]
    assert check_against_golden(config, jobs, stalled) == len(result["jobs"])
    # every functional cover point (sim/funcov_tb.py) of the two runs
    assert uncovered([result, stalled]) == []


def test_cli_sim_random_and_user_data(tmp_path, capsys):
    args = ["sim", "butterfly", "--n-max", "256", "--lanes", "2", "--weight-width", "16"]
    assert main(args + ["--n", "64", "--mode", "fft", "--batch", "8", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["match"] and summary["cycles"] == summary["model_cycles"]
    assert summary["ideal_cycles"] == 8 * 32 * 6 / 2
    assert summary["sqnr_db"] > 60

    rng = np.random.default_rng(5)
    x = rng.integers(-32768, 32768, (3, 16)).astype(np.int16)
    w = rng.integers(-32768, 32768, (4, 8, 4)).astype(np.int16)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    out = tmp_path / "y.npy"
    assert main(args + ["--mode", "linear", "--x", str(tmp_path / "x.npy"), "--weights",
                        str(tmp_path / "w.npy"), "--shift", "16", "--out", str(out)]) == 0
    config = ButterflyConfig(n_max=256, lanes=2, weight_width=16)
    assert np.array_equal(np.load(out), butterfly_linear(config, x, w, 1, 16))
    capsys.readouterr()

    out_fft = tmp_path / "f.npy"
    assert main(args + ["--mode", "ifft", "--x", str(tmp_path / "x.npy"), "--x-im",
                        str(tmp_path / "x.npy"), "--out", str(out_fft), "--json"]) == 0
    re, im = butterfly_fft(config, x, x, inverse=True)
    assert np.array_equal(np.load(out_fft), np.stack([re, im], axis=-1))
    capsys.readouterr()

    # n = 2 (fewer butterflies than lanes).
    assert main(args + ["--n", "2", "--mode", "linear", "--batch", "5", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["match"] and summary["n"] == 2
    assert summary["cycles"] == summary["model_cycles"] == butterfly_cycles(config, 2, 5)
    assert summary["ideal_cycles"] == 5 * 1 * 1 / 2


def test_bench_rows_and_files(tmp_path):
    """The bench's rows (a small version: n = 64, 2 lanes, batch 8)."""
    from bertforge.generators.butterfly_sim import bench_butterfly
    rows = bench_butterfly(tmp_path, ns=(64,), lanes=(2,), batch=8, n_max=256)
    assert [(row["n"], row["mode"]) for row in rows] == [(64, "linear"), (64, "fft")]
    for row in rows:
        assert row["match"] and row["cycles"] == row["model_cycles"]
        assert row["utilization"] == row["ideal_cycles"] / row["cycles"]
        assert row["dense_array"] == "4x2" and row["dense_cycles"] > 0
        assert row["speedup_vs_dense"] == row["dense_cycles"] / row["cycles"]
        assert (row["sqnr_db"] is None) == (row["mode"] == "linear")
    assert rows[1]["sqnr_db"] > 60 and rows[0]["macs_saved"] == 1 - 6 * 32 * 4 / 64 ** 2
    assert rows[1]["macs_saved"] == 1 - 6 * 32 * 4 / 128 ** 2     # the DFT as 2n x 2n real
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["benchmark"] == "butterfly" and len(saved["results"]) == 2
    assert "| MACs saved |" in (tmp_path / "bench.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["linear", "fft"])
def test_n1024_batch_128_targets(mode, tmp_path):
    """The bench's hardest length on its widest engine: 128 vectors of 1024
    back to back on 16 lanes match the golden model and the cycle model, with
    utilization >= 90% (and SQNR >= 60 dB for the FFT)."""
    from bertforge.generators.butterfly_sim import random_jobs_data
    config = ButterflyConfig(n_max=1024, lanes=16)
    jobs, arrays = random_jobs_data(config, 1024, mode, 128, np.random.default_rng(11))
    result = simulate_butterfly(config, jobs, arrays, seed=11, workdir=tmp_path)
    assert result["passed"] and result["match"], result["log"]
    assert result["cycles"] == result["model_cycles"]
    assert result["utilization"] >= 0.9
    if mode == "fft":
        assert result["jobs"][0]["sqnr_db"] >= 60
