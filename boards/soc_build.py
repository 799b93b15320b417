"""Build the LiteX SoC (:mod:`bertforge.boards.soc`): gateware, map and
YoWASP shims, then LiteX's own ECP5 script (yosys, nextpnr-ecp5, ecppack)
through the shims; reports resources and Fmax as
:func:`~bertforge.boards.build.build_board` does."""

import json
import os
import shlex
import sys
import time
from pathlib import Path

from .build import BuildError, critical_path_text, parse_report, run_step
from .soc import generate_soc
from .soc_map import soc_map, write_map
from .soc_shims import SHIM_TOOLS, write_shims
from .targets import board, toolchain_environment

__all__ = ["prepare_soc", "build_soc"]


def prepare_soc(soc, out_dir):
    """Everything before the tools run: the gateware (``out_dir/gateware``),
    the map (``soc_map.json/.h/.md``), the shims (``out_dir/bin``) and the
    commands of LiteX's build script, nextpnr told to write its report.
    Returns ``(gateware dir, [command argv...], map paths)``; raises
    :class:`~bertforge.boards.targets.ToolchainError` if a YoWASP tool is
    missing (before any file is written)."""
    toolchain = toolchain_environment(board(soc.bertforge_info["board"]))
    out = Path(out_dir).resolve()
    gateware = generate_soc(soc, out)
    name = soc.platform.name
    map_paths = write_map(soc_map(soc, out / "csr.json"), out)
    shims = write_shims(out / "bin", toolchain)
    commands = []
    for line in (gateware / f"build_{name}.sh").read_text().splitlines():
        words = shlex.split(line)
        if not words or words[0] not in SHIM_TOOLS:
            continue
        if words[0] == "nextpnr-ecp5":
            words += ["--report", f"{name}.report.json"]
        commands.append([str(shims[words[0]])] + words[1:])
    if [Path(c[0]).name for c in commands] != list(SHIM_TOOLS):
        raise BuildError(f"LiteX's build script {gateware / f'build_{name}.sh'} does not run "
                         f"{', '.join(SHIM_TOOLS)} in order")
    return gateware, commands, map_paths


def build_soc(soc, out_dir, *, quiet=False):
    """Generate and build ``soc`` in ``out_dir``. Returns the report
    (``out_dir/report.json``): :func:`~bertforge.boards.build.parse_report`'s
    resources, Fmax (the slowest clock) and critical path, plus
    ``fmax_by_clock``, the SoC's parameters, the bitstream and the build
    time. Raises :class:`~bertforge.boards.build.BuildError` if a tool fails
    (``does_not_fit`` when the design is too big)."""
    start = time.perf_counter()
    out = Path(out_dir).resolve()
    gateware, commands, map_paths = prepare_soc(soc, out)
    name = soc.platform.name
    log_path = out / "build.log"
    synth_retry = None
    with open(log_path, "w") as log:
        for index, command in enumerate(commands, 1):
            tool = Path(command[0]).name
            if not quiet:
                print(f"[{index}/{len(commands)}] {tool}", file=sys.stderr, flush=True)
            log.write(f"$ {shlex.join(command)}\n")
            log.flush()

            synth_retry = run_step(command, tool, cwd=gateware, env=dict(os.environ), log=log,
                                   log_path=log_path, yosys_log=gateware / f"{name}.rpt",
                                   script=gateware / f"{name}.ys",
                                   nextpnr_log=log_path) or synth_retry     # nextpnr logs there
    info = soc.bertforge_info
    report_json = gateware / f"{name}.report.json"
    report = parse_report(report_json, "ecp5", info["sys_clk_mhz"])
    (out / "critical_path.txt").write_text(critical_path_text(report_json))
    fmax = json.loads(report_json.read_text()).get("fmax", {})
    report.update({
        "board": info["board"], "device": info["device"], "soc": info,
        "fmax_by_clock": {clock: round(v["achieved"], 2) for clock, v in fmax.items()},
        "clock_mhz": info["sys_clk_mhz"], "fits": True, "synth_retry": synth_retry,
        "seconds": time.perf_counter() - start,
        "bitstream": str(gateware / f"{name}.bit"), "map": [str(p) for p in map_paths],
    })
    (gateware / f"{name}.json").unlink(missing_ok=True)     # the netlist: tens of MB
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
