"""Out-of-context builds: a component whose ports are far more than a
package's pins (an AXI top, a bare engine) synthesized with yosys
``synth_ecp5`` and placed and routed by ``nextpnr-ecp5 --out-of-context``
(no I/O buffers, the ports left as internal nets), for its LUTs, FFs,
DSPs, block RAMs and Fmax on a board's device."""

import json
import os
import sys
import time
from pathlib import Path

from amaranth.back import rtlil

from .build import (critical_path_text, run_step,
                    parse_report, rtlil_sha256)
from .targets import board, toolchain_environment
from bertforge.rtl.errors import ParameterError

__all__ = ["build_out_of_context", "out_of_context_sha256"]


def _rtlil(component, name):
    return rtlil.convert(component, name=name)


def out_of_context_sha256(component, name="top"):
    """The ``rtlil_sha256`` :func:`build_out_of_context` records for
    ``component``, without building it."""
    return rtlil_sha256(_rtlil(component, name))


def build_out_of_context(board_name, component, *, clock_mhz, out_dir, name="top", seed=1,
                         quiet=False):
    """Synthesize ``component`` for ``board_name``'s device (ECP5 only) and
    place and route it out of context at ``clock_mhz`` (the ``sync``
    domain's clock, the ``clk`` port). Returns the report dict of
    :func:`~bertforge.boards.build.parse_report` plus ``board``,
    ``device``, ``seconds``, ``synth_retry`` and ``rtlil_sha256`` (also
    written to ``out_dir/report.json``; the critical path's steps to
    ``out_dir/critical_path.txt``). Raises :class:`BuildError` if a tool
    fails."""
    target = board(board_name)
    if target.family != "ecp5":
        raise ParameterError(f"out-of-context builds are for ECP5 boards, not {board_name!r} "
                             f"({target.family})")
    env = dict(os.environ, **toolchain_environment(target))
    platform = target.platform
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    text = _rtlil(component, name)
    (out / f"{name}.il").write_text(text)
    script = out / f"{name}.ys"
    script.write_text(f"read_rtlil {name}.il\nsynth_ecp5 -top {name}\nwrite_json {name}.json\n")
    package = platform._nextpnr_package_options[platform.package].upper()
    device = platform._nextpnr_device_options[platform.device]
    commands = [
        ("YOSYS", [env["YOSYS"], "-q", "-l", f"{name}.rpt", script.name]),
        ("NEXTPNR_ECP5", [env["NEXTPNR_ECP5"], "--quiet", "--log", f"{name}.tim", device,
                          "--package", package, "--speed", str(platform.speed),
                          "--json", f"{name}.json", "--out-of-context",
                          "--freq", f"{clock_mhz:g}", "--seed", str(seed),
                          "--report", f"{name}.report.json", "--timing-allow-fail"]),
    ]
    log_path = out / "build.log"
    synth_retry = None
    with open(log_path, "w") as log:
        for index, (tool, command) in enumerate(commands, 1):
            if not quiet:
                print(f"[{index}/{len(commands)}] {command[0].rsplit('/', 1)[-1]} "
                      "(out of context)", file=sys.stderr, flush=True)
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            synth_retry = run_step(command, tool.lower(), cwd=out, env=env, log=log,
                                   log_path=log_path, yosys_log=out / f"{name}.rpt", script=script,
                                   nextpnr_log=out / f"{name}.tim") or synth_retry
    report = parse_report(out / f"{name}.report.json", target.family, clock_mhz)
    (out / "critical_path.txt").write_text(critical_path_text(out / f"{name}.report.json"))
    report.update({"board": target.name, "device": target.device, "out_of_context": True,
                   "seconds": time.perf_counter() - start, "synth_retry": synth_retry,
                   "rtlil_sha256": rtlil_sha256(text)})
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    for big in (f"{name}.json", f"{name}.il"):       # tens of MB; the report is what stays
        (out / big).unlink(missing_ok=True)
    return report
