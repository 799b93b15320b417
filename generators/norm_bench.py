"""``bertforge bench norm``: Softmax, LayerNorm and GELU at BERT-base sizes
(softmax rows of 128, layernorm width 768, GELU over 128 x 3072) with 1, 4
and 16 lanes, in one table."""

from .bench import column, write_results
from .cli_common import bounded_int, int_list


def add_bench_args(sub):
    sub.add_argument("--out", default="bench-norm", metavar="DIR")
    sub.add_argument("--lanes", default="1,4,16", help="comma-separated lane counts (default 1,4,16)")
    sub.add_argument("--no-synth", action="store_true", help="skip the ECP5 synthesis counts")
    sub.add_argument("--softmax-rows", type=bounded_int(1 << 16, "rows of one run"), default=512,
                     help="softmax rows of 128 to run (default 512)")


def _common(row, block, error_unit, pace_key):
    """One table row from a block's bench row."""
    return {
        "block": block, "design": row["design"], "lanes": row["lanes"],
        "elements": row["elements"], "cycles": row["cycles"], "model_cycles": row["model_cycles"],
        "ideal_cycles": row["ideal_cycles"], "utilization": row["utilization"],
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

    columns = [("block", column("block", "{}")), ("lanes", column("lanes", "{}")),
               ("elements", column("elements", "{}")), ("cycles", column("cycles", "{}")),
               ("model", column("model_cycles", "{}")), ("utilization", column("utilization", "{:.2%}")),
               ("elem/cycle", column("elements_per_cycle", "{:.2f}")), ("latency", column("latency", "{}")),
               ("max err", column("max_abs_err", "{:.4g}")), ("mean err", column("mean_abs_err", "{:.4g}")),
               ("error unit", column("error_unit", "{}")), ("match", column("match", "{}")),
               ("time vs 16x16 GEMM", column("pace_vs_gemm16", "{:.2%}")),
               ("ECP5 cells", column("ecp5_cells", "{}")), ("ECP5 LUT4", column("ecp5_luts", "{}"))]
    write_results(out_dir, "norm", rows, columns, "bertforge bench norm", notes=[
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
