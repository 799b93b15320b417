"""``bertforge bench norm``: Softmax, LayerNorm and GELU at BERT-base sizes
(softmax rows of 128, layernorm width 768, GELU over 128 x 3072) with 1, 4
and 16 lanes, in one table."""

from .bench import add_bench_out, columns, measured, write_results
from .cli_common import int_list


def add_bench_args(sub):
    add_bench_out(sub, "norm", ("--softmax-rows", 512, 1 << 16, "rows of one run",
                                "softmax rows of 128 to run"), synth="skip the ECP5 synthesis counts")
    sub.add_argument("--lanes", default="1,4,16", help="comma-separated lane counts (default 1,4,16)")


def _common(row, block, error_unit, pace_key):
    """One table row from a block's bench row."""
    return {
        "block": block, "design": row["design"], "lanes": row["lanes"],
        "elements": row["elements"], **measured(row),
        "elements_per_cycle": row["elements_per_cycle"],
        "latency": row.get("latency", row.get("latency_cycles")), "match": row["match"],
        "max_abs_err": row["max_abs_err"], "mean_abs_err": row["mean_abs_err"],
        "error_unit": error_unit, "pace_vs_gemm16": row.get(pace_key),
        "ecp5_cells": row.get("ecp5_cells"), "ecp5_luts": row.get("ecp5_luts"),
        "details": row,
    }


def bench_norm(out_dir, *, lanes=(1, 4, 16), synth=True, softmax_rows=512):
    from .gelu_sim import bench_gelu
    from .layernorm_sim import bench_layernorm
    from .softmax_sim import bench_softmax
    rows = []
    rows += [_common(r, "softmax", "probability", "ratio_to_gemm16_layer")
             for r in bench_softmax(None, lanes, rows=softmax_rows, synth=synth, write=False)]
    rows += [_common(r, "layernorm", "int8 LSB", "pace_ratio")
             for r in bench_layernorm(None, lanes=lanes, synth=synth, write=False)]
    rows += [_common(r, "gelu", "real units", "pace_ratio")
             for r in bench_gelu(None, lanes=lanes, synth=synth, write=False)]

    table = columns(("block", "block", "{}"), ("lanes", "lanes", "{}"),
                    ("elements", "elements", "{}"), "cycles", "model", "utilization", "elem/cycle",
                    "latency", ("max err", "max_abs_err", "{:.4g}"),
                    ("mean err", "mean_abs_err", "{:.4g}"), ("error unit", "error_unit", "{}"),
                    "match", ("time vs 16x16 GEMM", "pace_vs_gemm16", "{:.2%}"), "ECP5 cells",
                    ("ECP5 LUT4", "ecp5_luts", "{}"))
    write_results(out_dir, "norm", rows, table, "bertforge bench norm", notes=[
        "BERT-base, sequence 128: softmax rows of 128 (int32 in, uint8 out), LayerNorm(x + r) over "
        "128 x 768 (int16 in, int8 out), GELU over 128 x 3072 (int8 in/out)",
        "cycles measured in Verilator on the emitted Verilog; model = the block's cycle model",
        "time vs 16x16 GEMM: the unit's cycles for one BERT-base layer (softmax: 12 heads x 128 rows; "
        "layernorm: both of the layer's) over the layer's GEMM cycles on a 16x16 array at 100% "
        "utilization; under 100% means the unit keeps pace",
        "errors against float references: softmax in probability, layernorm in int8 output LSBs, "
        "GELU in real units (int8 output, LSB 1/16)"])
    return rows


def bench(args):
    lanes = int_list("--lanes", args.lanes, 1, 64, "lane counts")
    bench_norm(args.out, lanes=lanes, synth=not args.no_synth, softmax_rows=args.softmax_rows)
    return 0
