"""``bertforge coverage DIR``: line and toggle coverage of the emitted Verilog.

    BERTFORGE_COVERAGE=DIR pytest ...      (or: pytest --bf-coverage DIR ...)
    bertforge coverage DIR                 table per model and module; writes
                                           DIR/coverage.json, coverage.txt and
                                           annotated/<model>.v.txt
    bertforge coverage DIR --bench OUT     also OUT/bench.json and bench.md, a
                                           row per model (for store_bench)
"""

import json
from pathlib import Path

__all__ = ["add_parser", "run_coverage", "bench_rows", "HARNESS_DESIGN"]


def add_parser(commands):
    sub = commands.add_parser("coverage", help="line and toggle coverage of the Verilog that "
                                               "coverage runs (BERTFORGE_COVERAGE=DIR) simulated")
    sub.add_argument("directory", metavar="DIR", help="the coverage directory of the runs")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.add_argument("--bench", metavar="OUT", help="also write OUT/bench.json and bench.md: one "
                                                   "row per model (line and toggle coverage)")


#: The instance of the design in a simulation harness (``*_harness``
#: models: :mod:`bertforge.sim.gemm_harness`, :mod:`bertforge.sim.encoder_harness`);
#: the harness's own modules (command and memory queues, the memory) are
#: testbench, left out of :func:`bench_rows`.
HARNESS_DESIGN = ("engine", "top")


def bench_rows(reports):
    """One row per model of :func:`bertforge.sim.coverage.report`'s result:
    its line and toggle points reached, and how many source lines and
    signals were never reached, over its modules (a harness: the design's
    modules only, ``design`` names the instance)."""
    from bertforge.sim.coverage import percent
    rows = []
    for model, summary in reports.items():
        top = model.split("-cov-")[0]
        modules = {m: e for m, e in summary.items() if m != "(all)"}
        row = {"model": top, "design": ""}
        if top.endswith("_harness"):
            inside = {m: e for m, e in modules.items()
                      if m.startswith(f"{top}.") and m.split(".")[1] in HARNESS_DESIGN}
            if inside:
                modules = inside
                row["design"] = sorted({m.split(".")[1] for m in inside})[0]
        for key in ("line_hit", "line_points", "toggle_hit", "toggle_points"):
            row[key] = sum(e[key] for e in modules.values())
        row["line_pct"] = percent(row["line_hit"], row["line_points"])
        row["toggle_pct"] = percent(row["toggle_hit"], row["toggle_points"])
        row["lines_missed"] = sum(len(e["missed_lines"]) for e in modules.values())
        row["signals_missed"] = sum(len(e["missed_signals"]) for e in modules.values())
        rows.append(row)
    return rows


def run_coverage(args):
    from .cli_common import CliError
    from bertforge.sim import coverage
    directory = Path(args.directory)
    if not directory.is_dir():
        raise CliError(f"no coverage directory {directory}")
    if not any(directory.glob("*/*.dat")):
        raise CliError(f"{directory} holds no coverage.dat of a run; run the tests with "
                       f"BERTFORGE_COVERAGE={directory} (or pytest --bf-coverage {directory})")
    reports, text = coverage.write_report(directory)
    if args.bench:
        from .bench import write_results
        write_results(args.bench, "coverage", bench_rows(reports), [
            ("model", lambda r: f"`{r['model']}`" + (f" ({r['design']})" if r["design"] else "")),
            ("line", lambda r: f"{r['line_hit']}/{r['line_points']}"),
            ("line %", lambda r: f"{r['line_pct']:.1f}"),
            ("lines unreached", lambda r: str(r["lines_missed"])),
            ("toggle", lambda r: f"{r['toggle_hit']}/{r['toggle_points']}"),
            ("toggle %", lambda r: f"{r['toggle_pct']:.1f}"),
            ("signals not fully toggled", lambda r: str(r["signals_missed"]))],
            f"Line and toggle coverage of {directory}")
    if args.json:
        print(json.dumps(reports, indent=1))
    else:
        print(text)
        print(f"(annotated sources in {directory / 'annotated'})")
    return 0
