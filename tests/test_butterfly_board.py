"""The butterfly engine's board top-level: config checks, memory images, the
reply's cycle formula, the whole top in Verilator over the bit-level UART,
build plans for every board, the CLI."""

import json

import numpy as np
import pytest

from bertforge.boards.butterfly_board_tb import bad_runs, board_cycles
from bertforge.boards.butterfly_top import SCALE_MEM, ButterflyBoardTop, ButterflyTopConfig, run_is_valid
from bertforge.boards.butterfly_host import (butterfly_images, butterfly_result_from_bytes,
                                             butterfly_run_args, butterfly_scale_bytes)
from bertforge.boards.host import vector_layout
from bertforge.boards.targets import BOARDS
from bertforge.generators import board_design
from bertforge.generators.butterfly_board import BUTTERFLY
from bertforge.generators.cli import main
from bertforge.rtl.butterfly import MODES, ButterflyConfig, command_is_valid
from bertforge.sim.payload_np import pack_bytes, unpack_bytes
from bertforge.sim.butterfly_cycles import butterfly_timeline
from bertforge.sim.butterfly_golden import board_golden

from board_helpers import (FakeBoard, check_build_plan, cli_error, run_board_top, save_build_report,
                           run_exit_checked, top_config_test)

ENGINE = ButterflyConfig(n_max=16, lanes=2)
CONFIG = ButterflyTopConfig(design_id=BUTTERFLY.design_id, engine=ENGINE, divisor=8, depth=64)
INT16X4 = vector_layout(16, 4)          # one 8-byte word of X, W or Y


test_butterfly_top_config_validation = top_config_test(ButterflyTopConfig, [
    ({"divisor": 3}, ValueError, r"^divisor must be an integer >= 4, not 3$"),
    ({"depth": 0}, ValueError, r"^depth must be a positive integer, not 0$"),
    ({"depth": 16385}, ValueError, r"^depth must be an integer <= 16384, not 16385$"),
    ({"depth": 32}, ValueError,
     r"^depth must be at least n_max = 64 \(one group of the longest vectors\), not 32$"),
    ({"engine": {"n_max": 16}}, TypeError,
     r"^engine must be a ButterflyConfig, not \{'n_max': 16\}$"),
    # 16 lanes of complex int16: 64-byte X words; the link addresses 64 KiB.
    ({"engine": ButterflyConfig(n_max=1024, lanes=16), "depth": 1025}, ValueError,
     r"^depth must be at most 1024 for this engine \(memory X has 64-byte words and the host "
     r"link addresses 65536 bytes\), not 1025$"),
], design_id=BUTTERFLY.design_id)


def test_butterfly_top_word_sizes_and_round_trip():
    # X and Y: 2 lanes x (re, im) x int16 = 64 bits; W: 4 x int16 = 64 bits.
    assert CONFIG.word_bits() == (64, 64, 64) and CONFIG.word_bytes() == (8, 8, 8)
    assert CONFIG.depths() == (64, 4 * 8, 64)
    small = ButterflyTopConfig(design_id=BUTTERFLY.design_id,
                               engine=ButterflyConfig(n_max=8, lanes=1, width=8, weight_width=8),
                               depth=8)
    assert small.word_bits() == (16, 32, 16) and small.word_bytes() == (2, 4, 2)
    assert small.name == "board_butterfly_n8_l1_d8_w8"
    assert ButterflyTopConfig.from_dict(json.loads(json.dumps(CONFIG.to_dict()))) == CONFIG
    with pytest.raises(TypeError, match=r"^config must be a ButterflyTopConfig, not 3$"):
        ButterflyBoardTop(3)


def test_butterfly_memory_images_follow_the_documented_layout():
    """X word g*n + k holds element k of group g's two vectors (re, im per
    lane; a batch of 3 pads a zero vector), W word j the j-th butterfly's
    four weights, stage major; the RUN word is mode | n << 2 | groups << 18.
    Decoded independently of the packer here."""
    rng = np.random.default_rng(5)
    re, im = rng.integers(-2**15, 2**15, (3, 8)), rng.integers(-2**15, 2**15, (3, 8))
    mem_x, mem_w, groups = butterfly_images(CONFIG, "fft", re, im)
    assert groups == 2 and len(mem_x) == 2 * 8 * 8 and mem_w == b""
    words = unpack_bytes(INT16X4, mem_x)              # (re0, im0, re1, im1) per beat
    for v in range(4):
        group, lane = divmod(v, 2)
        beats = words[group * 8:(group + 1) * 8]
        want = (re[v], im[v]) if v < 3 else (np.zeros(8), np.zeros(8))
        assert np.array_equal(beats[:, 2 * lane], want[0])
        assert np.array_equal(beats[:, 2 * lane + 1], want[1])
    weights = rng.integers(-2**15, 2**15, (3, 4, 4))
    mem_x, mem_w, groups = butterfly_images(CONFIG, "linear", re, weights=weights)
    assert not unpack_bytes(INT16X4, mem_x)[:, 1::2].any()       # linear: im = 0
    assert np.array_equal(unpack_bytes(INT16X4, mem_w), weights.reshape(12, 4))
    assert butterfly_run_args(2, 16, 3) == (2 | 16 << 2 | 3 << 18).to_bytes(4, "little")
    assert butterfly_run_args(3, 65535, 16383) == b"\xff" * 4
    assert butterfly_scale_bytes(0x1234, 17) == b"\x34\x12\x11"
    y = rng.integers(-2**15, 2**15, (2 * 8, 4))
    out_re, out_im = butterfly_result_from_bytes(CONFIG, pack_bytes(INT16X4, y), 3, 8)
    assert np.array_equal(out_re[2], y[8:, 0]) and np.array_equal(out_im[1], y[:8, 3])


@pytest.mark.parametrize("call, message", [
    (lambda: butterfly_images(CONFIG, "weights", np.zeros((1, 4), int)),
     r"^mode must be linear, fft or ifft, not 'weights'$"),
    (lambda: butterfly_images(CONFIG, "fft", np.zeros((1, 6), int)),
     r"^n must be a power of two in \[2, 16\], not 6$"),
    (lambda: butterfly_images(CONFIG, "fft", np.zeros((1, 32), int)),
     r"^n must be a power of two in \[2, 16\], not 32$"),
    (lambda: butterfly_images(CONFIG, "fft", np.zeros((0, 4), int)),
     r"^X must be a batch x n integer matrix with at least one vector, not int64 of shape \(0, 4\)$"),
    (lambda: butterfly_images(CONFIG, "fft", np.zeros((2, 4))), r"^X must be a batch x n integer"),
    (lambda: butterfly_images(CONFIG, "fft", np.full((1, 4), 2**15)),
     r"^X holds values in \[32768, 32768\]; int16 values must lie in \[-32768, 32767\]$"),
    (lambda: butterfly_images(CONFIG, "ifft", np.zeros((1, 4), int), np.zeros((1, 2), int)),
     r"^the imaginary part must be integers of X's shape \(1, 4\), not int64 of shape \(1, 2\)$"),
    (lambda: butterfly_images(CONFIG, "fft", np.zeros((9, 16), int)),
     r"^9 vectors of 16 \(5 groups of 2\) are 80 beats; this bitstream holds depth = 64 "
     r"\(build with a larger --depth or send fewer vectors\)$"),
    (lambda: butterfly_images(CONFIG, "linear", np.zeros((1, 4), int)),
     r"^linear mode needs weights$"),
    (lambda: butterfly_images(CONFIG, "linear", np.zeros((1, 4), int), np.zeros((1, 4), int)),
     r"^linear mode is real: no imaginary part$"),
    (lambda: butterfly_images(CONFIG, "linear", np.zeros((1, 4), int), weights=np.zeros((2, 2, 3), int)),
     r"^weights for n = 4 must be integers of shape \(2, 2, 4\), not int64 of shape \(2, 2, 3\)$"),
    (lambda: butterfly_images(CONFIG, "linear", np.zeros((1, 4), int),
                              weights=np.full((2, 2, 4), -2**15 - 1)),
     r"^weights holds values in \[-32769, -32769\]; int16 values"),
    (lambda: butterfly_images(CONFIG, "fft", np.zeros((1, 4), int), weights=np.zeros((2, 2, 4), int)),
     r"^weights are for linear mode only, not fft$"),
    (lambda: butterfly_run_args(0, 4, 1 << 14), r"^groups must be in \[0, 16383\], not 16384$"),
    (lambda: butterfly_run_args(4, 4, 1), r"^mode must be in \[0, 3\], not 4$"),
    (lambda: butterfly_scale_bytes(1 << 16, 0), r"^mult must be in \[0, 65535\], not 65536$"),
    (lambda: butterfly_scale_bytes(1, 64), r"^shift must be in \[0, 63\], not 64$"),
])
def test_butterfly_images_reject(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_board_cycles_follow_the_engine_timeline():
    """The reply's closed form equals the engine's cycle-exact timeline (cycle
    0: the engine takes the first command, the cycle after start) + 1, for
    every length and mode; the top accepts exactly the commands the engine
    accepts that fit its memories."""
    engine = ButterflyConfig(n_max=64, lanes=2)
    for n in (2, 4, 8, 16, 32, 64):
        for groups in (1, 2, 5):
            for mode in ("linear", "fft", "ifft"):
                jobs = [{"mode": mode, "n": n, "groups": groups}]
                if mode == "linear":
                    jobs.insert(0, {"mode": "weights", "n": n})
                last_y = butterfly_timeline(engine, jobs)[-1][1]
                assert board_cycles(engine, mode, n, groups) == last_y + 1, (mode, n, groups)
    config = ButterflyTopConfig(design_id=BUTTERFLY.design_id, engine=engine, depth=128)
    for mode in range(4):
        for n in (0, 1, 2, 3, 4, 48, 64, 128):
            for groups in (0, 1, 2, 3, 64, 65):
                want = (mode != MODES["weights"] and command_is_valid(engine, mode, n, groups)
                        and groups * n <= 128)
                assert run_is_valid(config, mode, n, groups) == want
    assert not any(run_is_valid(config, *run) for run in bad_runs(config))


def _random_runs(rng):
    """(runs, arrays) for the Verilator test: random linear layers, FFTs and
    inverse FFTs at n = 16 (n_max), 8, 4 and 2, batches that do not fill the
    last group, one that fills the memories, full-scale extremes."""
    runs, arrays = [], {}
    full = (-2**15, 2**15)

    def add(mode, re, im=None, weights=None, mult=1, shift=16):
        t = len(runs)
        arrays[f"x_re_{t}"] = re
        arrays[f"x_im_{t}"] = np.zeros_like(re) if im is None else im
        if weights is not None:
            arrays[f"w_{t}"] = weights
        runs.append({"mode": mode, "mult": mult, "shift": shift})

    def weights(n):
        return rng.integers(*full, (n.bit_length() - 1, n // 2, 4))

    add("linear", rng.integers(*full, (3, 16)), weights=weights(16))
    add("fft", rng.integers(*full, (4, 16)), rng.integers(*full, (4, 16)))
    add("ifft", rng.integers(*full, (3, 8)), rng.integers(*full, (3, 8)))
    add("fft", rng.integers(*full, (1, 2)), rng.integers(*full, (1, 2)))
    add("linear", rng.integers(*full, (5, 2)), weights=weights(2), mult=3, shift=17)
    add("linear", rng.integers(-300, 300, (1, 4)), weights=rng.integers(-300, 300, (2, 2, 4)),
        mult=5, shift=6)
    # Full scale: DC and Nyquist rows, -32768 * -32768 weights (saturating).
    add("fft", np.array([[-2**15] * 16, [2**15 - 1, -2**15] * 8]),
        np.array([[2**15 - 1] * 16, [-2**15] * 16]))
    add("linear", np.full((2, 16), -2**15), weights=np.full((4, 8, 4), -2**15), shift=15)
    # Eight vectors of n_max: 64 beats, all of depth.
    add("ifft", rng.integers(*full, (8, 16)), rng.integers(*full, (8, 16)))
    return runs, arrays


def test_butterfly_board_top_over_uart_in_verilator(tmp_path):
    """Linear layers, FFTs and inverse FFTs back to back (n = 2 .. n_max,
    partial groups, a run filling the memories, full-scale extremes), each
    after a corrupted frame (BAD_CRC, the link goes on): results bit-exact,
    reply cycles = :func:`board_cycles`; bad RUNs answered BAD_ARGUMENT; then
    a good run; LEDs idle, done, bad frame seen."""
    runs, arrays = _random_runs(np.random.default_rng(11))
    result = run_board_top(tmp_path, ButterflyBoardTop(CONFIG), CONFIG, "butterfly_board_tb",
                           arrays, runs=runs, corrupt=True)
    assert result["design_id"] == BUTTERFLY.design_id == 7
    done = result["runs"]
    assert [r["match"] for r in done] == [True] * len(runs)
    assert [(r["mode"], r["n"], r["batch"]) for r in done] == [
        (run["mode"], arrays[f"x_re_{t}"].shape[1], arrays[f"x_re_{t}"].shape[0])
        for t, run in enumerate(runs)]
    assert [r["cycles"] for r in done] == [r["model_cycles"] for r in done]
    # fft n = 16, 2 groups: 2n + G m T - (T - n/2) + 8 + 1 with T = 8.
    assert done[1]["cycles"] == 32 + 2 * 4 * 8 + 8 + 1
    assert result["corrupt_rejected"] == len(runs)
    assert result["bad_runs_rejected"] == [True] * len(bad_runs(CONFIG))
    assert result["works_after_errors"] and result["leds"] == 0b110
    # The extremes saturate at every stage (+2**16 -> 32767, then -65534 ->
    # -32768, ...): the run checked saturation, not just small numbers.
    y, _ = board_golden(ENGINE, "linear", arrays["x_re_7"], weights=arrays["w_7"], shift=15)
    assert (y == -2**15).all()


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_board_passes_the_build_plan_with_butterfly(name):
    config = ButterflyTopConfig(design_id=BUTTERFLY.design_id, engine=ButterflyConfig(n_max=8, lanes=1),
                                divisor=16, depth=16)
    check_build_plan(name, ButterflyBoardTop(config), "engine")


def test_butterfly_build_cli(capsys, tmp_path, monkeypatch):
    """``bertforge build --design butterfly``: the engine from the config
    flags, ``--depth`` (default per family, at least n_max), one-line errors."""
    from bertforge.boards import build
    monkeypatch.chdir(tmp_path)
    built = []

    def fake_build(board_name, top, *, macs_per_cycle, clock_mhz, out_dir, quiet):
        built.append((board_name, top, macs_per_cycle))
        out_dir.mkdir(parents=True, exist_ok=True)
        return {"description": board_name, "resources": {}, "clock_mhz": 12.0, "fmax_mhz": 50.0,
                "timing_met": True, "peak_gops": 0.0, "peak_gops_at_fmax": 0.0,
                "macs_per_cycle": macs_per_cycle, "bitstream": "top.bin", "seconds": 1.0}

    monkeypatch.setattr(build, "build_board", fake_build)
    assert main(["build", "--board", "icebreaker", "--design", "butterfly", "--lanes", "1",
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["build", "--board", "ulx3s-85f", "--design", "butterfly", "--n-max", "1024",
                 "--width", "8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["design"] == {"name": "butterfly", "config": ButterflyTopConfig(
        design_id=BUTTERFLY.design_id, engine=ButterflyConfig(n_max=1024, width=8), divisor=217,
        depth=1024).to_dict()}
    (_, ice, ice_macs), (_, ecp5, _) = built
    assert ice.config == ButterflyTopConfig(design_id=BUTTERFLY.design_id,
                                            engine=ButterflyConfig(lanes=1), divisor=104,
                                            depth=256)
    assert ice_macs == 4 and isinstance(ecp5, ButterflyBoardTop)
    cases = [
        (["--rows", "4"], "--rows is not a butterfly config field"),
        (["--n-max", "12"], "n_max must be a power of two, not 12"),
        (["--k-max", "8"], "--k-max is not a flag of design butterfly"),
        (["--mem-kib", "4"], "--mem-kib is not a flag of design butterfly"),
        (["--depth", "8"], "depth must be at least n_max = 64 (one group of the longest "
                           "vectors), not 8"),
    ]
    for flags, message in cases:
        assert main(["build", "--board", "ulx3s-85f", "--design", "butterfly", *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (flags, err)
    assert main(["build", "--board", "ulx3s-85f", "--design", "sparse", "--n-max", "16"]) == 2
    assert "--n-max is not a sparse config field" in capsys.readouterr().err
    assert len(built) == 2


def test_butterfly_run_cli_rejects_bad_input_before_opening_the_port(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(2)
    np.save("x.npy", rng.integers(-100, 100, (3, 8)).astype(np.int16))
    np.save("x6.npy", np.zeros((2, 6), np.int16))
    np.save("many.npy", np.zeros((9, 16), np.int16))
    np.save("w.npy", np.zeros((3, 4, 4), np.int16))
    np.save("w_bad.npy", np.zeros((3, 4, 3), np.int16))
    np.save("big.npy", np.full((2, 8), 40000, np.int32))
    run = ["run", "--board", "ulx3s-85f", "--port", "/dev/null", "butterfly", "--out", "y.npy"]

    def error(flags):
        return cli_error(capsys, run + flags)

    assert "no build report at build-ulx3s-85f-butterfly/report.json" in error(
        ["--mode", "fft", "--x", "x.npy"])
    save_build_report(tmp_path, "butterfly", CONFIG)
    cases = [
        (["--x", "x.npy"], "the following arguments are required: --mode"),
        (["--mode", "fft"], "the following arguments are required: --x"),
        (["--mode", "linear", "--x", "x.npy"], "--mode linear with --x needs --weights W.npy"),
        (["--mode", "linear", "--x", "x.npy", "--w", "w_bad.npy"],
         "weights have shape (3, 4, 3); for n = 8 they must be (3, 4, 4)"),
        (["--mode", "linear", "--x", "x.npy", "--w", "w.npy", "--x-im", "x.npy"],
         "--x-im is for --mode fft or ifft only"),
        (["--mode", "fft", "--x", "x.npy", "--weights", "w.npy"], "--weights is for --mode linear only"),
        (["--mode", "fft", "--x", "x.npy", "--shift", "3"],
         "--multiplier and --shift are for --mode linear only"),
        (["--mode", "linear", "--x", "x.npy", "--w", "w.npy", "--mult", "70000"],
         "--mult must be in [0, 65535], not 70000"),
        (["--mode", "fft", "--x", "x6.npy"], "--n must be a power of two in [2, 16] (n_max), not 6"),
        (["--mode", "fft", "--x", "x.npy", "--n", "4"], "X has vectors of length 8, but --n is 4"),
        (["--mode", "fft", "--x", "big.npy"], "int16 values must lie in [-32768, 32767]"),
        (["--mode", "ifft", "--x", "many.npy"],
         "9 vectors of 16 (5 groups of 2) are 80 beats; this bitstream holds depth = 64"),
        (["--mode", "fft", "--x", "x.npy", "--a", "x.npy"], "--a is not a flag of design butterfly"),
        (["--mode", "fft", "--x", "x.npy", "--m", "4"], "--m is not a flag of design butterfly"),
    ]
    for flags, message in cases:
        assert message in error(flags), flags
    # Valid input gets as far as the serial port: /dev/null is none.
    assert "/dev/null" in error(["--mode", "linear", "--x", "x.npy", "--w", "w.npy"])
    assert not (tmp_path / "y.npy").exists()
    save_build_report(tmp_path, "gelu", {})
    assert main(["run", "--board", "ulx3s-85f", "--port", "/dev/null", "gelu", "--x", "x.npy",
                 "--mode", "fft", "--out", "y.npy"]) == 2
    assert "--mode is not a flag of design gelu" in capsys.readouterr().err


class FakeButterflyBoard(FakeBoard):
    """The butterfly top's stand-in: memories X, W, Y and the scale
    register, and a RUN that reads them as the module doc of
    :mod:`bertforge.boards.butterfly_top` lays them out."""

    def __init__(self, config, design_id=BUTTERFLY.design_id, flip=False):
        super().__init__(config, design_id, flip, memories=4)
        self.mems[SCALE_MEM][:3] = b"\x01\x00\x00"

    def run(self, args):
        word = int.from_bytes(args[:4], "little")
        mode, n, groups = word & 3, (word >> 2) & 0xFFFF, word >> 18
        engine, (xb, wb, yb) = self.config.engine, self.config.word_bytes()
        lanes, m = engine.lanes, n.bit_length() - 1
        beats = unpack_bytes(vector_layout(engine.width, 2 * lanes), self.mems[0][:groups * n * xb], xb)
        vectors = beats.reshape(groups, n, lanes, 2).transpose(0, 2, 1, 3).reshape(-1, n, 2)
        name = ("linear", "fft", "ifft")[mode]
        weights = unpack_bytes(vector_layout(engine.weight_width, 4), self.mems[1][:m * n // 2 * wb], wb)
        scale = self.mems[SCALE_MEM]
        re, im = board_golden(engine, name, vectors[..., 0], vectors[..., 1],
                              weights.reshape(m, n // 2, 4), scale[0] | scale[1] << 8, scale[2])
        out = np.stack([re, im], -1).reshape(groups, lanes, n, 2).transpose(0, 2, 1, 3)
        self.mems[2][:groups * n * yb] = pack_bytes(vector_layout(engine.width, 2 * lanes),
                                                    out.reshape(-1, 2 * lanes), stride=yb)
        self.mems[2][0] ^= self.flip
        return (4321).to_bytes(4, "little")


@pytest.mark.parametrize("mode, design_id, flip", [
    ("linear", BUTTERFLY.design_id, False), ("fft", BUTTERFLY.design_id, False),
    ("ifft", BUTTERFLY.design_id, True),
    ("fft", 6, False)])
def test_butterfly_run_cli(mode, design_id, flip, capsys, tmp_path, monkeypatch):
    """``bertforge run butterfly`` against the stand-in board: Y written
    (linear batch x n, FFTs batch x n x 2, int16) and checked (--check; a
    wrong bit fails it), or a board running another design refused."""
    monkeypatch.chdir(tmp_path)
    save_build_report(tmp_path, "butterfly", CONFIG)
    rng = np.random.default_rng(4)
    re, im = rng.integers(-2**15, 2**15, (2, 3, 8))
    weights = rng.integers(-2**15, 2**15, (3, 4, 4))
    np.save("x.npy", re.astype(np.int16))
    np.save("xi.npy", im.astype(np.int16))
    np.save("w.npy", weights.astype(np.int16))
    monkeypatch.setattr(board_design, "open_link",
                        lambda port: FakeButterflyBoard(CONFIG, design_id, flip))
    flags = (["--w", "w.npy", "--mult", "3", "--shift", "17"] if mode == "linear"
             else ["--x-im", "xi.npy"])
    code = main(["run", "--board", "ulx3s-85f", "--port", "/dev/fake", "butterfly", "--mode", mode,
                 "--x", "x.npy", "--out", "y.npy", "--check", *flags])
    out, err = capsys.readouterr()
    if design_id != BUTTERFLY.design_id:
        assert code == 2 and not (tmp_path / "y.npy").exists()
        assert err.strip() == ("bertforge: error: the board on /dev/fake runs design 6, not the "
                               "butterfly top (7); flash build first")
        return
    if not run_exit_checked(code, out, err, flip=flip, ran=f"ran {mode} on 3 vectors of 8",
                            cycles=4321, wrote="y.npy"):
        return
    y = np.load("y.npy")
    assert y.dtype == np.int16
    if mode == "linear":
        want, _ = board_golden(ENGINE, mode, re, weights=weights, mult=3, shift=17)
        assert np.array_equal(y, want)
    else:
        assert np.array_equal(y, np.stack(board_golden(ENGINE, mode, re, im), -1))
