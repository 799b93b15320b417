"""The results of a ``bertforge sweep``: ``sweep.jsonl`` (one line per
finished point, appended at once), ``sweep.csv`` and ``sweep.json``
(rewritten atomically), ``pareto.png`` and the Pareto front."""

import csv
import io
import json
import os
import time
from pathlib import Path

from .analyze import CLASSES
from .cli_common import CliError
from .sweep_point import AXES, atomic_text, class_column

__all__ = ["CSV_FIELDS", "load_rows", "append_rows", "write_tables", "pareto_front",
           "write_report"]

CSV_FIELDS = ["point", "status", "reason", *AXES, "total_cycles", "layer_ms", "model_ms",
              *(class_column(c) for c in CLASSES), "macs_per_cycle", "design", "luts", "ffs",
              "dsps", "brams", "gemm_luts", "gemm_dsps", "units_luts", "units_dsps",
              "engine_max_dsp", "fits", "fill", "over", "fmax_mhz", "timing_met",
              "layer_ms_fmax", "pnr_luts", "pnr_dsps", "verify", "verify_cycles",
              "verify_model_cycles", "seconds", "reused", "rtlil_sha256", "tools", "key"]
#: Seconds between rewrites of sweep.csv / sweep.json while a sweep runs
#: (sweep.jsonl gets every point at once).
TABLE_INTERVAL = 2.0


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


def append_rows(out, new, rows, *, tables=True):
    """Append ``new`` rows to ``out/sweep.jsonl`` (flushed to disk before
    returning) and to ``rows`` (by key); with ``tables``, rewrite
    sweep.csv and sweep.json."""
    path = Path(out) / "sweep.jsonl"
    cut = path.exists() and path.stat().st_size and path.read_bytes()[-1:] != b"\n"
    with open(path, "a") as f:
        # after a line cut short (an interrupted write), start a new line
        f.write(("\n" if cut else "") + "".join(json.dumps(r, sort_keys=True) + "\n" for r in new))
        f.flush()
        os.fsync(f.fileno())
    for row in new:
        rows[row["key"]] = row
    if tables:
        write_tables(out, rows)


def write_tables(out, rows):
    """Rewrite ``out/sweep.json`` and ``out/sweep.csv`` from ``rows``."""
    out = Path(out)
    ordered = list(rows.values())
    atomic_text(out / "sweep.json", json.dumps({"points": ordered}, indent=1, sort_keys=True)
                + "\n")
    text = io.StringIO()
    writer = csv.DictWriter(text, CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(ordered)
    atomic_text(out / "sweep.csv", text.getvalue())


class TableWriter:
    """Rewrites the tables at most every :data:`TABLE_INTERVAL` seconds
    while points arrive (1,000 points would otherwise rewrite them 1,000
    times), and once more at :meth:`flush`."""

    def __init__(self, out, rows):
        self.out, self.rows, self.last, self.dirty = out, rows, 0.0, False

    def add(self, new):
        now = time.monotonic()
        due = now - self.last >= TABLE_INTERVAL
        append_rows(self.out, new, self.rows, tables=due)
        self.dirty = not due
        if due:
            self.last = now

    def flush(self):
        if self.dirty:
            write_tables(self.out, self.rows)
            self.dirty = False


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


def _axes_of(rows):
    if any(r.get("luts") is not None for r in rows):
        return [("luts", "LUTs (yosys: engine + units, before place and route)"),
                ("dsps", "DSPs (multiplier blocks)")]
    return [("macs_per_cycle", "MACs per cycle (rows x cols)")]


def write_report(out_dir, rows=None):
    """``pareto.png`` (and the fronts on stdout) from ``rows`` or the saved
    results in ``out_dir``: one row of plots per workload model, latency per
    layer (at Fmax where the points were placed and routed) against LUTs and
    DSPs. Returns ``{model: {x: front rows}}``."""
    out = Path(out_dir)
    rows = list((rows or load_rows(out)).values())
    if not rows:
        raise CliError(f"no sweep results in {out} (sweep.jsonl is missing or empty)")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xs = _axes_of(rows)
    models = list(dict.fromkeys(r.get("model", "?") for r in rows))
    y = "layer_ms_fmax" if any(r.get("layer_ms_fmax") is not None for r in rows) else "layer_ms"
    ylabel = ("latency per BERT layer at Fmax (ms)" if y == "layer_ms_fmax"
              else "latency per BERT layer (ms)")
    fig, axes = plt.subplots(len(models), len(xs), figsize=(6.5 * len(xs), 4.8 * len(models)),
                             squeeze=False)
    synthesized = xs[0][0] == "luts"
    fronts = {}
    for line, model in zip(axes, models):
        measured = [r for r in rows if r.get("model", "?") == model and r.get(y) is not None]
        fronts[model] = {}
        for ax, (x, label) in zip(line, xs):
            fitting = [r for r in measured if r["status"] == "ok" and r.get(x) is not None]
            greyed = [r for r in measured if r["status"] != "ok" and r.get(x) is not None]
            front = sorted((fitting[i] for i in pareto_front(fitting, x, y)), key=lambda r: r[x])
            fronts[model][x] = front
            ax.scatter([r[x] for r in greyed], [r[y] for r in greyed], color="#bbbbbb",
                       label="does not fit / failed" if synthesized else "failed", s=22)
            ax.scatter([r[x] for r in fitting], [r[y] for r in fitting], color="#4c72b0",
                       label="fits" if synthesized else "ok", s=22)
            if front:
                ax.plot([r[x] for r in front], [r[y] for r in front], "-o", color="#c44e52",
                        label="Pareto front", ms=7, mfc="none")
                for r in front:
                    ax.annotate(r["point"].removeprefix(f"{model}-"), (r[x], r[y]), fontsize=6,
                                textcoords="offset points", xytext=(4, 4))
            ax.set_xlabel(label)
            ax.set_ylabel(ylabel)
            ax.set_title(model, fontsize=9)
            if fitting or greyed:
                ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    first = rows[0]
    fig.suptitle(f"bertforge sweep: {len(rows)} points ({sum(r['status'] == 'ok' for r in rows)} ok)"
                 + (f", {first['workload']}" if first.get("workload") else ""))
    fig.tight_layout()
    fig.savefig(out / "pareto.png.tmp.png", dpi=110)
    plt.close(fig)
    (out / "pareto.png.tmp.png").replace(out / "pareto.png")
    x = xs[0][0]
    for model in models:
        print(f"Pareto front of {model} (latency per layer vs {x}):")
        for r in fronts[model][x]:
            print(f"  {r['point']:<44} {r[y]:10.4f} ms  {x} {r[x]}")
    return fronts
