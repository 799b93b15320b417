"""``bertforge bench sparse``: the N:M sparse array on BERT-base's FFN GEMMs
(scaled to simulation size) at 1:4, 2:4, 2:8, 4:8, 1:8 and in dense mode on
the same 8x8 array with m_max 8 (as array tiles driven by the testbench, and
as commands of the sparse GEMM engine), and its area against the dense
:class:`~bertforge.rtl.systolic.SystolicArray` of the same size (yosys
``synth_ecp5`` cell counts)."""

import sys
import time

import numpy as np

from bertforge.rtl.sparse import SparseArray, SparseConfig
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim.sparse_golden import prune_nm
from .bench import CYCLE_COLUMNS, add_bench_out, columns, synth_ecp5_counts, write_results
from .emit import cached_verilog
from .sparse_engine_sim import layout_sparse_problems, simulate_sparse_engine
from .sparse_sim import simulate_sparse_product

__all__ = ["PATTERNS", "SHAPES", "bench_sparse"]

#: Patterns benchmarked; (1, 1) is dense mode (K beats per tile, as the dense array).
PATTERNS = [(1, 1), (2, 4), (1, 4), (4, 8), (2, 8), (1, 8)]

#: BERT-base FFN GEMMs (seq 128, hidden 768, FFN 3072) with M and N divided by 4
#: and 32: K, the dimension sparsity shortens, keeps its real length.
SHAPES = [("ffn up /4,/32", 32, 768, 96), ("ffn down /4,/32", 32, 3072, 24)]


def _row(config, shape, n, m, result, dense, start, **extra):
    """The result row of GEMM ``shape`` at ``n:m`` on ``config``: ``dense``
    is the shape's dense-mode cycles, ``start`` when the run began; ``extra``
    fields follow ``model_cycles``."""
    name, m_rows, k, n_cols = shape
    speedup = dense / result["cycles"]
    return {"design": config.name, "gemm": name, "m": m_rows, "k": k, "n": n_cols,
            "pattern": "dense" if n == m else f"{n}:{m}", "cycles": result["cycles"],
            "model_cycles": result["model_cycles"], **extra, "ideal_cycles": result["ideal_cycles"],
            "utilization": result["utilization"], "match": result["match"],
            "speedup_vs_dense": speedup, "target_speedup": 0.95 * m / n,
            "meets_target": speedup >= 0.95 * m / n,
            "sim_cycles_per_second": result["sim_cycles_per_second"],
            "wall_seconds": time.perf_counter() - start}


def bench_sparse(out_dir, *, rows=8, cols=8, m_max=8, shapes=SHAPES, synth=True, engine=None):
    """Every shape at every pattern on one ``rows`` x ``cols`` array; speedup
    is dense-mode cycles over the pattern's, both measured. ``engine`` (a
    :class:`~bertforge.rtl.sparse_engine.SparseEngineConfig` of the same
    array, or None) runs the first shape again as engine commands. With
    ``synth``, one area row each for the sparse array and the dense OS array
    of the same size. Returns the result rows (also in ``bench.json``)."""
    config = SparseConfig(rows=rows, cols=cols, m_max=m_max)
    results = []
    runs = [(shape, pattern) for shape in shapes for pattern in PATTERNS]
    dense_cycles = {}
    for index, ((name, m_rows, k, n_cols), (n, m)) in enumerate(runs, 1):
        print(f"[{index}/{len(runs)}] {config.name} {name} {m_rows}x{k}x{n_cols} at {n}:{m}",
              file=sys.stderr, flush=True)
        rng = np.random.default_rng(index)
        a = rng.integers(-128, 128, (m_rows, k))
        b = prune_nm(rng.integers(-128, 128, (k, n_cols)), n, m)
        start = time.perf_counter()
        result = simulate_sparse_product(config, a, b, n, m, seed=index, quiet=False)
        if (n, m) == (1, 1):
            dense_cycles[name] = result["cycles"]
        results.append(_row(config, (name, m_rows, k, n_cols), n, m, result, dense_cycles[name],
                            start))
    if engine is not None:
        name, m_rows, k, n_cols = shapes[0]
        dense = None
        for index, (n, m) in enumerate(PATTERNS, 1):
            print(f"[engine {index}/{len(PATTERNS)}] {engine.name} {name} at {n}:{m}",
                  file=sys.stderr, flush=True)
            image, commands = layout_sparse_problems(
                engine, [dict(m=m_rows, k=k, n=n_cols, pat_n=n, pat_m=m)], np.random.default_rng(index))
            start = time.perf_counter()
            result = simulate_sparse_engine(engine, image, commands, seed=index, quiet=False)
            dense = result["cycles"] if (n, m) == (1, 1) else dense
            results.append(_row(engine, shapes[0], n, m, result, dense, start,
                                model_exact=result["model_exact"], bound=result["bound"]))
    notes = [
        "cycles: measured in Verilator on the emitted Verilog, first input handshake to last "
        "output handshake; the GEMM runs as array tiles back to back driven by the testbench",
        "model: bertforge.sim.sparse_cycles; ideal: compressed beats (tiles x ceil(K/M) x N)",
        "sparse_engine_* rows: one command of the sparse GEMM engine in its HDL harness (memory "
        "latency 1, one beat per cycle), first command handshake to completion; model: "
        "bertforge.sim.sparse_engine_cycles; ideal: compressed MACs / (rows x cols)",
        "speedup: dense-mode cycles (1:1 on the same array, K beats per tile) / the pattern's; "
        "target 0.95 x M/N"]
    if synth:
        dense_config = SystolicConfig(rows=rows, cols=cols, dataflow="os")
        area = {}
        for label, cfg, make in (("sparse", config, SparseArray), ("dense", dense_config, SystolicArray)):
            print(f"synthesizing {cfg.name} for ECP5 (yosys synth_ecp5)...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            area[label] = synth_ecp5_counts(cached_verilog(cfg, make), cfg.name)
            area[label]["seconds"] = time.perf_counter() - start
        for label, cfg in (("sparse", config), ("dense", dense_config)):
            counts = area[label]
            results.append({
                "design": cfg.name, "gemm": "area (synth_ecp5)", "cells": counts["cells"],
                "lut4": counts["LUT4"], "ff": counts.get("TRELLIS_FF", 0),
                "mult18": counts.get("MULT18X18D", 0),
                "lut_ratio": counts["LUT4"] / area["dense"]["LUT4"],
                "cell_ratio": counts["cells"] / area["dense"]["cells"]})
        notes.append("area: yosys synth_ecp5 stat of each array alone; ratios against the dense "
                     f"{dense_config.name}")
    table = columns("design", "GEMM", "M x K x N", ("pattern", "pattern", "{}"), *CYCLE_COLUMNS,
                    "bound", "match", ("speedup", "speedup_vs_dense", "{:.3f}"),
                    ("target", "target_speedup", "{:.3f}"), ("LUT4", "lut4", "{}"),
                    ("FF", "ff", "{}"), ("MULT18", "mult18", "{}"), ("cells", "cells", "{}"),
                    ("LUT ratio", "lut_ratio", "{:.2f}x"))
    write_results(out_dir, "sparse", results, table, "bertforge bench sparse", notes=notes)
    return results


def add_bench_args(sub):
    add_bench_out(sub, "sparse", synth="skip the yosys area comparison")
    sub.add_argument("--no-engine", action="store_true", help="skip the sparse GEMM engine runs")


def bench(args):
    engine = None
    if not args.no_engine:
        from bertforge.rtl.sparse_engine import SparseEngineConfig
        engine = SparseEngineConfig(rows=8, cols=8, m_max=8, m_tile=16, addr_width=22)
    bench_sparse(args.out, synth=not args.no_synth, engine=engine)
    return 0
