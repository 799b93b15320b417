"""``bertforge sweep``: a design-space sweep of BERT accelerators on Ray.

A spec (TOML) names the workload and the axes::

    base = "tiny.toml"          # a hardware config: this file's folder, then generators/configs
    [workload]
    model = "bert-base"         # a preset of bertforge.generators.workload.MODELS, or
    # checkpoint = "DIR"        # a Hugging Face BERT directory (its config.json; relative to
    #                           # this file) or a known checkpoint name ("all-minilm-l6-v2")
    seq = 128
    batch = 1                   # optional (1)
    training = false            # optional: the backward pass and the optimizer step too
    [axes]                      # every axis optional; a list of values each
    model = ["bert-base", "minilm-l6-h384"]   # workloads (model presets)
    array = ["4x4", "8x8"]      # rows x cols of the GEMM array (or rows = [...], cols = [...])
    dataflow = ["os", "ws"]     # [gemm] dataflow
    pattern = ["dense", "2:4"]  # the GEMM engine dense, or the N:M sparse engine
    lanes = [1, 4]              # the softmax, layernorm and GELU units' lanes together (or
    softmax_lanes = [4]         # each on its own)
    mem_bytes_per_cycle = [16, 64]
    board = ["ulx3s-85f"]       # the FPGA synthesis targets (--synth, --pnr)
    clock_mhz = [100]
    [sweep]                     # optional
    random = 6                  # 6 random points of the grid (default: the whole grid)
    seed = 0
    timeout_s = 1800            # per point's synthesis, place and route
    engine_max_dsp = 53         # the dense engine's DSPs (default: the board's minus the units')
    order = "largest"           # which designs go first: the most MACs (the shortest sweep),
                                # or "smallest" (the most designs done if it is stopped early)
    [gemm]                      # optional: fields every point shares, over the base
    mem_width = 64              # (also [softmax], [layernorm], [gelu], [hardware], [sparse])

Each point is :func:`~bertforge.generators.sweep_point.run_point`:
:func:`~bertforge.generators.analyze.analyze` of the layer (cycles,
latency at the point's clock, the class breakdown) and, with ``--synth``,
``--pnr``, ``--verify``, synthesis, place and route and a Verilator check
(see :mod:`~bertforge.generators.sweep_point`). Points that need a tool
run one per Ray task (1 CPU and their memory declared), the most MACs
first (or the fewest: ``order``); a point whose engine another point shares waits for that point, so
the engine is synthesized, placed and Verilator-built once and the others
reuse it. Model-only points (milliseconds each) go in batches
(:func:`batch_size`). A point that fails (bad parameters, tool error, time
limit) is recorded with its reason and the sweep goes on. Every finished
point is appended to ``sweep.jsonl`` at once (``sweep.csv`` / ``sweep.json``
are rewritten atomically, at most every 2 s); a rerun skips the points
already done (key: the point's config, workload and flags; a synthesized
point is elaborated again and reuses saved counts only if its RTLIL hash and
the tool versions are unchanged). SIGINT and SIGTERM stop the sweep
cleanly. ``pareto.png``: see :mod:`~bertforge.generators.sweep_report`.
"""

import collections
import dataclasses
import hashlib
import itertools
import json
import math
import os
import random
import signal
import sys
import threading
import time
import tomllib
from pathlib import Path

from .cli_common import CliError
from .sweep_point import (AXES, DEFAULT_BOARD, FIXED_SECTIONS, class_column, hardware_table, point_name,
                          run_point, run_points)
from .sweep_report import TableWriter, append_rows, load_rows, pareto_front, write_report

__all__ = ["add_parser", "run_sweep", "load_spec", "grid_points", "run_point", "run_points",
           "start_ray", "stop_ray", "batch_size", "pareto_front", "sweep", "write_report", "append_rows", "load_rows",
           "AXES", "class_column"]

CONFIGS = Path(__file__).parent / "configs"
#: Most points a spec may describe (the grid, before ``random``).
MAX_POINTS = 100_000
#: Resources each task declares to Ray: (CPUs, bytes of memory).
ANALYZE_TASK = (1, 512 * 2**20)
SYNTH_TASK = (1, 3 * 2**30)
PNR_TASK = (1, 4 * 2**30)
#: Statuses of a point that a rerun does not run again.
DONE = ("ok", "does_not_fit", "invalid", "mismatch")


# --- the spec ---------------------------------------------------------------

def _spec_error(path, message):
    return CliError(f"sweep spec {path}: {message}")


def _find_base(path, base):
    for candidate in (Path(path).parent / base, CONFIGS / base):
        if candidate.is_file():
            return candidate
    raise _spec_error(path, f"base hardware config {base!r} not found (next to the spec or in "
                            f"{CONFIGS})")


def _is_int(value, least=1):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def checkpoint_model(path, checkpoint):
    """The :class:`~bertforge.generators.workload.BertModel` of a
    checkpoint's ``config.json``: ``checkpoint`` a directory (relative to
    the spec at ``path``) or a known checkpoint name (fetched if needed)."""
    from . import checkpoint as ckpt
    from .workload import BertModel
    directory = Path(path).parent / checkpoint
    if not directory.is_dir():
        directory = ckpt.resolve(checkpoint)   # a known name, or a one-line CheckpointError
    if not (directory / "config.json").is_file():
        raise _spec_error(path, f"checkpoint {directory} has no config.json")
    config = ckpt.read_config(directory)
    name = checkpoint if str(checkpoint) in ckpt.KNOWN else directory.resolve().name
    return BertModel(name, config["hidden_size"], config["num_attention_heads"],
                     config["num_hidden_layers"], config["intermediate_size"],
                     vocab=config.get("vocab_size", 30522),
                     positions=config.get("max_position_embeddings", 512))


def _load_workload(path, workload, axes):
    """``(model name, {name: BertModel})`` of the [workload] section and the
    model axis."""
    from .workload import MODELS
    bad = sorted(set(workload) - {"model", "checkpoint", "seq", "batch", "training"})
    if bad:
        raise _spec_error(path, f"unknown workload field {bad[0]!r}; fields: batch, checkpoint, "
                                "model, seq, training")
    if "model" in workload and "checkpoint" in workload:
        raise _spec_error(path, "workload names a model or a checkpoint, not both")
    models = {}
    if "checkpoint" in workload:
        if not isinstance(workload["checkpoint"], str) or not workload["checkpoint"]:
            raise _spec_error(path, f"workload checkpoint must be a directory or a name, not "
                                    f"{workload['checkpoint']!r}")
        bert = checkpoint_model(path, workload["checkpoint"])
        models[bert.name] = bert
        model = bert.name
    else:
        model = workload.get("model", "bert-base")
    for name in [model] * ("checkpoint" not in workload) + list(axes.get("model", [])):
        if name not in models:
            if name not in MODELS:
                raise _spec_error(path, f"unknown model {name!r}; models: "
                                        f"{', '.join(sorted(MODELS))} (or checkpoint = DIR)")
            models[name] = MODELS[name]
    for key, default in (("seq", None), ("batch", 1)):
        value = workload.get(key, default)
        if not (_is_int(value) and value <= 16384):
            raise _spec_error(path, f"workload {key} must be an integer in 1..16384, not {value!r}")
    if workload["seq"] * workload.get("batch", 1) > 16384:
        raise _spec_error(path, "workload seq x batch must be at most 16384")
    for bert in models.values():
        if workload["seq"] > bert.positions:
            raise _spec_error(path, f"workload seq {workload['seq']} is longer than {bert.name}'s "
                                    f"{bert.positions} positions")
    if not isinstance(workload.get("training", False), bool):
        raise _spec_error(path, "workload training must be true or false")
    return model, models


def _check_axes(path, axes):
    from bertforge.boards.targets import BOARDS
    if not isinstance(axes, dict) or not axes:
        raise _spec_error(path, f"needs an [axes] section with at least one axis; axes: {', '.join(AXES)}")
    for name, values in axes.items():
        if name not in AXES:
            raise _spec_error(path, f"unknown axis {name!r}; axes: {', '.join(AXES)}")
        if not isinstance(values, list) or not values:
            raise _spec_error(path, f"axis {name} must be a non-empty list, not {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise _spec_error(path, f"axis {name} repeats a value")
    for value in axes.get("array", []):
        rows, x, cols = str(value).partition("x")
        if not (isinstance(value, str) and x and rows.isdigit() and cols.isdigit()
                and int(rows) >= 1 and int(cols) >= 1):
            raise _spec_error(path, f'axis array takes "ROWSxCOLS" strings like "4x8", not {value!r}')
    if "array" in axes and ("rows" in axes or "cols" in axes):
        raise _spec_error(path, "axis array sets rows and cols: leave out the rows and cols axes")
    if "lanes" in axes and any(f"{u}_lanes" in axes for u in ("softmax", "layernorm", "gelu")):
        raise _spec_error(path, "axis lanes sets every unit's lanes: leave out softmax_lanes, "
                                "layernorm_lanes and gelu_lanes")
    for name in axes.get("board", []):
        if name not in BOARDS:
            raise _spec_error(path, f"unknown board {name!r}; boards: {', '.join(BOARDS)}")


def load_spec(path):
    """The spec at ``path`` as a dict (workload, base table, fixed sections,
    axes, sweep options); a one-line :class:`CliError` for anything wrong."""
    path = Path(path)
    try:
        table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CliError(f"sweep spec {path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise _spec_error(path, f"not valid TOML: {str(error).splitlines()[0]}") from None
    except IsADirectoryError:
        raise CliError(f"sweep spec {path} is a directory") from None
    known = {"base", "workload", "axes", "sweep", *FIXED_SECTIONS}
    unknown = sorted(set(table) - known)
    if unknown:
        raise _spec_error(path, f"unknown key {unknown[0]!r}; keys: {', '.join(sorted(known))}")
    workload = table.get("workload")
    if not isinstance(workload, dict):
        raise _spec_error(path, "needs a [workload] section (model, seq)")
    axes = table.get("axes")
    _check_axes(path, axes)
    model, models = _load_workload(path, workload, axes)
    options = table.get("sweep", {})
    bad = sorted(set(options) - {"random", "seed", "timeout_s", "engine_max_dsp", "order"})
    if bad:
        raise _spec_error(path, f"unknown sweep field {bad[0]!r}; fields: engine_max_dsp, order, "
                                "random, seed, timeout_s")
    if options.get("order", "largest") not in ("largest", "smallest"):
        raise _spec_error(path, f"sweep order must be \"largest\" or \"smallest\" (first), not "
                                f"{options['order']!r}")
    for key in ("random", "timeout_s"):
        value = options.get(key)
        if value is not None and not _is_int(value):
            raise _spec_error(path, f"sweep {key} must be a positive integer, not {value!r}")
    if options.get("engine_max_dsp") is not None and not _is_int(options["engine_max_dsp"], 0):
        raise _spec_error(path, "sweep engine_max_dsp must be an integer >= 0, not "
                                f"{options['engine_max_dsp']!r}")
    if not isinstance(options.get("seed", 0), int):
        raise _spec_error(path, f"sweep seed must be an integer, not {options['seed']!r}")
    size = math.prod(len(v) for v in axes.values())
    if size > MAX_POINTS:
        raise _spec_error(path, f"the grid has {size:,} points; at most {MAX_POINTS:,} "
                                "(use fewer values or random = N)")
    base = {}
    if "base" in table:
        if not isinstance(table["base"], str):
            raise _spec_error(path, f"base must be a file name, not {table['base']!r}")
        base_path = _find_base(path, table["base"])
        try:
            base = tomllib.loads(base_path.read_text())
        except tomllib.TOMLDecodeError as error:
            raise _spec_error(path, f"base {base_path} is not valid TOML: {error}") from None
    fixed = {}
    for section in FIXED_SECTIONS:
        if section in table:
            if not isinstance(table[section], dict):
                raise _spec_error(path, f"[{section}] must be a table")
            fixed[section] = dict(table[section])
    spec = {"path": str(path), "model": model, "models": models, "seq": workload["seq"],
            "batch": workload.get("batch", 1), "training": workload.get("training", False),
            "base": base, "fixed": fixed, "axes": axes, "random": options.get("random"),
            "seed": options.get("seed", 0), "timeout_s": options.get("timeout_s", 1800),
            "engine_max_dsp": options.get("engine_max_dsp"),
            "order": options.get("order", "largest")}
    # The first point must be a valid config: a typo in the base, the fixed
    # sections or an axis ends here, before Ray starts (later points that
    # are not valid are recorded as such).
    from .presets import ConfigError
    from bertforge.rtl.errors import BertforgeError
    try:
        hardware_table(spec, grid_points(spec)[0])
    except (ConfigError, BertforgeError, ValueError, TypeError) as error:
        raise _spec_error(path, str(error).splitlines()[0]) from None
    return spec


def grid_points(spec):
    """The points of the spec: dicts axis -> value, the whole grid or
    ``random`` of its points (seeded), in grid order."""
    names = list(spec["axes"])
    grid = [dict(zip(names, values)) for values in itertools.product(*spec["axes"].values())]
    if spec["random"] and spec["random"] < len(grid):
        chosen = sorted(random.Random(spec["seed"]).sample(range(len(grid)), spec["random"]))
        grid = [grid[i] for i in chosen]
    return grid


def point_key(spec, point, synth, pnr=False, verify=False):
    """The cache key of a point: its workload, hardware table and flags."""
    model = spec["models"][point.get("model", spec["model"])]
    payload = {"model": dataclasses.asdict(model), "seq": spec["seq"], "batch": spec["batch"],
               "training": spec["training"], "base": spec["base"], "fixed": spec["fixed"],
               "point": {k: v for k, v in point.items() if k != "model"}, "synth": bool(synth)}
    if pnr or verify:       # (keys of sweeps without them as before)
        payload.update(pnr=bool(pnr), verify=bool(verify))
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def batch_size(points, synth, cpus):
    """Points per Ray task: one synthesis each; model-only points (tens of
    milliseconds each) in batches, about four per CPU of the cluster, so
    that scheduling costs little against the work, at most 64."""
    if synth:
        return 1
    return max(1, min(64, points // max(1, int(4 * cpus))))


def _design(spec, point):
    """What points that share a design share (engine config and board), or
    ``None`` for a point whose hardware is not valid; and its MACs."""
    try:
        hw = hardware_table(spec, point)
    except Exception:           # recorded by run_point
        return None, 0
    engine = hw.sparse or hw.gemm
    return (json.dumps([type(engine).__name__, engine.to_dict(), point.get("board", DEFAULT_BOARD)],
                       sort_keys=True), engine.rows * engine.cols)


# --- the sweep on Ray -----------------------------------------------------------

def start_ray(address, cpus=None):
    """Connect to Ray; returns whether this call started it (then the caller
    shuts it down)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import logging
    import ray
    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(address="local", num_cpus=cpus or os.cpu_count(), include_dashboard=False,
                     log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise CliError(f"cannot start or reach Ray{f' at {address}' if address else ''}: "
                       f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    return True


def stop_ray():
    """Shut down the Ray this process started. Ray stops the GCS before the
    autoscaler monitor, whose SIGTERM handler then waits for the dead GCS
    until Ray kills it a second later (1.0 of ray.shutdown's 1.3 s); a
    local Ray has no autoscaled nodes for the monitor to clean up, so it is
    killed first."""
    import ray
    try:
        node = getattr(getattr(ray._private, "worker", None), "_global_node", None)
        if node is not None and node.is_head() and hasattr(node, "kill_monitor"):
            node.kill_monitor(check_alive=False)
    except Exception:       # Ray's internals moved: the slower shutdown
        pass
    finally:
        ray.shutdown()


def _check_reachable(address, timeout=5.0):
    """A one-line :class:`CliError` unless ``address`` (``HOST:PORT`` of a
    Ray head's GCS) accepts a TCP connection within ``timeout`` seconds
    (``ray.init`` would retry for a minute or more). Other forms ("auto",
    ``ray://...``) are left to Ray."""
    import socket
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as error:
        raise CliError(f"cannot reach Ray at {address}: {error.strerror or error} "
                       "(is a Ray head running there? ray start --head)") from None


def _progress(done, running, failed, total, skipped, start, finished_here, waiting=0):
    """One line: points done (of them saved before), running (in Ray),
    queued (here), failed, time left (from the points finished here)."""
    elapsed = time.monotonic() - start
    left = total - done
    eta = f"{elapsed / finished_here * left:.0f} s" if finished_here and left else ("0 s" if not left else "?")
    line = (f"sweep: {done}/{total} done ({skipped} saved), {running} running"
            + (f", {waiting} queued" if waiting else "")
            + f", {failed} failed, {elapsed:.0f} s elapsed, ~{eta} left")
    end = "\r" if sys.stderr.isatty() and left else "\n"
    print(line.ljust(90), end=end, file=sys.stderr, flush=True)


class _Stop(KeyboardInterrupt):
    """SIGTERM, as an interrupt (so Ray is shut down and the rows written stay)."""


def _on_sigterm(*_):
    raise _Stop()


def _plan(spec, todo, rows, heavy, size):
    """Ray work of ``todo``: the batches to submit now and, per design, the
    points that wait for its first point (``heavy``: one point a task)."""
    if not heavy:
        now = [[(p, k, rows.get(k)) for p, k in todo[i:i + size]] for i in range(0, len(todo), size)]
        return now, {}
    groups, waiting = {}, {}        # design (or key, if not valid) -> (its first point, MACs)
    for point, key in todo:
        design, macs = _design(spec, point)
        item = (point, key, rows.get(key))
        if design in groups:
            waiting.setdefault(design, []).append([item])
        else:
            groups[design or key] = ([item], macs)
    # the largest first (the shortest sweep), or the smallest (the most
    # designs done when a sweep is stopped early)
    sign = 1 if spec.get("order") == "smallest" else -1
    return [items for items, _ in sorted(groups.values(), key=lambda g: sign * g[1])], waiting


def sweep(spec, out_dir, *, synth=False, pnr=False, verify=False, address=None, cache=None,
          builds=None, cpus=None):
    """Run the spec's points on Ray, writing results as they finish;
    returns all rows (saved and new), by key. ``cache``: the synthesis
    cache directory; ``builds``: the place-and-route builds'; ``cpus``: of
    a Ray started here (default all)."""
    import ray
    if address:
        _check_reachable(address)           # before anything is written
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = load_rows(out)
    points = grid_points(spec)
    keys = [point_key(spec, p, synth or pnr, pnr, verify) for p in points]
    # Synthesized points done before go to Ray again: the task elaborates the
    # design and reuses the saved counts only if its RTLIL hash and the tool
    # versions are unchanged (an RTL change is synthesized again).
    todo = [(p, k) for p, k in zip(points, keys)
            if rows.get(k, {}).get("status") not in DONE or rows[k].get("rtlil_sha256")]
    skipped = len(points) - len(todo)
    if not todo:
        _progress(skipped, 0, sum(rows[k]["status"] != "ok" for k in keys), len(points), skipped,
                  time.monotonic(), 0)
        return {k: rows[k] for k in keys}
    heavy = synth or pnr or verify
    options = {"synth": synth, "pnr": pnr, "verify": verify,
               "cache": str(cache) if cache else None, "builds": str(builds) if builds else None}
    workload = f"{spec['model'] if 'model' not in spec['axes'] else 'models'}, seq {spec['seq']}, " \
               f"batch {spec['batch']}" + (", training" if spec["training"] else "")
    main_thread = threading.current_thread() is threading.main_thread()
    previous_handler = signal.getsignal(signal.SIGTERM)
    started = False
    writer = TableWriter(out, rows)
    try:
        started = start_ray(address, cpus)
        if main_thread:         # after ray.init, which sets a handler of its own
            signal.signal(signal.SIGTERM, _on_sigterm)
        cpus_needed, memory = PNR_TASK if pnr else SYNTH_TASK if heavy else ANALYZE_TASK
        task = ray.remote(run_points).options(num_cpus=cpus_needed, memory=memory, max_retries=0)
        size = batch_size(len(todo), heavy, ray.cluster_resources().get("CPU", 1))
        now, waiting = _plan(spec, todo, rows, heavy, size)
        # Tool points go to Ray one per free CPU, the points that waited for a
        # design before new designs (they reuse its synthesis: minutes, not
        # an hour); model-only batches all at once.
        queue = collections.deque((items, options) for items in now)
        ready_first = collections.deque()
        limit = max(1, int(ray.cluster_resources().get("CPU", 1))) if heavy else len(now)
        pending = {}

        def submit():
            while len(pending) < limit and (ready_first or queue):
                items, opts = (ready_first or queue).popleft()
                pending[task.remote(spec, items, opts)] = items
        submit()
        start = time.monotonic()
        done_here, shown = 0, 0.0
        todo_keys = {k for _, k in todo}
        failed = sum(1 for k in keys if k not in todo_keys and rows[k]["status"] != "ok")

        def show():
            queued = sum(len(items) for items, _ in [*queue, *ready_first])
            _progress(skipped + done_here, sum(map(len, pending.values())), failed, len(points),
                      skipped, start, done_here, queued + sum(map(len, waiting.values())))
        show()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            if not ready:
                continue
            items = pending.pop(ready[0])
            try:
                finished = ray.get(ready[0])
            except Exception as error:          # the worker died (killed, out of memory)
                reason = f"the Ray task failed: {str(error).strip().splitlines()[-1][:300]}"
                finished = [{"point": point_name(p), "key": k, **p, "status": "error",
                             "reason": reason} for p, k, _ in items]
            for row in finished:
                row["workload"] = workload
            writer.add(finished)
            failed += sum(row["status"] != "ok" for row in finished)
            done_here += len(finished)
            if heavy and len(items) == 1:      # the points that waited for this design
                first = finished[0]
                more = options if first["status"] != "timeout" else dict(
                    options, timed_out=(first["point"], first["reason"]))
                for batch in waiting.pop(_design(spec, items[0][0])[0], []):
                    ready_first.append((batch, more))
            submit()
            if not pending or time.monotonic() - shown > 0.5:
                shown = time.monotonic()
                show()
    finally:
        writer.flush()
        if main_thread:
            signal.signal(signal.SIGTERM, previous_handler)
        if started:
            stop_ray()
    return {k: rows[k] for k in keys if k in rows}


# --- the command line -----------------------------------------------------------

#: The flags of ``bertforge sweep``: name -> (argparse keywords, help).
FLAGS = {
    "--spec": ({"metavar": "SWEEP.toml"},
               "the sweep spec (examples: generators/configs/sweep_*.toml)"),
    "--out": ({"metavar": "DIR"}, "results directory (default sweep-SPEC; a rerun skips points done)"),
    "--address": ({"metavar": "ADDR"},
                  "an existing Ray cluster, HOST:PORT (default: start Ray on this machine)"),
    "--synth": ({"action": "store_true"},
                "yosys synthesis of each point's engine and units for its board"),
    "--pnr": ({"action": "store_true"}, "also place and route each point's GEMM engine on its "
                                        "board (nextpnr): Fmax and latency at Fmax"),
    "--verify": ({"action": "store_true"},
                 "run each point's engine in Verilator against the golden model"),
    "--cache": ({"metavar": "DIR"}, "synthesis cache shared by sweeps (default $BERTFORGE_CACHE/sweep)"),
    "--builds": ({"metavar": "DIR"}, "place-and-route builds, reused when the design matches "
                                     "(default CACHE/builds; a `bench boards --out` directory "
                                     "lends its builds)"),
    "--report": ({"metavar": "DIR"}, "redraw pareto.png and print the front from DIR's saved results"),
}


def add_parser(commands):
    sub = commands.add_parser("sweep", help="design-space sweep on Ray: analyze (synthesize, "
                                            "place and route, verify) every point of a spec; "
                                            "Pareto front")
    for flag, (keywords, text) in FLAGS.items():
        sub.add_argument(flag, help=text, **keywords)


def run_sweep(args):
    if args.report:
        if args.spec:
            raise CliError("give --spec (run a sweep) or --report DIR (redraw one), not both")
        write_report(args.report)
        print(f"wrote {Path(args.report) / 'pareto.png'}", file=sys.stderr)
        return 0
    if not args.spec:
        raise CliError("sweep needs --spec SWEEP.toml (or --report DIR)")
    spec = load_spec(args.spec)
    out = Path(args.out or f"sweep-{Path(args.spec).stem}")
    from bertforge.sim.paths import cache_root
    cache = Path(args.cache) if args.cache else cache_root("sweep")
    start = time.monotonic()
    rows = sweep(spec, out, synth=args.synth, pnr=args.pnr, verify=args.verify,
                 address=args.address, cache=cache, builds=args.builds)
    write_report(out, rows)
    counts = collections.Counter(row["status"] for row in rows.values())
    print(f"{len(rows)} points in {time.monotonic() - start:.1f} s: "
          + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())), file=sys.stderr)
    print(f"wrote {out}/sweep.jsonl, sweep.csv, sweep.json and pareto.png", file=sys.stderr)
    return 0
