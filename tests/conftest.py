"""Suite-wide plumbing: an account of the Verilator models a run uses.

Every Verilator model is built once per run and shared by all tests and all
pytest-xdist workers through the on-disk build cache of
:mod:`bertforge.sim.runner` (keyed by the Verilog text, behind a file lock);
the emitted Verilog itself is cached by
:func:`bertforge.generators.emit.cached_verilog`. Set ``BERTFORGE_CACHE`` to a
fresh directory for a cold run.

At the end of a run the terminal summary says how many distinct models the
run used, how many it had to build (and how long that took) and the slowest
builds, so a new test that adds a model is seen. Exhaustive sweeps are marked
``slow`` and left out by default (``-m slow`` runs them).
"""

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

_LOG_VARIABLE = "BERTFORGE_TEST_BUILD_LOG"


def pytest_addoption(parser):
    parser.addoption("--bf-coverage", metavar="DIR", default=None,
                     help="build the Verilator models with line and toggle coverage, collect "
                          "each run's coverage.dat in DIR and report per model at the end "
                          "(bertforge coverage DIR prints it again)")


def pytest_configure(config):
    directory = config.getoption("--bf-coverage", None)
    if directory and not hasattr(config, "workerinput"):
        Path(directory).mkdir(parents=True, exist_ok=True)
        os.environ["BERTFORGE_COVERAGE"] = str(Path(directory).resolve())
        config._bertforge_coverage = (os.environ["BERTFORGE_COVERAGE"], time.perf_counter())
    # The controller (or a run without xdist) makes the log directory; xdist
    # workers inherit the variable.
    if not hasattr(config, "workerinput") and _LOG_VARIABLE not in os.environ:
        os.environ[_LOG_VARIABLE] = tempfile.mkdtemp(prefix="bertforge-builds-")
        config._bertforge_build_log = os.environ[_LOG_VARIABLE]


@pytest.fixture(scope="session", autouse=True)
def _account_verilator_builds():
    """Record each ``runner.build`` call: model, whether it was not yet
    built when asked for (built here, or by another worker while this one
    waited), and its seconds."""
    directory = os.environ.get(_LOG_VARIABLE)
    if not directory:
        yield
        return
    from bertforge.sim import runner
    original = runner.build
    log_path = Path(directory) / f"{os.getpid()}.jsonl"

    def build(verilog, toplevel, *, waves=False, **kwargs):
        cached = runner.is_built(verilog, toplevel, waves=waves)
        start = time.perf_counter()
        directory = original(verilog, toplevel, waves=waves, **kwargs)
        seconds = time.perf_counter() - start
        with open(log_path, "a") as log:
            log.write(json.dumps({"model": directory.name, "built": not cached,
                                  "seconds": round(seconds, 2)}) + "\n")
        return directory

    runner.build = build
    try:
        yield
    finally:
        runner.build = original


def pytest_terminal_summary(terminalreporter, config):
    if getattr(config, "_bertforge_coverage", None):
        from bertforge.sim.coverage import write_report
        directory, start = config._bertforge_coverage
        if any(Path(directory).glob("*/*.dat")):
            _, text = write_report(directory, elapsed=time.perf_counter() - start)
            terminalreporter.section("Verilog coverage (line, toggle)")
            for line in text.splitlines():
                terminalreporter.write_line(line)
            terminalreporter.write_line(f"(written to {directory}: coverage.json, coverage.txt, "
                                        "annotated/)")
    _build_summary(terminalreporter, config)


def _build_summary(terminalreporter, config):
    directory = getattr(config, "_bertforge_build_log", None)
    if not directory or not Path(directory).is_dir():
        return
    records = []
    for path in Path(directory).glob("*.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines() if line]
    if not records:
        return
    models = {r["model"] for r in records}
    builds = {}
    for r in records:
        if r["built"]:
            builds[r["model"]] = max(builds.get(r["model"], 0), r["seconds"])
    write = terminalreporter.write_line
    terminalreporter.section("Verilator models")
    write(f"{len(models)} distinct models, {len(builds)} built in this run "
          f"({sum(builds.values()):.0f} s of building), {len(records)} uses")
    for model, seconds in sorted(builds.items(), key=lambda item: -item[1])[:15]:
        write(f"  {seconds:7.1f} s  {model}")


def pytest_unconfigure(config):
    directory = getattr(config, "_bertforge_build_log", None)
    if directory:
        shutil.rmtree(directory, ignore_errors=True)
