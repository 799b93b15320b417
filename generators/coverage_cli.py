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

__all__ = ["add_parser", "run_coverage", "bench_rows"]


def add_parser(commands):
    sub = commands.add_parser("coverage", help="line and toggle coverage of the Verilog that "
                                               "coverage runs (BERTFORGE_COVERAGE=DIR) simulated")
    sub.add_argument("directory", metavar="DIR", help="the coverage directory of the runs")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.add_argument("--bench", metavar="OUT", help="also write OUT/bench.json and bench.md: one "
                                                   "row per model (line and toggle coverage)")


def bench_rows(reports):
    """One row per model of :func:`bertforge.sim.coverage.report`'s result:
    its line and toggle points reached, and how many source lines and
    signals were never reached (all modules)."""
    rows = []
    for model, summary in reports.items():
        entry = summary["(all)"]
        modules = [e for m, e in summary.items() if m != "(all)"]
        rows.append({"model": model.split("-cov-")[0],
                     **{key: entry[key] for key in ("line_hit", "line_points", "line_pct",
                                                    "toggle_hit", "toggle_points", "toggle_pct")},
                     "lines_missed": sum(len(e["missed_lines"]) for e in modules),
                     "signals_missed": sum(len(e["missed_signals"]) for e in modules)})
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
            ("model", lambda r: f"`{r['model']}`"),
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
