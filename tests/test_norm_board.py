"""Softmax, LayerNorm and GELU on boards: the shared streaming-unit top-level
in Verilator over a bit-level UART, its memory images, build plans for
every board, and the command line."""

import json

import numpy as np
import pytest

from bertforge.boards.norm_host import gelu_phases, layernorm_phases, softmax_phases
from bertforge.boards.norm_top import NormBoardTop, NormTopConfig
from bertforge.boards.targets import BOARDS
from bertforge.generators.blocks import BLOCKS
from bertforge.generators.cli import main
from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.sim.payload_np import pack_bytes, unpack_bytes
from bertforge.rtl.softmax import SoftmaxConfig

from board_helpers import check_build_plan, run_board_top, save_build_report, top_config_test


def norm_top(unit, **fields):
    """The streaming top config of ``unit``: its block's component and board design id."""
    block, = [b for b in BLOCKS.values() if b.config is type(unit)]
    return NormTopConfig(unit=unit, component=block.component, design_id=block.board.design_id,
                           **fields)


def _softmax_case(rng):
    unit = SoftmaxConfig(lanes=2, l_max=8, in_width=16, mask=True)
    arrays = {"x0": rng.integers(-2000, 2000, (3, 7)),
              "m0": rng.random((3, 7)) < 0.3,
              "x1": np.array([[5] * 8, [-32768, 32767] * 4]),   # all-equal row; extremes
              "x2": rng.integers(-32768, 32768, (1, 1))}        # a one-element row
    arrays["m0"][1] = True                                      # a fully masked row
    problems = [{"x": "x0", "mask": "m0", "scale": 0.01}, {"x": "x1", "scale": 1e-4},
                {"x": "x2", "scale": 1.0}]
    return unit, arrays, problems


def _layernorm_case(rng):
    unit = LayerNormConfig(lanes=2, h_max=8, in_width=16, add_residual=True)
    arrays = {"x0": rng.integers(-3000, 3000, (3, 8)), "r0": rng.integers(-3000, 3000, (3, 8)),
              "g0": rng.integers(-128, 128, 8), "b0": rng.integers(-128, 128, 8),
              "x1": np.array([[7] * 6, [-32768, 32767] * 3]), "r1": np.zeros((2, 6), int),
              "g1": np.full(6, 64), "b1": np.array([-128, 127, 0, 1, -1, 5])}
    # The third run loads no gamma/beta: the unit keeps the second run's.
    problems = [{"x": "x0", "r": "r0", "gamma": "g0", "beta": "b0"},
                {"x": "x1", "r": "r1", "gamma": "g1", "beta": "b1"},
                {"x": "x2", "r": "r2"}]
    arrays["x2"], arrays["r2"] = rng.integers(-500, 500, (2, 6)), rng.integers(-500, 500, (2, 6))
    return unit, arrays, problems


def _gelu_case(rng):
    unit = GeluConfig(lanes=2)
    arrays = {"x0": rng.integers(-128, 128, (3, 6)), "x1": np.array([[-128, 127, 0, -1]]),
              "x2": np.arange(-128, 128).reshape(4, 64)}
    return unit, arrays, [{"x": "x0"}, {"x": "x1"}, {"x": "x2"}]


CASES = {"softmax": _softmax_case, "layernorm": _layernorm_case, "gelu": _gelu_case}


@pytest.mark.parametrize("design", sorted(CASES))
def test_norm_board_top_over_uart_in_verilator(design, tmp_path):
    """Three runs per unit (extremes, masked rows, kept LayerNorm params)
    through the UART link against the golden model, a corrupted frame before
    each (rejected, the link goes on), two bad RUNs rejected, then a good one."""
    unit, arrays, problems = CASES[design](np.random.default_rng(11))
    config = norm_top(unit, divisor=4, depth=128)
    result = run_board_top(tmp_path, NormBoardTop(config), config, "norm_board_tb", arrays,
                           problems=problems, corrupt=True)
    assert result["design_id"] == BLOCKS[design].board.design_id
    assert [run["match"] for run in result["runs"]] == [True] * 3, result["runs"]
    assert result["corrupt_rejected"] == 3 and result["bad_rejected"] == 2
    assert result["works_after_errors"]
    assert all(run["cycles"] > 0 for run in result["runs"])


test_norm_top_config_validation = top_config_test(NormTopConfig, [
    ({"unit": {"lanes": 2}}, TypeError, r"^config must be a SoftmaxConfig, not \{'lanes': 2\}$"),
    ({"unit": GeluConfig(), "divisor": 2}, ValueError, r"^divisor must be an integer >= 4, not 2$"),
    ({"unit": GeluConfig(), "depth": 0}, ValueError, r"^depth must be a positive integer, not 0$"),
    ({"unit": SoftmaxConfig(lanes=1, l_max=64), "depth": 32}, ValueError,
     r"^depth must be at least the unit's longest row or vector \(64 beats\), not 32$"),
    ({"unit": SoftmaxConfig(lanes=4), "depth": 4096}, ValueError,
     r"^depth must be at most 2048 for this unit \(memory 0 has 32-byte words and the host link "
     r"addresses 65536 bytes\), not 4096$"),
], component=BLOCKS["softmax"].component, design_id=BLOCKS["softmax"].board.design_id)


def test_norm_top_memories_and_phases():
    ln = norm_top(LayerNormConfig(lanes=2, h_max=8, in_width=16), depth=32)
    assert ln.phases() == (("params",), ("x", "r"))
    assert ln.output_mem == 2
    # params: 2 x (gamma, beta) int8 + last; x: 2 x int17? no: 2 x int16 + last, r: 2 x int16.
    assert [(layout.size, depth) for layout, depth in ln.memories()] == [(33, 4), (65, 32), (17, 32)]
    assert ln.strides() == [8, 16, 4]
    assert NormTopConfig.from_dict(json.loads(json.dumps(ln.to_dict()))) == ln
    sm = norm_top(SoftmaxConfig(lanes=4), depth=2048)
    assert sm.phases() == (("x",),) and sm.strides() == [32, 8]


def test_stream_phases_pack_round_trip():
    unit = SoftmaxConfig(lanes=4, l_max=16, in_width=32)
    config = norm_top(unit, depth=16)
    x = np.array([[-2**31, 2**31 - 1, 0, 5, -7, 9]] * 2)
    mask = np.zeros(x.shape, bool)
    mask[1, 2] = True
    (value, beats), = softmax_phases(unit, x, mask, [40000, 50000], [20, 30])
    assert beats == 4
    layout, stride = config.memories()[0][0], config.strides()[0]
    raw = pack_bytes(layout, value, beats, stride)
    assert len(raw) == 4 * stride
    back = unpack_bytes(layout, raw, stride)["x"]
    assert back["data"].tolist() == [[-2**31, 2**31 - 1, 0, 5], [-7, 9, 0, 0]] * 2
    assert back["mask"].tolist() == [0, 0b1100, 0b0100, 0b1100]   # padding lanes masked
    assert back["last"].tolist() == [0, 1, 0, 1]
    assert back["multiplier"].tolist() == [40000, 40000, 50000, 50000]
    assert back["shift"].tolist() == [20, 20, 30, 30]
    with pytest.raises(ValueError, match=r"^rows of 17 elements: this bitstream takes 1 to l_max = 16$"):
        softmax_phases(unit, np.zeros((1, 17), int), None, 1, 1)
    ln = LayerNormConfig(lanes=2, h_max=8, add_residual=False)
    params, (main, n) = layernorm_phases(ln, np.ones((3, 4), int), None, [1, 2, 3, 4], [5, 6, 7, 8])
    assert params[1] == 2 and n == 6 and "r" not in main
    assert params[0]["params"]["gamma"].tolist() == [[1, 2], [3, 4]]
    assert layernorm_phases(ln, np.ones((1, 2), int))[0] == ({}, 0)   # keep the loaded params
    with pytest.raises(ValueError, match=r"^vectors of 3 elements: this bitstream takes a multiple"):
        layernorm_phases(ln, np.ones((1, 3), int))
    with pytest.raises(ValueError, match=r"^a residual is needed exactly when"):
        layernorm_phases(ln, np.ones((1, 2), int), np.ones((1, 2), int))
    with pytest.raises(ValueError, match=r"^rows of 3 elements: this bitstream takes a positive "
                                         r"multiple of lanes = 2$"):
        gelu_phases(GeluConfig(lanes=2), np.ones((1, 3), int))


SMALL_UNITS = {"softmax": SoftmaxConfig(lanes=2, l_max=16, in_width=16),
               "layernorm": LayerNormConfig(lanes=1, h_max=16),
               "gelu": GeluConfig(lanes=2)}


@pytest.mark.parametrize("name", sorted(BOARDS))
@pytest.mark.parametrize("design", sorted(SMALL_UNITS))
def test_every_board_passes_the_build_plan_with_stream_units(name, design):
    config = norm_top(SMALL_UNITS[design], divisor=16, depth=64)
    check_build_plan(name, NormBoardTop(config), "unit")


def test_stream_build_cli_rejects(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cases = [
        (["--design", "softmax", "--rows", "4"], "--rows is not a softmax config field"),
        (["--design", "gelu", "--lanes", "0"], "lanes must be a positive integer, not 0"),
        (["--design", "layernorm", "--depth", "8"],
         "depth must be at least the unit's longest row or vector (768 beats), not 8"),
        (["--design", "systolic", "--depth", "8"], "--depth is not a flag of design systolic"),
        (["--design", "gelu", "--k-max", "8"], "--k-max is not a flag of design gelu"),
        (["--design", "softmax", "--preset", "nosuch"], "no softmax preset named 'nosuch'"),
    ]
    for flags, message in cases:
        assert main(["build", "--board", "ulx3s-85f", *flags]) == 2, flags
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def _saved_build(tmp_path, design, unit, depth=64):
    save_build_report(tmp_path, design, norm_top(unit, divisor=104, depth=depth),
                      "icebreaker")


def test_stream_run_cli_rejects_bad_input_before_opening_the_port(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _saved_build(tmp_path, "softmax", SoftmaxConfig(lanes=2, l_max=8, in_width=16))
    _saved_build(tmp_path, "layernorm", LayerNormConfig(lanes=2, h_max=8))
    _saved_build(tmp_path, "gelu", GeluConfig(lanes=2), depth=4)
    np.save("x.npy", np.zeros((2, 8), np.int16))
    np.save("long.npy", np.zeros((1, 9), np.int16))
    np.save("float.npy", np.zeros((2, 8)))
    np.save("big.npy", np.full((2, 8), 40000, np.int32))
    np.save("mask.npy", np.zeros((2, 7), bool))
    np.save("g.npy", np.zeros(8, np.int8))
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    port = ["run", "--board", "icebreaker", "--port", "/dev/nonexistent-port"]
    cases = [
        (["softmax", "--out", "y.npy"], "the following arguments are required: --x"),
        (["softmax", "--x", "junk.npy", "--out", "y.npy"], "is not a .npy file"),
        (["softmax", "--x", "float.npy", "--out", "y.npy"], "holds float64 values"),
        (["softmax", "--x", "big.npy", "--out", "y.npy"], "int16 values must lie in"),
        (["softmax", "--x", "long.npy", "--out", "y.npy"],
         "rows of 9 elements: this bitstream takes 1 to l_max = 8"),
        (["softmax", "--x", "x.npy", "--x-mask", "mask.npy", "--out", "y.npy"],
         "has shape (2, 7); it must match X's (2, 8)"),
        (["softmax", "--x", "x.npy", "--a", "x.npy", "--out", "y.npy"],
         "--a is not a flag of design softmax"),
        (["gelu", "--x", "x.npy", "--scale", "0.5", "--out", "y.npy"],
         "--scale is not a flag of design gelu"),
        (["gelu", "--x", "x.npy", "--out", "y.npy"], "X needs 8 beats; this bitstream holds 4"),
        (["layernorm", "--x", "x.npy", "--out", "y.npy"], "this build adds a residual"),
        (["layernorm", "--x", "x.npy", "--residual", "x.npy", "--gamma", "g.npy", "--out", "y.npy"],
         "--gamma and --beta go together"),
        (["layernorm", "--x", "x.npy", "--residual", "long.npy", "--out", "y.npy"],
         "R has shape (1, 9); it must have the shape of X (2, 8)"),
        (["systolic", "--a", "x.npy", "--b", "x.npy", "--out", "y.npy"],
         "no build report at build-icebreaker-systolic"),
    ]
    for flags, message in cases:
        assert main(port + flags) == 2, flags
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (flags, err)
    # Valid input gets as far as the serial port, which does not exist.
    assert main(port + ["gelu", "--x", "long.npy", "--out", "y.npy"]) == 2
    assert "rows of 9 elements" in capsys.readouterr().err
    np.save("ok.npy", np.zeros((1, 8), np.int8))
    assert main(port + ["gelu", "--x", "ok.npy", "--out", "y.npy"]) == 2
    assert "/dev/nonexistent-port" in capsys.readouterr().err
    assert not (tmp_path / "y.npy").exists()


def test_bench_boards_reuses_matching_builds(tmp_path, monkeypatch, capsys):
    """A size whose directory holds a build of the same design is not built
    again; a different config (here: another UART divisor) or different RTL
    (another RTLIL hash) is."""
    from bertforge.boards.systolic_top import SystolicTopConfig
    from bertforge.boards.targets import ARRAY_MULTIPLY
    from bertforge.generators import board_bench
    from bertforge.rtl.systolic import SystolicConfig
    built = []

    def fake_hash(name, top, clock_mhz):
        return f"rtl-{top.config.array.rows}"

    def fake_build(name, top, *, macs_per_cycle, clock_mhz, out_dir, quiet=False):
        built.append((name, top.config.array.rows))
        out_dir.mkdir(parents=True, exist_ok=True)
        if top.config.array.rows == 16:
            raise board_bench.BuildError("nextpnr-ecp5 failed: the design does not fit",
                                          does_not_fit=True)
        if top.config.array.rows == 12:
            raise board_bench.BuildError("yosys failed; log: build.log")
        (out_dir / "top.bit").write_bytes(b"bits")
        return {"timing_met": True, "fmax_mhz": 120.0, "peak_gops": 2 * macs_per_cycle * 0.1,
                "resources": {"LUTs": {"used": 10, "available": 100, "percent": 10.0}},
                "seconds": 1.0, "bitstream": str(out_dir / "top.bit"),
                "rtlil_sha256": fake_hash(name, top, clock_mhz)}

    def bench(*args, **kwargs):
        return board_bench.bench_boards(*args, designs=["systolic"], **kwargs)

    monkeypatch.setattr(board_bench, "build_board", fake_build)
    monkeypatch.setattr(board_bench, "design_sha256", fake_hash)
    earlier = tmp_path / "ulx3s-85f-4x4"
    earlier.mkdir()
    (earlier / "top.bit").write_bytes(b"bits")
    array = SystolicConfig(rows=4, cols=4, dataflow="os", acc_width=32, max_dsp=156,
                           **ARRAY_MULTIPLY["ecp5"])
    top_config = SystolicTopConfig(array=array, divisor=868, k_max=256,
                                   design_id=BLOCKS["systolic"].board.design_id)
    config = top_config.to_dict()
    report = {"timing_met": False, "fmax_mhz": 90.0, "peak_gops": 3.2, "resources": {},
              "seconds": 5.0, "bitstream": "/elsewhere/top.bit", "rtlil_sha256": "rtl-4",
              "design": {"name": "systolic", "config": config}}
    (earlier / "report.json").write_text(json.dumps(dict(report, rtlil_sha256="older rtl")))
    assert board_bench.reusable(earlier, top_config, "rtl-4") is None
    (earlier / "report.json").write_text(json.dumps(report))
    assert board_bench.reusable(earlier, top_config, "rtl-4") == report
    # A build from before the config held the design id is the same design.
    old = dict(report, design={"name": "systolic", "config": {
        key: value for key, value in config.items() if key != "design_id"}})
    (earlier / "report.json").write_text(json.dumps(old))
    assert board_bench.reusable(earlier, top_config, "rtl-4") == old
    (earlier / "report.json").write_text(json.dumps(report))
    rows = bench(tmp_path, boards=["ulx3s-85f"], sizes=[2, 4])
    assert built == [("ulx3s-85f", 2)]
    assert [(r["size"], r["timing_met"], r["fmax_mhz"]) for r in rows] == [
        ("2x2", True, 120.0), ("4x4", False, 90.0)]
    assert rows[0].get("largest") and not rows[1].get("largest")
    saved = json.loads((tmp_path / "ulx3s-85f-2x2" / "report.json").read_text())
    assert saved["design"]["config"]["array"]["rows"] == 2
    assert "| systolic | ulx3s-85f | 2x2 | yes | 120.0 | 100 | met |" in (tmp_path / "bench.md").read_text()
    report["design"]["config"]["divisor"] = 16
    (earlier / "report.json").write_text(json.dumps(report))
    failed = bench(tmp_path, boards=["ulx3s-85f"], sizes=[16])
    assert built[-1] == ("ulx3s-85f", 16) and not failed[0]["fits"]
    again = bench(tmp_path, boards=["ulx3s-85f"], sizes=[16])
    assert len(built) == 2 and again[0]["error"].endswith("the design does not fit")
    for _ in range(2):    # a failure other than not fitting is not remembered
        killed = bench(tmp_path, boards=["ulx3s-85f"], sizes=[12])
        assert built[-1] == ("ulx3s-85f", 12) and killed[0]["error"].startswith("yosys failed")
    assert len(built) == 4
    del built[1:]
    only = bench(tmp_path, boards=["ulx3s-85f"], sizes=[2, 4, 8], build=False)
    assert len(built) == 1 and [r["size"] for r in only] == ["2x2"]
    assert "not built: ulx3s-85f systolic 4x4, ulx3s-85f systolic 8x8" in (tmp_path / "bench.md").read_text()
    bench(tmp_path, boards=["ulx3s-85f"], sizes=[4])
    assert built[-1] == ("ulx3s-85f", 4)


@pytest.mark.slow
@pytest.mark.parametrize("name, design, flags", [
    ("icebreaker", "gelu", ["--lanes", "2"]),
    ("ulx3s-85f", "softmax", ["--lanes", "4", "--l-max", "128", "--depth", "512"]),
])
def test_full_build_stream_unit(name, design, flags, tmp_path, capsys):
    """Synthesis, place and route of a streaming unit's top at the board clock."""
    assert main(["build", "--board", name, "--design", design, *flags, "-o", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["timing_met"] and report["fmax_mhz"] >= report["clock_mhz"]
    assert report["resources"]["DSPs"]["used"] > 0          # multipliers in DSP blocks
    assert report["resources"]["block RAMs"]["used"] > 0
    assert report["design"]["name"] == design and report["elements_per_cycle"] in (2, 4)
    assert (tmp_path / report["bitstream"].rsplit("/", 1)[-1]).exists()
    assert "M elements/s at the clock" in (tmp_path / "report.md").read_text()


def test_build_failure_reasons():
    from bertforge.boards.build import _failure_reason
    tail = ["Info: Placing...", "ERROR: Unable to place cell 'top.array.pe_1_4_x_LC', no BELs "
            "remaining to implement cell type 'ICESTORM_LC'", "0 warnings, 1 error"]
    assert _failure_reason(tail) == (": the design does not fit (nextpnr ran out of ICESTORM_LC "
                                     "cells; build a smaller design)")
    assert _failure_reason(["ERROR: Design uses 9000 ICESTORM_LC cells, but device contains "
                            "only 5280."]).startswith(": the design does not fit (Design uses 9000")
    assert _failure_reason(["ERROR: something else"]) == ": something else"
    assert _failure_reason(["all fine"]) == ""
    log = ("Info: Device utilisation:\n"
           "Info: \t         ICESTORM_LC:   11163/   5280   211%\n"
           "Info: \t        ICESTORM_RAM:      15/     30    50%\n"
           "Info: \t        ICESTORM_DSP:      24/      8   300%\n")
    assert _failure_reason(tail, log) == (": the design does not fit: ICESTORM_LC 11163/5280 "
                                          "(211%, 5883 too many), ICESTORM_DSP 24/8 (300%, 16 too many)")


@pytest.mark.parametrize("design, wrong", [("softmax", False), ("layernorm", False),
                                           ("gelu", False), ("gelu", True)])
def test_stream_run_cli_writes_and_checks(design, wrong, tmp_path, monkeypatch, capsys):
    """``bertforge run`` past the port: a stand-in board link answers with
    the golden model (or, ``wrong``, one LSB off); the CLI writes Y.npy in the
    unit's output type and ``--check`` says whether it matches."""
    import contextlib

    from bertforge.boards import norm_host, protocol
    from bertforge.generators import board_design
    from bertforge.sim.norm_golden import norm_golden
    monkeypatch.chdir(tmp_path)
    units = {"softmax": SoftmaxConfig(lanes=2, l_max=8, in_width=16),
             "layernorm": LayerNormConfig(lanes=2, h_max=8, add_residual=False),
             "gelu": GeluConfig(lanes=2)}
    _saved_build(tmp_path, design, units[design])
    calls = []

    class FakeLink:
        def __init__(self, port):
            pass

        def ping(self):
            return BLOCKS[design].board.design_id, 1

    def fake_run(link, config, x, **inputs):
        calls.append(inputs)
        return norm_golden(design, config.unit, x, **inputs) + int(wrong), 77

    monkeypatch.setattr(protocol, "HostLink", FakeLink)
    monkeypatch.setattr(board_design, "open_link", lambda port: contextlib.nullcontext(port))
    monkeypatch.setattr(norm_host, f"run_{design}", fake_run)
    rng = np.random.default_rng(5)
    np.save("x.npy", rng.integers(-100, 100, (3, 6)).astype(np.int16))
    flags = ["--scale", "0.05"] if design == "softmax" else []
    code = main(["run", "--board", "icebreaker", "--port", "fake", design, "--x", "x.npy",
                 "--out", "y.npy", "--check", *flags])
    out, err = capsys.readouterr()
    y = np.load("y.npy")
    assert y.dtype == {"softmax": np.uint8, "layernorm": np.int8, "gelu": np.int8}[design]
    assert y.shape == (3, 6) and "in 77 cycles" in out
    if wrong:
        assert code == 1 and "differs from the golden model" in err
    else:
        assert code == 0 and "matches the golden model" in out
    if design == "layernorm":   # no --gamma/--beta: gamma 1.0 (Q.6) and beta 0 are loaded
        assert calls[0]["gamma"].tolist() == [64] * 6 and calls[0]["beta"].tolist() == [0] * 6
    if design == "softmax":
        assert calls[0] == {"scale": 0.05}
