"""Benchmarks: measured against modelled and ideal cycles, written as
``bench.json`` and a Markdown table ``bench.md``."""

import json
import sys
import time
from pathlib import Path

import numpy as np

from bertforge.rtl.systolic import SystolicConfig
from .emit import emit_verilog
from .simulate import random_systolic_tiles, simulate_systolic

__all__ = ["bench_systolic", "write_results"]


def write_results(out_dir, name, rows, columns, title, notes=()):
    """Write ``bench.json`` (all fields) and ``bench.md`` (``columns``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json.tmp").write_text(json.dumps({"benchmark": name, "results": rows}, indent=2) + "\n")
    (out / "bench.json.tmp").replace(out / "bench.json")
    lines = [f"# {title}", ""]
    lines.append("| " + " | ".join(header for header, _ in columns) + " |")
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        lines.append("| " + " | ".join(fmt(row) for _, fmt in columns) + " |")
    lines += [""] + [f"- {note}" for note in notes]
    (out / "bench.md.tmp").write_text("\n".join(lines) + "\n")
    (out / "bench.md.tmp").replace(out / "bench.md")
    print("\n".join(lines))
    print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}", file=sys.stderr)


def bench_systolic(out_dir, *, sizes=(4, 8, 16), ks=(64, 768), tiles=16, emit_only=(32,)):
    """Arrays ``sizes`` x ``sizes`` in both dataflows, ``tiles`` random tiles
    of each K back to back; plus emission time alone for ``emit_only`` sizes."""
    rows = []
    runs = [(n, df, k) for n in sizes for df in ("os", "ws") for k in ks]
    for index, (n, dataflow, k) in enumerate(runs, 1):
        config = SystolicConfig(rows=n, cols=n, dataflow=dataflow)
        print(f"[{index}/{len(runs)}] {config.name} K={k} x {tiles} tiles", file=sys.stderr, flush=True)
        start = time.perf_counter()
        emit_verilog(config)
        emit_seconds = time.perf_counter() - start
        data = random_systolic_tiles(config, k, tiles, np.random.default_rng(index))
        result = simulate_systolic(config, data, seed=index, quiet=False)
        rows.append({
            "design": config.name, "rows": n, "cols": n, "dataflow": dataflow, "k": k,
            "tiles": tiles, "cycles": result["cycles"], "model_cycles": result["model_cycles"],
            "ideal_cycles": result["ideal_cycles"], "utilization": result["utilization"],
            "match": result["match"], "sim_cycles_per_second": result["sim_cycles_per_second"],
            "emit_seconds": emit_seconds})
    for n in emit_only:
        for dataflow in ("os", "ws"):
            config = SystolicConfig(rows=n, cols=n, dataflow=dataflow)
            print(f"emitting {config.name}", file=sys.stderr, flush=True)
            start = time.perf_counter()
            emit_verilog(config)
            rows.append({"design": config.name, "rows": n, "cols": n, "dataflow": dataflow,
                         "emit_seconds": time.perf_counter() - start})

    def opt(key, fmt):
        return lambda row: fmt.format(row[key]) if key in row else "-"
    columns = [("design", opt("design", "{}")), ("K", opt("k", "{}")), ("tiles", opt("tiles", "{}")),
               ("cycles", opt("cycles", "{}")), ("model", opt("model_cycles", "{}")),
               ("ideal", opt("ideal_cycles", "{}")), ("utilization", opt("utilization", "{:.2%}")),
               ("match", opt("match", "{}")), ("sim cycles/s", opt("sim_cycles_per_second", "{:,.0f}")),
               ("emit s", opt("emit_seconds", "{:.2f}"))]
    write_results(out_dir, "systolic", rows, columns, "bertforge bench systolic", notes=[
        "cycles: measured in Verilator on the emitted Verilog, first input handshake to last output handshake",
        "model: bertforge.sim.systolic_cycles.systolic_cycles; ideal: tiles x K",
        "sim cycles/s: simulated cycles per wall second of the cocotb run (build excluded)",
        "emit s: seconds to elaborate and emit the Verilog"])
    return rows
