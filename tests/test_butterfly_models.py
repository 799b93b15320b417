"""Butterfly engine: parameter checks, golden models against the dense
matrices and numpy.fft, cycle model formulas, emission, CLI input errors."""

import json

import numpy as np
import pytest

from config_helpers import config_tests
from bertforge.generators.cli import main
from bertforge.generators.emit import emit_verilog
from bertforge.rtl.butterfly import (COMPUTE_LATENCY, FFT_GUARD_BITS, ButterflyConfig,
                                     ButterflyEngine, command_is_valid, stage_period,
                                     fft_magnitude_bounds, twiddle_table)
from bertforge.rtl.fixed import Q
from bertforge.sim import fixed_golden
from bertforge.sim.butterfly_cycles import (butterfly_cycles, butterfly_groups,
                                            butterfly_ideal_cycles, butterfly_queue_cycles,
                                            butterfly_timeline)
from bertforge.sim.butterfly_golden import (bit_reverse_permutation, butterfly_dense_factors,
                                            butterfly_fft, butterfly_linear, dense_linear,
                                            log2_length, sqnr_db)


# ---- parameters -------------------------------------------------------------

test_bad_parameters, test_component_needs_a_config = config_tests(ButterflyConfig, ButterflyEngine, [
    ({"n_max": 12}, ValueError, r"^n_max must be a power of two, not 12$"),
    ({"n_max": 2}, ValueError, r"^n_max must be an integer >= 4, not 2$"),
    ({"n_max": 2048}, ValueError, r"^n_max must be an integer <= 1024, not 2048$"),
    ({"n_max": 64.0}, TypeError, r"^n_max must be an integer, not 64\.0$"),
    ({"n_max": 64, "lanes": 64}, ValueError, r"^lanes must be an integer <= 32, not 64$"),
    ({"n_max": 64, "lanes": 3}, ValueError, r"^lanes must be a power of two, not 3$"),
    ({"lanes": 0}, ValueError, r"^lanes must be a positive integer, not 0$"),
    ({"lanes": True}, TypeError, r"^lanes must be an integer, not True$"),
    ({"width": 12}, ValueError, r"^width must be 8 or 16, not 12$"),
    ({"weight_width": "8"}, TypeError, r"^weight_width must be an integer, not '8'$"),
])


def test_largest_legal_parameters_are_accepted():
    config = ButterflyConfig(n_max=1024, lanes=512, width=8, weight_width=8)
    assert config.name == "butterfly_n1024_l512_d8_w8"
    assert ButterflyConfig(n_max=4, lanes=2).log_n_max == 2


def test_commands_the_hardware_accepts():
    config = ButterflyConfig(n_max=64)
    assert [n for n in range(0, 200) if command_is_valid(config, 1, n, 1)] == [2, 4, 8, 16, 32, 64]
    assert command_is_valid(ButterflyConfig(n_max=4, lanes=2), 0, 2, 1)  # lanes > n/2 is fine
    assert not command_is_valid(config, 0, 16, 0)      # no vectors
    assert command_is_valid(config, 3, 16, 0)          # weight load needs no groups


# ---- golden models ----------------------------------------------------------

def test_twiddle_rom_is_q2_width():
    config = ButterflyConfig(n_max=16, width=16)
    table = twiddle_table(config)
    assert config.twiddle_format == Q(2, 16)
    assert table[0] == (1 << 16, 0)
    assert table[4] == (0, -(1 << 16))
    assert len(table) == 8


@pytest.mark.parametrize("n", [2, 4, 8, 64, 256])
def test_butterfly_product_equals_its_dense_expansion(n):
    config = ButterflyConfig(n_max=256, width=16, weight_width=8)
    rng = np.random.default_rng(n)
    m = n.bit_length() - 1
    x = rng.integers(-32768, 32768, (6, n))
    w = rng.integers(-128, 128, (m, n // 2, 4))
    for mult, shift in ((1, 8), (3, 9), (200, 15), (1, 0)):
        got = butterfly_linear(config, x, w, mult, shift)
        assert np.array_equal(got, dense_linear(config, x, w, mult, shift))
    # shift 0 saturates: both bounds are reached.
    assert butterfly_linear(config, x, w, 1, 0).max() == 32767
    # Each factor has n/2 disjoint 2x2 blocks, stride n / 2**(s+1), and
    # without requantization the product is the dense product.
    factors = butterfly_dense_factors(w, n)
    for s, dense in enumerate(factors):
        assert np.count_nonzero(dense) <= 2 * n
        rows, cols = np.nonzero(dense)
        assert set(np.abs(rows - cols)) <= {0, n >> (s + 1)}
    small = rng.integers(-3, 4, (2, n))
    ones = np.ones((m, n // 2, 4), dtype=np.int64)
    big = ButterflyConfig(n_max=256, width=16)
    exact = butterfly_linear(big, small, ones, 1, 0)
    dense_ones = np.eye(n, dtype=np.int64)
    for dense in butterfly_dense_factors(ones, n):
        dense_ones = dense @ dense_ones
    assert np.array_equal(exact, np.clip(small @ dense_ones.T, -32768, 32767))


def test_requantize_is_the_house_rule():
    config = ButterflyConfig(n_max=4, width=8, weight_width=8)
    x = np.array([[1, 2, 3, 4]])
    w = np.zeros((2, 2, 4), dtype=np.int64)
    w[:, :, 0] = 5   # v'[2i] = rq(5 v[i]), v'[2i+1] = 0
    got = butterfly_linear(config, x, w, 3, 2)
    stage1 = np.zeros(4, dtype=np.int64)
    stage1[0::2] = fixed_golden.requantize(5 * x[0, :2], 3, 2)
    want = np.zeros(4, dtype=np.int64)
    want[0::2] = fixed_golden.requantize(5 * stage1[:2], 3, 2)
    assert np.array_equal(got[0], want)


@pytest.mark.parametrize("width, n, floor_db", [(16, 2, 80), (16, 4, 80), (16, 64, 70), (16, 256, 65),
                                                (16, 1024, 60), (8, 256, 20)])
def test_fixed_point_fft_against_numpy(width, n, floor_db):
    config = ButterflyConfig(n_max=1024, width=width)
    rng = np.random.default_rng(width + n)
    lim = 1 << (width - 1)
    re, im = rng.integers(-lim, lim, (16, n)), rng.integers(-lim, lim, (16, n))
    for inverse in (False, True):
        out_re, out_im = butterfly_fft(config, re, im, inverse)
        assert sqnr_db(config, re, im, out_re, out_im, inverse) > floor_db
    # The target: 60 dB at n = 256 for 16-bit full-scale random input.
    if width == 16 and n == 256:
        assert sqnr_db(config, re, im, *butterfly_fft(config, re, im)) >= 60


def test_fft_extremes():
    config = ButterflyConfig(n_max=64, width=16)
    n = 64
    impulse = np.zeros((1, n), dtype=np.int64)
    impulse[0, 0] = 32767
    re, im = butterfly_fft(config, impulse, np.zeros_like(impulse))
    assert np.all(np.abs(re - 32767 / n) <= 1) and np.all(np.abs(im) <= 1)
    full = np.full((1, n), 32767)
    re, im = butterfly_fft(config, full, full)
    assert re[0, 0] == 32767 and im[0, 0] == 32767
    assert np.all(np.abs(re[0, 1:]) <= 1) and np.all(np.abs(im[0, 1:]) <= 1)
    alternating = np.where(np.arange(n) % 2 == 0, -32768, 32767)[None, :]
    re, im = butterfly_fft(config, alternating, np.zeros_like(alternating))
    assert abs(re[0, n // 2] + 32768) <= 1
    # Round trip: ifft(fft(x)/n) * n is about x.
    rng = np.random.default_rng(0)
    x = rng.integers(-32768, 32768, (1, n))
    fre, fim = butterfly_fft(config, x, np.zeros_like(x))
    back_re, _ = butterfly_fft(config, fre, fim, inverse=True)
    assert np.max(np.abs(back_re * n - x)) < 4 * n


@pytest.mark.parametrize("width", [8, 16])
def test_fft_stages_never_reach_their_inner_clamps(width):
    """The FFT's per-stage requantizations to ``signed(width + 1 + G)``
    need no clamp, and the RTL emits none (``rtl.fixed.requantize`` leaves
    out a clamp the operands' ranges cannot reach): a complex value's
    magnitude ``M`` grows per stage at most by the largest twiddle's ``|W|``
    (``(a + b) / 2`` and ``(a - b) W / 2``) plus the rounding of two
    components (``sqrt(2) / 2``), from ``sqrt(2) * 2**(width - 1 + G)``
    (``fft_magnitude_bounds``); each component is at most ``M``, inside the
    clamps after all ``log2(1024)`` stages. The golden model keeps its
    clamps: with the bound they are never taken, so both agree."""
    for n_max in (4, 16, 256, 1024):
        config = ButterflyConfig(n_max=n_max, width=width)
        frac = config.twiddle_format.frac_bits
        bounds, w_max = fft_magnitude_bounds(config)
        assert w_max == max(1.0, max(np.hypot(re, im) for re, im in twiddle_table(config)) / (1 << frac))
        assert bounds[0] == np.sqrt(2) * (1 << (width - 1 + FFT_GUARD_BITS))
        assert len(bounds) == config.log_n_max + 1
        # the clamps: 2**(width + G) - 1 and -2**(width + G)
        assert bounds[-1] < (1 << (width + FFT_GUARD_BITS)) - 1
    # the engine's Verilog: no FFT stage clamp (to 20 bits), and the 16-bit
    # clamps of the linear mode (top and bottom) and of the drain (re and
    # im) on each of the 2 lanes
    config = ButterflyConfig(n_max=256, lanes=2, width=16, weight_width=16)
    verilog = emit_verilog(config, ButterflyEngine(config))
    assert "20'h7ffff" not in verilog and "20'h80000" not in verilog
    assert verilog.count("? 16'h7fff") == verilog.count("? 16'h8000") == 8


def test_bit_reverse_and_lengths():
    assert list(bit_reverse_permutation(8)) == [0, 4, 2, 6, 1, 5, 3, 7]
    config = ButterflyConfig(n_max=64)
    assert log2_length(config, 64) == 6
    assert log2_length(config, 2) == 1
    for n in (128, 1, 12):
        with pytest.raises(ValueError, match=rf"^n must be a power of two in \[2, 64\], not {n}$"):
            log2_length(config, n)


def test_n2_is_one_butterfly():
    """n = 2: linear is one 2x2 block, fft is (a + b, a - b) / 2."""
    config = ButterflyConfig(n_max=4, lanes=2, width=16, weight_width=16)
    x = np.array([[1000, -300], [32767, -32768]])
    w = np.array([[[3, -2, 5, 7]]])
    got = butterfly_linear(config, x, w, 1, 1)
    want = fixed_golden.requantize(x @ np.array([[3, -2], [5, 7]]).T, 1, 1, 16)
    assert np.array_equal(got, want)
    re, im = butterfly_fft(config, x, x[:, ::-1])
    assert np.array_equal(re, [[350, 650], [0, 32767]])
    assert np.array_equal(im, [[350, -650], [0, -32767]])   # -32767.5 rounds up
    back_re, back_im = butterfly_fft(config, x, x[:, ::-1], inverse=True)
    assert np.array_equal(back_re, re) and np.array_equal(back_im, im)


# ---- cycle model ------------------------------------------------------------

def test_cycle_model_formula():
    config = ButterflyConfig(n_max=256, lanes=8)
    assert stage_period(4) == 1 + COMPUTE_LATENCY
    assert stage_period(64) == 32
    # 128 vectors of 64: 16 groups of 6 stages of 32 cycles.
    assert butterfly_cycles(config, 64, 128) == 128 + 16 * 6 * 32 + 8
    assert butterfly_ideal_cycles(config, 64, 128) == 16 * 6 * 32
    assert butterfly_cycles(config, 64, 121) == butterfly_cycles(config, 64, 128)
    # n = 2: one stage of 4 cycles per group (its one issue plus the latency).
    assert stage_period(2) == 4
    assert butterfly_cycles(config, 2, 8) == 4 + 4 - 3 + 8
    assert butterfly_cycles(config, 2, 24) == 4 + 3 * 4 - 3 + 8


@pytest.mark.parametrize("lanes", [1, 4, 16])
def test_queue_of_one_length_is_the_closed_form(lanes):
    """Commands of one length back to back cost the closed form of their
    total groups (the loader's idle cycle between commands is hidden)."""
    config = ButterflyConfig(n_max=1024, lanes=lanes)
    for m in range(1, 11):
        n = 1 << m
        for batches in ([1], [3 * lanes], [1, 1, 1, 1], [lanes + 1, 2 * lanes, 1, 5 * lanes]):
            jobs = [{"mode": ("fft", "linear", "ifft")[k % 3], "n": n, "batch": b}
                    for k, b in enumerate(batches)]
            total = sum(butterfly_groups(config, b) for b in batches)
            assert butterfly_queue_cycles(config, jobs) == butterfly_cycles(config, n, total * lanes)
            if len(batches) == 1:
                assert butterfly_queue_cycles(config, jobs) == butterfly_cycles(config, n, batches[0])


def test_queue_timeline_rules():
    config = ButterflyConfig(n_max=256, lanes=2)
    one = butterfly_timeline(config, [{"mode": "fft", "n": 64, "batch": 4}])
    assert one == [(1, 1 + butterfly_cycles(config, 64, 4) - 1)]
    # A rejected command costs the loader one cycle; with an empty engine
    # that delays everything by one.
    bad = {"mode": "fft", "n": 12, "batch": 1}
    shifted = butterfly_timeline(config, [bad, {"mode": "fft", "n": 64, "batch": 4}])
    assert shifted == [None, (2, one[0][1] + 1)]
    # A weight load waits until compute is idle: the linear job after it
    # starts only after the fft's compute finished and 32 * 6 weight beats.
    fft, weights = {"mode": "fft", "n": 64, "batch": 2}, {"mode": "weights", "n": 64}
    linear = {"mode": "linear", "n": 64, "batch": 2}
    spans = butterfly_timeline(config, [fft, weights, linear])
    compute_end = 1 + 64 + 6 * stage_period(64)   # first x, load, compute
    assert spans[2][0] == compute_end + 1 + 32 * 6 + 1
    assert butterfly_queue_cycles(config, [fft, weights, linear]) == spans[2][1] - spans[0][0] + 1
    # A long job then a short one: the short one's compute waits for the long
    # one, so it ends after it; each output stays in order.
    spans = butterfly_timeline(config, [{"mode": "fft", "n": 256, "batch": 2},
                                        {"mode": "fft", "n": 2, "batch": 6}])
    assert spans[1][0] == spans[0][0] + 256 + 1
    assert spans[1][1] > spans[0][1]
    assert butterfly_queue_cycles(config, [weights]) is None

# ---- emission and command line ----------------------------------------------

def test_verilog_is_deterministic_and_has_the_ports():
    config = ButterflyConfig(n_max=8, lanes=2, width=8, weight_width=8)
    text = emit_verilog(config, ButterflyEngine(config))
    assert text == emit_verilog(config, ButterflyEngine(config))
    assert f"module {config.name}" in text
    for port in ("cmd__payload", "x__payload", "w__payload", "y__payload", "error"):
        assert port in text


def test_generate_command(tmp_path, capsys):
    assert main(["generate", "butterfly", "--n-max", "16", "--lanes", "4", "-o", str(tmp_path)]) == 0
    sidecar = json.loads((tmp_path / "butterfly_n16_l4_d16_w16.json").read_text())
    assert sidecar["config"]["lanes"] == 4
    assert main(["generate", "butterfly", "--n-max", "24", "-o", str(tmp_path / "bad")]) == 2
    assert "n_max must be a power of two, not 24" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("argv, message", [
    (["--n", "12"], "--n must be a power of two in [2, 16] (n_max), not 12"),
    (["--n", "32"], "--n must be a power of two in [2, 16] (n_max), not 32"),
    (["--n", "1"], "--n must be a power of two in [2, 16] (n_max), not 1"),
    ([], "--n is required"),
    (["--n", "8", "--mode", "linear", "--shift", "64"], "--shift must be in [0, 63], not 64"),
    (["--x", "{bad}", "--out", "{out}"], "is not a .npy file"),
    (["--x", "{x3}", "--out", "{out}"], "--n must be a power of two in [2, 16] (n_max), not 3"),
    (["--x", "{x1}", "--out", "{out}"], "--n must be a power of two in [2, 16] (n_max), not 1"),
    (["--x", "{empty}", "--out", "{out}"], "X has no vectors (0 rows)"),
    (["--x", "{floats}", "--out", "{out}"], "it must hold integers"),
    (["--x", "{missing}", "--out", "{out}"], "does not exist"),
    (["--x", "{x}"], "--x and --out go together"),
    (["--x", "{x}", "--out", "{out}", "--mode", "linear"], "needs --weights"),
    (["--x", "{x}", "--out", "{out}", "--mode", "linear", "--weights", "{x}"],
     "must have 3 dimensions"),
    (["--x", "{x}", "--out", "{out}", "--mode", "linear", "--weights", "{w}"],
     "for n = 8 they must be (3, 4, 4)"),
    (["--x", "{big}", "--out", "{out}"], "int16 values must lie in"),
    (["--x", "{x}", "--x-im", "{x3}", "--out", "{out}"], "imaginary part is"),
    (["--x", "{x12}", "--out", "{out}"], "--n must be a power of two in [2, 16] (n_max), not 12"),
    (["--x", "{x}", "--n", "16", "--out", "{out}"], "X has vectors of length 8, but --n is 16"),
    (["--x", "{x}", "--out", "{out}", "--weights", "{w}"], "--weights is for --mode linear only"),
])
def test_sim_input_errors_are_one_line(tmp_path, capsys, argv, message):
    files = {"bad": tmp_path / "bad.npy", "x": tmp_path / "x.npy", "x3": tmp_path / "x3.npy",
             "w": tmp_path / "w.npy", "big": tmp_path / "big.npy", "x12": tmp_path / "x12.npy",
             "out": tmp_path / "y.npy", "x1": tmp_path / "x1.npy", "empty": tmp_path / "e.npy",
             "floats": tmp_path / "f.npy", "missing": tmp_path / "missing.npy"}
    files["bad"].write_text("not numpy")
    np.save(files["x"], np.zeros((2, 8), dtype=np.int16))
    np.save(files["x3"], np.zeros((2, 3), dtype=np.int16))
    np.save(files["w"], np.zeros((2, 4, 4), dtype=np.int16))
    np.save(files["big"], np.full((2, 8), 40000, dtype=np.int32))
    np.save(files["x12"], np.zeros((2, 12), dtype=np.int16))
    np.save(files["x1"], np.zeros((2, 1), dtype=np.int16))
    np.save(files["empty"], np.zeros((0, 8), dtype=np.int16))
    np.save(files["floats"], np.zeros((2, 8)))
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    code = main(["sim", "butterfly", "--n-max", "16", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not files["out"].exists()
