"""``bertforge coverage DIR``: line and toggle coverage of the emitted Verilog.

    BERTFORGE_COVERAGE=DIR pytest ...      (or: pytest --bf-coverage DIR ...)
    bertforge coverage DIR                 table per model and module; writes
                                           DIR/coverage.json, coverage.txt and
                                           annotated/<model>.v.txt
"""

import json
from pathlib import Path

__all__ = ["add_parser", "run_coverage"]


def add_parser(commands):
    sub = commands.add_parser("coverage", help="line and toggle coverage of the Verilog that "
                                               "coverage runs (BERTFORGE_COVERAGE=DIR) simulated")
    sub.add_argument("directory", metavar="DIR", help="the coverage directory of the runs")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")


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
    if args.json:
        print(json.dumps(reports, indent=1))
    else:
        print(text)
        print(f"(annotated sources in {directory / 'annotated'})")
    return 0
