"""The generic simulation driver behind ``bertforge sim``, ``bench`` and ``demo``.

:func:`simulate` runs any block: emit (cached) -> Verilator build (cached)
-> the stimulus arrays written to a work directory -> spec -> the cocotb
testbench -> outputs loaded back, timing each phase. :func:`run_sim` and
:func:`run_bench` are the command lines of every block, driven by its
:class:`~bertforge.generators.block.Block` entry.
"""

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from .cli_common import check_result, config_from_args, report, save_npy_atomic
from .emit import cached_verilog

__all__ = ["PHASES", "simulate", "add_phases", "cached_verilog", "make_stimulus", "block_config",
           "block_stimulus", "run_sim", "run_bench"]

#: Phases :func:`simulate` times (seconds, in ``result["phases"]``).
PHASES = ("elaborate", "build", "simulate", "check")


def _write_arrays(value, work, name):
    """``value`` with every array (``.npy``) and dict of arrays (``.npz``)
    written under ``work`` and replaced by its path."""
    if isinstance(value, np.ndarray):
        path = work / f"{name}.npy"
        np.save(path, value)
        return str(path)
    if isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
        path = work / f"{name}.npz"
        np.savez(path, **value)
        return str(path)
    if isinstance(value, dict):
        return {key: _write_arrays(v, work, key if name == "spec" else f"{name}_{key}")
                for key, v in value.items()}
    if isinstance(value, list):
        return [_write_arrays(v, work, f"{name}_{index}") for index, v in enumerate(value)]
    return value


def _load_arrays(value, work):
    """``value`` with every path of a ``.npy``/``.npz`` file in ``work``
    replaced by its array (a dict of arrays for ``.npz``)."""
    if isinstance(value, dict):
        return {key: _load_arrays(v, work) for key, v in value.items()}
    if isinstance(value, list):
        return [_load_arrays(v, work) for v in value]
    if isinstance(value, str) and value.endswith((".npy", ".npz")) and Path(value).parent == work:
        if not Path(value).is_file():
            return None
        if value.endswith(".npy"):
            return np.load(value)
        with np.load(value) as saved:
            return {key: saved[key] for key in saved.files}
    return value


def simulate(config, testbench, spec, *, design=None, harness=None, extra=(), waves=False,
             workdir=None, quiet=True, cycles=None):
    """Run the cocotb ``testbench`` on the emitted Verilog of ``design(config)``
    (the block's component, e.g. ``SystolicArray``; or of
    ``harness(config, *extra)``, module ``<name>_harness``) in Verilator.

    ``spec`` holds the testbench's parameters; its arrays (and dicts of
    arrays) are written to files and passed as paths, ``config`` is added.
    Returns the testbench's result dict with the ``.npy``/``.npz`` files it
    wrote loaded back, and ``phases``: seconds of each of :data:`PHASES`.

    ``cycles``: the cycle model's prediction, if known: the run is refused
    past the time limit and shows progress when long
    (:func:`bertforge.sim.longrun.watch`).

    Without ``workdir`` the run works in a new temporary directory, removed
    after a run that passed without ``waves`` (``result["log"]`` is then
    gone too); a failed run keeps it, for its log.
    """
    from bertforge.sim import longrun, runner
    phases = {}
    start = time.perf_counter()
    top = f"{config.name}_harness" if harness else config.name
    if cycles:
        longrun.check(top, cycles)      # before any work
    verilog = cached_verilog(config, harness or design, *extra)
    phases["elaborate"] = time.perf_counter() - start
    runner.build(verilog, top, waves=waves, quiet=quiet)
    phases["build"] = time.perf_counter() - start - phases["elaborate"]
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"bertforge-{top}-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    mark = time.perf_counter()
    try:
        spec = _write_arrays({"config": config.to_dict(), **spec}, work, "spec")
        with longrun.watch(top, cycles, quiet=quiet):
            result = runner.run(verilog, top, testbench, spec, waves=waves, workdir=work,
                                quiet=quiet)
    except runner.SimulationError:
        if workdir is None and not (work / "sim.log").exists():
            shutil.rmtree(work, ignore_errors=True)     # it never ran: nothing to keep
        raise       # a failed simulation keeps its work directory: the message names its log
    except BaseException:
        if workdir is None:     # interrupted, killed, or no room: nothing worth keeping
            shutil.rmtree(work, ignore_errors=True)
        raise
    phases["simulate"] = time.perf_counter() - mark
    if not waves:
        longrun.record(top, result, phases["simulate"])
    mark = time.perf_counter()
    result = _load_arrays(result, work)
    if workdir is None and result["passed"] and not waves:
        shutil.rmtree(work)
        del result["log"]
    phases["check"] = time.perf_counter() - mark
    result["phases"] = phases
    return result


def add_phases(*results):
    """The phases of several simulations, summed."""
    return {phase: sum(r["phases"][phase] for r in results) for phase in PHASES}


def make_stimulus(config, summary, what, /, **data):
    """A stimulus for :func:`run_sim`: the ``data`` the block's ``run``
    takes, the ``summary`` sizes and the title ``"<design>: <what>"``."""
    return {**data, "summary": summary, "title": f"{config.name}: {what}"}


def block_config(block, args):
    """The config a command line's flags (or the block's own ``make_config``) give."""
    return block.make_config(block, args) if block.make_config else config_from_args(block, args)


def block_stimulus(block, config, args):
    """``(user, stimulus)``: the user's files when a flag names one (``user``
    true), else random data from ``--seed``."""
    user = any(getattr(args, name, None) not in (None, False) for name in block.user_files)
    if user:
        return user, block.user_stimulus(config, args)
    return user, block.random_stimulus(config, args, np.random.default_rng(args.seed))


def run_sim(block, args):
    """``bertforge sim BLOCK``: config from flags/preset/TOML, stimulus
    (random, or the user's files), simulate, summary, ``--out``, report;
    exit code 1 on a mismatch (or, without stalls, cycles off the model)."""
    from bertforge.sim.longrun import set_limit
    set_limit(getattr(args, "max_minutes", None))
    config = block_config(block, args)
    user, stimulus = block_stimulus(block, config, args)
    config = stimulus.get("config", config)
    result = block.run(config, stimulus, args)
    mark = time.perf_counter()
    summary = {"block": block.name, "design": config.name, "config": config.to_dict(),
               **stimulus["summary"], "seed": args.seed,
               **{key: result[key] for key in block.summary_keys if key in result}}
    if result.get("waves"):
        summary["waves"] = result["waves"]
    if user and result["match"] and result.get("output") is not None:
        save_npy_atomic(args.out, result["output"])
        summary["out"] = str(args.out)
    if args.json:
        phases = dict(result["phases"])
        phases["check"] += time.perf_counter() - mark
        summary["phases"] = phases
    if block.report:
        block.report(summary, args.json)
    else:
        keys = [key for key in block.report_keys if key in summary]
        report(summary, args.json, stimulus["title"], keys=keys)
    if block.check:
        return block.check(summary)
    for checked in result.get("checks", [result]):
        code = check_result(checked)
        if code:
            return code
    return 0


def run_bench(block, args):
    """``bertforge bench BLOCK``: the block's bench; its exit code."""
    return block.bench(args) or 0

