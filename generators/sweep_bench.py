"""``bertforge bench sweep``: how ``bertforge sweep`` scales on Ray.

1. Synthesis points per hour with Ray on 1 CPU and on 2 CPUs: the same
   points (distinct GEMM engines with the tiny model's units, each
   synthesized in full: no synthesis cache), one Ray started per run.
2. Ray's overhead on the model-only grid of 1,000 points, for BERT-base
   (the workload of ``configs/sweep_models.toml``, about 0.1 s a point) and
   for MiniLM (about 0.03 s a point): the sweep's wall time against the
   work inside the points (the seconds
   :func:`~bertforge.generators.sweep_point.run_point` measures), with the
   CPUs Ray has: ``overhead = 1 - work / (CPUs x wall)``, everything that is
   not point work (starting and stopping Ray and its workers, scheduling,
   moving specs and rows, the driver writing results, an idle tail). Points
   go to Ray in batches (:func:`~bertforge.generators.sweep.batch_size`:
   about four tasks per CPU, at most 64 points a task).

Writes ``bench.json``, ``bench.md`` and ``sweep_bench.png``.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

from .bench import add_bench_out, write_results

__all__ = ["bench_sweep", "add_bench_args", "bench"]

#: The synthesis points of the scaling runs (tiny.toml, short memory words).
SYNTH_SPEC = """
base = "tiny.toml"
[workload]
model = "tiny"
seq = 32
[axes]
array = {arrays}
[gemm]
mem_width = 32
k_chunk = 16
[softmax]
l_max = 32
"""
#: The model-only grid: 5 x 2 x 5 x 4 x 5 = 1,000 points of a model.
GRID_SPEC = """
base = "default.toml"
[workload]
model = "{model}"
seq = 128
[axes]
array = ["8x8", "16x16", "32x32", "16x32", "32x16"]
dataflow = ["os", "ws"]
lanes = [1, 2, 4, 8, 16]
mem_bytes_per_cycle = [8, 16, 32, 64]
clock_mhz = [100, 150, 200, 250, 300]
[gemm]
mem_width = 256
"""
ARRAYS = ["2x2", "2x4", "4x2", "4x4"]
#: The grid's models: run name -> preset.
GRID_MODELS = {"bert-base-1000": "bert-base", "minilm-1000": "minilm-l6-h384"}


def _run(text, work, name, *, synth, cpus):
    from .sweep import batch_size, load_spec, sweep
    spec_path = Path(work) / f"{name}.toml"
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    start = time.monotonic()
    rows = sweep(spec, Path(work) / name, synth=synth, cpus=cpus)
    wall = time.monotonic() - start
    points = len(rows)
    busy = sum(r.get("seconds", 0.0) for r in rows.values())
    return {"run": name, "cpus": cpus, "points": points, "synth": synth,
            "ok": sum(r["status"] == "ok" for r in rows.values()),
            "wall_seconds": wall, "work_seconds": busy,
            "points_per_hour": points / wall * 3600,
            "overhead": 1 - busy / (cpus * wall),
            "points_per_task": batch_size(points, synth, cpus)}


def _ray_seconds(cpus):
    """Seconds to start Ray with ``cpus`` CPUs, and to stop it."""
    from .sweep import start_ray, stop_ray
    start = time.monotonic()
    if not start_ray(None, cpus):
        raise RuntimeError("Ray was already running: its start-up cannot be timed")
    ready = time.monotonic() - start
    stop_ray()
    return ready, time.monotonic() - start - ready


def bench_sweep(out_dir, *, arrays=ARRAYS, grid=True):
    work = tempfile.mkdtemp(prefix="bertforge-bench-sweep-")
    rows = []
    text = SYNTH_SPEC.format(arrays="[" + ", ".join(f'"{a}"' for a in arrays) + "]")
    for cpus in (1, 2):
        print(f"synthesis points on {cpus} CPU(s)...", file=sys.stderr, flush=True)
        rows.append(_run(text, work, f"synth-{cpus}cpu", synth=True, cpus=cpus))
    speedup = rows[1]["points_per_hour"] / rows[0]["points_per_hour"]
    rows[1]["speedup"] = speedup
    for name, model in GRID_MODELS.items() if grid else ():
        print(f"1,000 model-only points of {model} on 2 CPUs...", file=sys.stderr, flush=True)
        row = _run(GRID_SPEC.format(model=model), work, name, synth=False, cpus=2)
        row["ray_start_seconds"], row["ray_stop_seconds"] = _ray_seconds(2)
        rows.append(row)
    _plot(rows, Path(out_dir))
    table = [("run", lambda r: r["run"]), ("CPUs", lambda r: str(r["cpus"])),
             ("points", lambda r: str(r["points"])), ("ok", lambda r: str(r["ok"])),
             ("points/task", lambda r: str(r["points_per_task"])),
             ("wall s", lambda r: f"{r['wall_seconds']:.1f}"),
             ("work s", lambda r: f"{r['work_seconds']:.1f}"),
             ("points/hour", lambda r: f"{r['points_per_hour']:,.0f}"),
             ("speedup", lambda r: f"{r['speedup']:.2f}x" if "speedup" in r else "-"),
             ("overhead", lambda r: f"{r['overhead']:.1%}"),
             ("Ray start s", lambda r: f"{r['ray_start_seconds']:.1f}" if "ray_start_seconds" in r else "-"),
             ("Ray stop s", lambda r: f"{r['ray_stop_seconds']:.1f}" if "ray_stop_seconds" in r else "-")]
    load = os.getloadavg()[0]
    write_results(out_dir, "sweep", rows, table, "bertforge bench sweep", notes=[
        f"synth-Ncpu: {len(arrays)} GEMM engines ({', '.join(arrays)}, tiny.toml's units), "
        "yosys synth_ecp5 of engine + softmax + layernorm + GELU per point, no synthesis "
        "cache, Ray started with N CPUs; wall includes starting Ray",
        "points/hour = points / wall; speedup: 2 CPUs over 1 (target >= 1.8x)",
        "bert-base-1000, minilm-1000: the model at seq 128 (bert-base: the workload of "
        "sweep_models.toml), 1,000 analyze-only points in batches of points/task (about "
        "4 tasks per CPU, at most 64 points each)",
        "overhead = 1 - work / (CPUs x wall): starting and stopping Ray and its workers, "
        "scheduling, moving specs and rows, writing results, the idle tail (target < 10%); "
        "Ray start/stop s: an empty Ray started and stopped after the grid",
        f"load average at the end: {load:.1f} on {os.cpu_count()} CPUs (a shared machine: "
        "other users' work slows both runs)"])
    return rows


def _plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)
    synth = [r for r in rows if r["synth"]]
    grid = [r for r in rows if not r["synth"]]
    fig, axes = plt.subplots(1, 1 + bool(grid), figsize=(5.5 * (1 + bool(grid)), 4), squeeze=False)
    ax = axes[0][0]
    ax.bar([f"{r['cpus']} CPU" for r in synth], [r["points_per_hour"] for r in synth],
           color="#4c72b0")
    ax.axhline(synth[0]["points_per_hour"] * 1.8, color="#c44e52", ls="--", label="1.8x of 1 CPU")
    ax.set_ylabel("synthesis points per hour")
    ax.legend(fontsize=8)
    if grid:
        ax = axes[0][1]
        names = [f"{r['run']}\n(overhead {r['overhead']:.1%})" for r in grid]
        ideal = [r["work_seconds"] / r["cpus"] for r in grid]
        ax.barh(names, ideal, color="#4c72b0", label="point work / CPUs")
        ax.barh(names, [r["wall_seconds"] - i for r, i in zip(grid, ideal)], left=ideal,
                color="#dd8452", label="overhead")
        ax.set_xlabel("wall seconds (1,000 model-only points, 2 CPUs)")
        ax.invert_yaxis()
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "sweep_bench.png", dpi=110)
    plt.close(fig)


def add_bench_args(sub):
    add_bench_out(sub, "sweep")
    sub.add_argument("--arrays", default=",".join(ARRAYS), metavar="RxC,...",
                     help=f"the synthesis points' GEMM arrays (default {','.join(ARRAYS)}; at "
                          "least 2, so that 2 CPUs have work)")
    sub.add_argument("--no-grid", action="store_true",
                     help="leave out the 1,000-point model-only grids")


def bench(args):
    from .cli_common import CliError
    arrays = [a.strip() for a in args.arrays.split(",") if a.strip()]
    bad = [a for a in arrays if not (a.partition("x")[0].isdigit() and a.partition("x")[2].isdigit())]
    if bad or len(arrays) < 2:
        raise CliError(f"--arrays takes 2 or more RxC sizes like 2x2,4x4, not {args.arrays!r}")
    bench_sweep(args.out, arrays=arrays, grid=not args.no_grid)
    return 0
