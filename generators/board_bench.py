"""``bertforge bench boards``: what fits on a board, how fast, how many GOPS."""

import json
import sys
from pathlib import Path

from bertforge.boards.build import BuildError, build_board, design_sha256
from bertforge.boards.systolic_top import SystolicBoardTop, SystolicTopConfig
from bertforge.boards.targets import ARRAY_MULTIPLY, board
from bertforge.rtl.systolic import SystolicConfig
from .bench import add_bench_out, write_results
from bertforge.boards.gemm_top import GemmBoardTop
from .gemm_board import gemm_top_config
from .systolic_board import SYSTOLIC
from .cli_common import CliError, int_list

BLOCK = "boards"

#: (design, board) -> (clock MHz to close, ``None`` for the board's own;
#: sizes tried, in order: after one that does not fit, no larger one is;
#: ``n`` is n x n, ``(rows, cols)`` a rectangle).
SWEEPS = {
    ("systolic", "icebreaker"): (24.0, (2, 3, 4, 5)),
    ("systolic", "ulx3s-85f"): (100.0, (2, 4, 8, 12, 16)),
    ("gemm", "icebreaker"): (None, (2, (2, 3), (3, 2), 3, 4)),
    ("gemm", "ulx3s-85f"): (100.0, (4, 8, 16)),
}
#: Board -> (accumulator width, dataflow) of the systolic sweep.
SYSTOLIC_ARRAYS = {"icebreaker": (24, "ws"), "ulx3s-85f": (32, "os")}


def add_bench_args(sub):
    add_bench_out(sub, "boards")
    sub.add_argument("--designs", default="systolic,gemm",
                     help="comma-separated designs: systolic, gemm (default both)")
    sub.add_argument("--boards", default=",".join(dict.fromkeys(b for _, b in SWEEPS)),
                     help="comma-separated boards")
    sub.add_argument("--sizes", help="comma-separated array sizes (default per board)")
    sub.add_argument("--rebuild", action="store_true",
                     help="build every size again, even where DIR holds a build of it")
    sub.add_argument("--reuse-only", action="store_true",
                     help="build nothing: tabulate the sizes DIR holds builds of, list the rest "
                          "as not built")


def reusable(build_dir, top, rtlil_sha256, design="systolic"):
    """The report of an earlier build of the same design in ``build_dir``
    (``bertforge build ... -o DIR`` or an earlier bench), else ``None``.
    Same design: same config and the same RTLIL (so a build from before an
    RTL change is not reused)."""
    try:
        report = json.loads((build_dir / "report.json").read_text())
    except (OSError, ValueError):
        return None
    saved = report.get("design", {})
    # A build from before the design id was in the config: it is systolic's.
    config = {"design_id": top.design_id, **saved.get("config", {})}
    if (saved.get("name") != design or config != top.to_dict()
            or report.get("rtlil_sha256") != rtlil_sha256):
        return None
    if report.get("error"):      # a build of it that failed (e.g. did not fit)
        return report
    bitstream = Path(report.get("bitstream") or "").name
    return report if bitstream and (build_dir / bitstream).is_file() else None


def build_or_reuse(target, design, top_config, top, directories, *, rtlil, clock_mhz,
                   macs_per_cycle, reuse=True, build=True, quiet=False):
    """Build the board top ``top`` of ``design`` (its ``top_config``; RTLIL
    hash ``rtlil``, :func:`~bertforge.boards.build.design_sha256`) for
    ``target`` into the last of ``directories``, unless one of them holds
    an earlier build of it (:func:`reusable`, tried in order; not if
    ``reuse`` is false).

    Returns ``(report, directory, reused)``: the build's report (as saved
    in the directory's ``report.json``, with ``design``) or, for a build
    that failed, ``{"error": ..., "does_not_fit": ...}``. A build that does
    not fit is saved as such and reused as a failure; any other failure
    (e.g. a killed tool) is built again next time. ``None`` if nothing is
    reusable and ``build`` is false."""
    if reuse:
        for directory in directories:
            report = reusable(directory, top_config, rtlil, design)
            if report is not None:
                if report.get("error"):
                    return {"error": report["error"], "does_not_fit": True}, directory, True
                return report, directory, True
    if not build:
        return None
    own = Path(directories[-1])
    saved = {"name": design, "config": top_config.to_dict()}
    try:
        report = build_board(target.name, top, macs_per_cycle=macs_per_cycle,
                             clock_mhz=clock_mhz, out_dir=own, quiet=quiet)
    except BuildError as error:
        if error.does_not_fit:
            own.mkdir(parents=True, exist_ok=True)
            (own / "report.json").write_text(json.dumps(
                {"design": saved, "rtlil_sha256": rtlil, "error": str(error)}, indent=2) + "\n")
        return {"error": str(error), "does_not_fit": error.does_not_fit}, own, False
    report["design"] = saved
    (own / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report, own, False


def _shape(size):
    """``(rows, cols)`` of a sweep size (``n``: n x n)."""
    return (size, size) if isinstance(size, int) else size


def _sweep_point(design, target, size, clock):
    """(top config, top, build directory name, row fields) of one size."""
    divisor = round((clock or target.clock_mhz) * 1e6 / 115200)
    rows, cols = _shape(size)
    if design == "gemm":
        config = gemm_top_config(target, clock or target.clock_mhz, rows=rows, cols=cols)
        return (config, GemmBoardTop(config), f"{target.name}-gemm-{rows}x{cols}",
                {"mem_kib": (1 << config.engine.addr_width) // 1024,
                 "k_chunk": config.engine.k_chunk})
    acc_width, dataflow = SYSTOLIC_ARRAYS.get(target.name, (32, "os"))
    array = SystolicConfig(rows=rows, cols=cols, dataflow=dataflow, acc_width=acc_width,
                           max_dsp=target.dsp_count, **ARRAY_MULTIPLY.get(target.family, {}))
    config = SystolicTopConfig(array=array, divisor=divisor, k_max=256,
                               design_id=SYSTOLIC.design_id)
    return (config, SystolicBoardTop(config), f"{target.name}-{rows}x{cols}",
            {"acc_width": acc_width, "dataflow": dataflow})


def bench_boards(out_dir, boards=None, sizes=None, reuse=True, build=True,
                 designs=("systolic", "gemm")):
    """Build each design's sweep on each board (:data:`SWEEPS`); a size
    whose directory already holds a build of the same design (same config,
    clock and UART divisor, same RTLIL) is reused unless ``reuse`` is false.
    Without ``build``, sizes with no such build are left out of the table
    and named in its notes."""
    boards = boards or list(dict.fromkeys(b for _, b in SWEEPS))
    rows = []
    missing = []
    for design in designs:
        for name in boards:
            target = board(name)
            clock, default_sizes = SWEEPS.get((design, name), (target.clock_mhz, (2, 4)))
            for size in sizes or default_sizes:
                row = _bench_size(out_dir, design, target, size, clock, reuse, build, missing)
                if row is not None:
                    rows.append(row)
                    if not row["fits"] and row.get("does_not_fit"):
                        break           # the larger sizes do not fit either
    for design in designs:
        for name in boards:
            good = [r for r in rows if r["design"] == design and r["board"] == name
                    and r["fits"] and r["timing_met"]]
            if good:
                max(good, key=lambda r: r["macs"])["largest"] = True

    def res(kind):
        def fmt(row):
            r = row.get("resources", {}).get(kind)
            return f"{r['used']}/{r['available']} ({r['percent']:.0f}%)" if r else "-"
        return fmt
    columns = [("design", lambda r: r["design"]), ("board", lambda r: r["board"]),
               ("array", lambda r: r["size"]), ("fits", _fits),
               ("Fmax MHz", lambda r: f"{r['fmax_mhz']:.1f}" if r.get("fmax_mhz") else "-"),
               ("clock MHz", lambda r: f"{r['clock_mhz']:.0f}"),
               ("timing", lambda r: "met" if r["timing_met"] else "missed"),
               ("peak GOPS", lambda r: f"{r['peak_gops']:.2f}" if r.get("peak_gops") else "-"),
               ("LUTs", res("LUTs")), ("FFs", res("FFs")), ("DSPs", res("DSPs")), ("block RAMs", res("block RAMs")),
               ("build s", lambda r: f"{r['seconds']:.0f}" if r.get("seconds") else "-"),
               ("largest", lambda r: "<-" if r.get("largest") else "")]
    notes = []
    if "systolic" in designs:
        notes += [
            "systolic: int8 SystolicArray behind the UART host link, k_max 256 (WS on "
            "iCEBreaker: smaller PEs, 24-bit accumulators, exact for K <= 256 at int8, to fit "
            "its 5280 LCs)",
            "systolic on ECP5: MULT18X18D with input and output registers and a fabric register "
            "after (multiply_stages 3), as `bertforge build` uses"]
    if "gemm" in designs:
        notes.append("gemm: the GEMM engine behind the UART host link with two banks of block "
                     "RAM as its memory, `bertforge build`'s defaults per family (iCE40: the "
                     "SerialGemmEngine, whose requantizer takes no DSP block; elsewhere the "
                     "staged GemmEngine, whose requantizer takes DSP blocks first, 4 per 32 "
                     "memory bits, the PEs the rest)")
    notes.append("peak GOPS = 2 x MACs per cycle x clock; multipliers beyond the board's DSP "
                 "count use logic")
    write_results(out_dir, "boards", rows, columns, "bertforge bench boards",
                  notes=notes + ([f"not built: {', '.join(missing)}"] if missing else []))
    return rows


def _fits(row):
    if row["fits"]:
        return "yes"
    _, found, why = row.get("error", "").partition("does not fit")
    return f"does not fit{why.split('; log:')[0]}" if found else "no"


def _bench_size(out_dir, design, target, size, clock, reuse, build, missing):
    """The table row of one size (built, or reused), or ``None`` if not built."""
    name = target.name
    top_config, top, dirname, fields = _sweep_point(design, target, size, clock)
    shown = clock or target.clock_mhz
    rows, cols = _shape(size)
    shape = f"{rows}x{cols}"
    print(f"{name}: {design} {shape} at {shown} MHz", file=sys.stderr, flush=True)
    row = {"design": design, "board": name, "size": shape, "macs": rows * cols,
           "clock_mhz": shown, **fields}
    build_dir = Path(out_dir) / dirname
    built = build_or_reuse(target, design, top_config, top, [build_dir],
                           rtlil=design_sha256(name, top, clock), clock_mhz=clock,
                           macs_per_cycle=rows * cols, reuse=reuse, build=build)
    if built is None:
        print("  not built (--reuse-only)", file=sys.stderr, flush=True)
        missing.append(f"{name} {design} {shape}")
        return None
    report, _, reused = built
    if reused:
        failed = "failed " if report.get("error") else ""
        print(f"  reusing the {failed}build in {build_dir}", file=sys.stderr, flush=True)
    if report.get("error"):
        return dict(row, fits=False, timing_met=False, error=report["error"],
                    does_not_fit=report["does_not_fit"])
    return dict(row, fits=True, timing_met=report["timing_met"], fmax_mhz=report["fmax_mhz"],
                peak_gops=report["peak_gops"], resources=report["resources"],
                seconds=report["seconds"], critical_path=report.get("critical_path"))


def run_bench(args):
    sizes = int_list("--sizes", args.sizes, 1, 64, "array sizes") if args.sizes else None
    if args.rebuild and args.reuse_only:
        raise CliError("--rebuild and --reuse-only contradict each other: give one")
    designs = args.designs.split(",")
    for design in designs:
        if design not in {d for d, _ in SWEEPS}:
            raise CliError(f"unknown design {design!r} for bench boards; designs: systolic, gemm")
    bench_boards(args.out, boards=args.boards.split(","), sizes=sizes, reuse=not args.rebuild,
                 build=not args.reuse_only, designs=designs)
    return 0
