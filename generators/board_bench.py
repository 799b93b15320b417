"""``bertforge bench boards``: what fits on a board, how fast, how many GOPS."""

import json
import sys
from pathlib import Path

from bertforge.boards.build import BuildError, build_board, design_sha256
from bertforge.boards.systolic_top import SystolicBoardTop, SystolicTopConfig
from bertforge.boards.targets import ARRAY_MULTIPLY, board
from bertforge.rtl.systolic import SystolicConfig
from .bench import add_bench_out, write_results
from .board_design import SYSTOLIC
from .cli_common import CliError, int_list

BLOCK = "boards"

#: Board -> (clock MHz to close, array sizes tried, accumulator width, dataflow).
SWEEPS = {
    "icebreaker": (24.0, (2, 3, 4, 5), 24, "ws"),
    "ulx3s-85f": (100.0, (2, 4, 8, 12, 16), 32, "os"),
}


def add_bench_args(sub):
    add_bench_out(sub, "boards")
    sub.add_argument("--boards", default=",".join(SWEEPS), help="comma-separated boards")
    sub.add_argument("--sizes", help="comma-separated array sizes (default per board)")
    sub.add_argument("--rebuild", action="store_true",
                     help="build every size again, even where DIR holds a build of it")
    sub.add_argument("--reuse-only", action="store_true",
                     help="build nothing: tabulate the sizes DIR holds builds of, list the rest "
                          "as not built")


def _reusable(build_dir, top, rtlil_sha256):
    """The report of an earlier build of the same design in ``build_dir``
    (``bertforge build ... -o DIR`` or an earlier bench), else ``None``.
    Same design: same config and the same RTLIL (so a build from before an
    RTL change is not reused)."""
    try:
        report = json.loads((build_dir / "report.json").read_text())
    except (OSError, ValueError):
        return None
    design = report.get("design", {})
    # A build from before the design id was in the config: it is systolic's.
    config = {"design_id": top.design_id, **design.get("config", {})}
    if (design.get("name") != "systolic" or config != top.to_dict()
            or report.get("rtlil_sha256") != rtlil_sha256):
        return None
    if report.get("error"):      # a build of it that failed (e.g. did not fit)
        return report
    bitstream = Path(report.get("bitstream") or "").name
    return report if bitstream and (build_dir / bitstream).is_file() else None


def bench_boards(out_dir, boards=tuple(SWEEPS), sizes=None, reuse=True, build=True):
    """Build each board's sweep; a size whose directory already holds a build
    of the same design (same config, clock and UART divisor) is reused
    unless ``reuse`` is false. Without ``build``, sizes with no such build
    are left out of the table and named in its notes."""
    rows = []
    missing = []
    for name in boards:
        target = board(name)
        clock, default_sizes, acc_width, dataflow = SWEEPS.get(
            name, (target.clock_mhz, (2, 4), 32, "os"))
        for n in sizes or default_sizes:
            array = SystolicConfig(rows=n, cols=n, dataflow=dataflow, acc_width=acc_width,
                                   max_dsp=target.dsp_count,
                                   **ARRAY_MULTIPLY.get(target.family, {}))
            top = SystolicTopConfig(array=array, divisor=round(clock * 1e6 / 115200), k_max=256,
                                   design_id=SYSTOLIC.design_id)
            print(f"{name}: {n}x{n} at {clock} MHz", file=sys.stderr, flush=True)
            row = {"board": name, "size": f"{n}x{n}", "macs": n * n, "clock_mhz": clock,
                   "acc_width": acc_width, "dataflow": dataflow}
            build_dir = Path(out_dir) / f"{name}-{n}x{n}"
            rtlil = design_sha256(name, SystolicBoardTop(top), clock)
            report = _reusable(build_dir, top, rtlil) if reuse else None
            if report is not None and report.get("error"):
                print(f"  reusing the failed build in {build_dir}", file=sys.stderr, flush=True)
                row.update(fits=False, timing_met=False, error=report["error"])
                rows.append(row)
                continue
            if report is not None:
                print(f"  reusing the build in {build_dir}", file=sys.stderr, flush=True)
            elif not build:
                print("  not built (--reuse-only)", file=sys.stderr, flush=True)
                missing.append(f"{name} {n}x{n}")
                continue
            else:
                try:
                    report = build_board(name, SystolicBoardTop(top), macs_per_cycle=n * n,
                                         clock_mhz=clock, out_dir=build_dir)
                except BuildError as error:
                    row.update(fits=False, timing_met=False, error=str(error))
                    rows.append(row)
                    if not error.does_not_fit:   # e.g. a killed tool: try again next time
                        continue
                    (build_dir / "report.json").write_text(json.dumps(
                        {"design": {"name": "systolic", "config": top.to_dict()},
                         "rtlil_sha256": rtlil, "error": str(error)}, indent=2) + "\n")
                    continue
                report["design"] = {"name": "systolic", "config": top.to_dict()}
                (build_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
            row.update(fits=True, timing_met=report["timing_met"], fmax_mhz=report["fmax_mhz"],
                       peak_gops=report["peak_gops"], resources=report["resources"],
                       seconds=report["seconds"], critical_path=report.get("critical_path"))
            rows.append(row)
    for name in boards:
        good = [r for r in rows if r["board"] == name and r["fits"] and r["timing_met"]]
        if good:
            max(good, key=lambda r: r["macs"])["largest"] = True

    def res(kind):
        def fmt(row):
            r = row.get("resources", {}).get(kind)
            return f"{r['used']}/{r['available']} ({r['percent']:.0f}%)" if r else "-"
        return fmt
    columns = [("board", lambda r: r["board"]), ("array", lambda r: r["size"]),
               ("fits", lambda r: "yes" if r["fits"] else "no"),
               ("Fmax MHz", lambda r: f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "-"),
               ("clock MHz", lambda r: f"{r['clock_mhz']:.0f}"),
               ("timing", lambda r: "met" if r["timing_met"] else "missed"),
               ("peak GOPS", lambda r: f"{r['peak_gops']:.2f}" if r.get("peak_gops") else "-"),
               ("LUTs", res("LUTs")), ("FFs", res("FFs")), ("DSPs", res("DSPs")), ("block RAMs", res("block RAMs")),
               ("build s", lambda r: f"{r['seconds']:.0f}" if r.get("seconds") else "-"),
               ("largest", lambda r: "<-" if r.get("largest") else "")]
    write_results(out_dir, "boards", rows, columns, "bertforge bench boards", notes=[
        "int8 SystolicArray behind the UART host link, k_max 256 (WS on iCEBreaker: smaller PEs)",
        "ECP5: MULT18X18D with input and output registers and a fabric register after "
        "(multiply_stages 3), as `bertforge build` uses",
        "peak GOPS = 2 x MACs per cycle x clock; multipliers beyond the board's DSP count use logic",
        "iCEBreaker uses 24-bit accumulators (exact for K <= 256 at int8) to fit its 5280 LCs"]
        + ([f"not built: {', '.join(missing)}"] if missing else []))
    return rows


def run_bench(args):
    sizes = int_list("--sizes", args.sizes, 1, 64, "array sizes") if args.sizes else None
    if args.rebuild and args.reuse_only:
        raise CliError("--rebuild and --reuse-only contradict each other: give one")
    bench_boards(args.out, boards=args.boards.split(","), sizes=sizes, reuse=not args.rebuild,
                 build=not args.reuse_only)
    return 0
