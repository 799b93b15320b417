"""``--bus axi4`` on the command line: ``bertforge generate gemm --bus axi4``
(and ``generate encoder --bus axi4 --hw FILE.toml``) writes the AXI top's Verilog, its JSON sidecar (ports under their AXI
names), the C header, the register map document and IP-XACT;
``bertforge sim gemm --bus axi4`` runs the GEMM as a one-command program
through the AXI top (cocotbext-axi memory, AXI-Lite registers) and reports
the usual keys plus the performance counters read from the registers."""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from bertforge.rtl.axi_top import record_bytes

from .axi_sim import (BUS_DEFAULTS, axi_name, axi_ports, axi_verilog, check_bus, program_run,
                      simulate_axi, simulate_axi_encoder)
from .cli_common import CliError, check_result, report, save_npy_atomic

__all__ = ["add_bus_args", "wants_axi", "bus_of", "write_axi_design", "run_sim_axi",
           "run_sim_axi_encoder"]


def add_bus_args(sub):
    sub.add_argument("--bus", choices=("stream", "axi4"), default="stream",
                     help="the engine's interface: its memory streams (default) or an AXI4 "
                          "master + AXI4-Lite registers + irq (data width = --mem-width)")
    sub.add_argument("--axi-addr-width", type=int, metavar="BITS",
                     help=f"AXI address width, 32 or 64 (default {BUS_DEFAULTS['addr_width']})")
    sub.add_argument("--axi-id-width", type=int, metavar="BITS",
                     help=f"AXI ID width (default {BUS_DEFAULTS['id_width']})")
    sub.add_argument("--max-burst", type=int, metavar="BEATS",
                     help=f"longest AXI burst, 1..256 beats (writes: at most 8; "
                          f"default {BUS_DEFAULTS['max_burst']})")
    sub.add_argument("--max-reads", type=int, metavar="N",
                     help=f"read bursts in flight (default {BUS_DEFAULTS['max_reads']})")
    sub.add_argument("--max-writes", type=int, metavar="N",
                     help=f"write bursts awaiting a response (default {BUS_DEFAULTS['max_writes']})")


def wants_axi(args):
    """Whether ``args`` ask for ``--bus axi4``; AXI flags without it are an error."""
    if not hasattr(args, "bus"):
        return False
    if args.bus != "axi4" and _given(args):
        raise CliError("the AXI flags (--axi-addr-width, --max-burst, ...) need --bus axi4")
    return args.bus == "axi4"


def _given(args):
    given = {"addr_width": args.axi_addr_width, "id_width": args.axi_id_width,
             "max_burst": args.max_burst, "max_reads": args.max_reads,
             "max_writes": args.max_writes}
    return {key: value for key, value in given.items() if value is not None}


def bus_of(config, args):
    """The checked AXI parameters of ``args`` (one-line errors)."""
    bus = _given(args)
    try:
        return check_bus(config, bus)
    except ValueError as error:    # TypeError cannot come from int flags
        raise CliError(f"--bus axi4: {error}") from None


def write_axi_design(config, bus, directory):
    """Write ``<name>_axi.v``, ``<name>_axi.json`` (config, bus, ports),
    ``<name>_axi_regs.h``, ``<name>_axi_regs.md`` and ``component.xml``
    into ``directory``; each appears whole or not at all. Returns the paths."""
    from .regs import export
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = axi_name(config)
    text = axi_verilog(config, bus)
    ports = axi_ports(config, bus)
    sidecar = {"block": "AxiGemmTop", "engine": type(config).__name__, "module": name,
               "config": config.to_dict(), "bus": bus,
               "record_bytes": record_bytes(config),
               "ports": [{"name": port, **info} for port, info in ports.items()],
               "interfaces": {"m_axi": "AXI4 master (data)", "s_axi": "AXI4-Lite slave (registers)",
                              "irq": "interrupt, active high", "clk": "clock",
                              "rst": "synchronous reset, active high"}}
    staging = Path(tempfile.mkdtemp(prefix=".bertforge-", dir=directory))
    try:
        exported = export(staging, prefix=name)
        (staging / f"{name}.v").write_text(text)
        (staging / f"{name}.json").write_text(json.dumps(sidecar, indent=2, sort_keys=True) + "\n")
        paths = []
        for path in [staging / f"{name}.v", staging / f"{name}.json", *exported]:
            target = directory / path.name
            path.replace(target)
            paths.append(target)
        return paths
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run_sim_axi(block, args):
    """``bertforge sim gemm --bus axi4``: the command(s) as a program run on
    the AXI top; exit 1 on a mismatch or a failed testbench.
    (``sim encoder --bus axi4``: :func:`run_sim_axi_encoder`.)"""
    if block.name == "encoder":
        return run_sim_axi_encoder(block, args)
    from .gemm_sim import layout_problems, read_matrix
    from .simulate import block_config, block_stimulus
    config = block_config(block, args)
    bus = bus_of(config, args)
    user, stimulus = block_stimulus(block, config, args)
    config = stimulus.get("config", config)
    image, commands = layout_problems(config, stimulus["problems"],
                                      np.random.default_rng(args.seed))
    size = record_bytes(config)
    used = int(np.flatnonzero(image)[-1]) + 1 if image.any() else 0
    used = max([used] + [c["c_addr"] + c["m"] * c["c_stride"] for c in commands])
    base = -(-used // size) * size
    if base + size * len(commands) > image.size:
        raise CliError(f"the matrices and the program need more than the {image.size} bytes "
                       f"of a {config.addr_width}-bit address space (raise --addr-width)")
    runs = [program_run(config, commands, base=base)]
    result = simulate_axi(config, image, runs, bus=bus, seed=args.seed,
                          pause=max(args.gap, args.stall))
    run = result["runs"][0] if result.get("runs") else {"code": None, "counters": {},
                                                         "mismatches": None}
    summary = {"block": block.name, "design": axi_name(config), "config": config.to_dict(),
               "bus": {"bus": "axi4", **bus}, **stimulus["summary"], "seed": args.seed,
               "cycles": run["counters"].get("cycles"), "error_code": run["code"],
               "match": bool(result["passed"]) and run["mismatches"] == 0,
               "mismatches": run["mismatches"], "stalls": max(args.gap, args.stall) > 0,
               "counters": run["counters"], "passed": bool(result["passed"])}
    if not result["passed"]:
        summary["log"] = result.get("log")
    if user and summary["match"] and result.get("image") is not None:
        save_npy_atomic(args.out, read_matrix(config, result["image"], commands[0]))
        summary["out"] = str(args.out)
    if args.json:
        summary["phases"] = result["phases"]
    report(summary, args.json, stimulus["title"] + " (AXI4)", keys=("cycles", "error_code"))
    if not args.json:
        for key, value in run["counters"].items():
            print(f"  {key:<13} {value}")
    return check_result({**summary, "model_exact": False})


def run_sim_axi_encoder(block, args):
    """``bertforge sim encoder --bus axi4``: one random layer of ``--model``
    at ``--seq`` as one program on the encoder's AXI top; every stage
    against the integer golden model (exit 1 if one differs)."""
    from bertforge.sim.encoder_golden import random_layer
    from .encoder_sim import layer_shape
    from .simulate import block_config
    config = block_config(block, args)
    bus = bus_of(config, args)
    shape = layer_shape(config, args.model, args.seq, args.hw)
    layer = random_layer(config, args.seq, shape.hidden, shape.heads, shape.ffn, seed=args.seed)
    result = simulate_axi_encoder(config, layer, bus=bus, seed=args.seed,
                                  pause=max(args.gap, args.stall))
    run = result["run"] or {"code": None, "pc": None, "counters": {}}
    summary = {"block": "encoder", "design": axi_name(config), "config": config.to_dict(),
               "bus": {"bus": "axi4", **bus}, "model": args.model, "seq": args.seq,
               "seed": args.seed, "commands": result["commands"],
               "cycles": run["counters"].get("cycles"), "error_code": run["code"],
               "match": result["match"], "mismatches": result["mismatches"],
               "stalls": max(args.gap, args.stall) > 0, "counters": run["counters"],
               "passed": result["passed"]}
    if not result["passed"]:
        summary["log"] = result["log"]
    if args.json:
        summary["phases"] = result["phases"]
    report(summary, args.json, f"{summary['design']}: {args.model} encoder layer, seq {args.seq}, "
                               f"{result['commands']} commands (AXI4)",
           keys=("cycles", "error_code"))
    if not args.json:
        for key, value in run["counters"].items():
            print(f"  {key:<13} {value}")
    if not summary["match"] or not summary["passed"]:
        print(f"bertforge: error: the hardware differs from the golden model "
              f"({summary['mismatches']}, error code {run['code']})", file=sys.stderr)
        return 1
    return 0
