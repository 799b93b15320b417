"""The encoder's own parts, behind ``bertforge sim encoder`` and ``bertforge
bench encoder``: one BERT encoder layer on :class:`~bertforge.rtl.encoder.EncoderTop` in Verilator, against
the integer golden model, the float reference and ``analyze``'s prediction.

The hardware comes from an ``analyze`` hardware config (``--hw``): its
[gemm], [softmax], [layernorm] and [gelu] sections become the top's units,
its memory latency the simulated memory's. The simulated memory delivers
one ``mem_width`` word per cycle, so the prediction is made for that
bandwidth when the file asks for less (a note says so).
"""

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from bertforge.sim.encoder_golden import cosine, encoder_float, encoder_golden
from bertforge.sim.encoder_harness import MAX_COMMANDS, encoder_harness_verilog, queue_depth
from bertforge.sim.encoder_run import OPERATIONS, read_stages
from .analyze import analyze, load_hardware
from .bench import add_bench_out, columns, write_results
from .cli_common import CliError, bounded_int, int_list
from .presets import ConfigError
from .simulate import simulate
from .workload import MODELS

__all__ = ["encoder_config", "simulate_encoder", "simulate_layers", "simulate_lowbit", "run_encoder",
           "compare_operations", "compare_classes", "SDRAM_CASES", "SDRAM_COLUMNS", "sdram_row",
           "sdram_bench", "write_sdram_rows"]

#: Longest sequence a simulated layer may have (the softmax unit's l_max bounds it too).
MAX_SEQ = 4096
TINY_HW = Path(__file__).parent / "configs" / "tiny.toml"
#: tiny.toml with int16 activations (as minilm.toml).
TINY16_HW = Path(__file__).parent / "configs" / "tiny16.toml"
#: tiny.toml as a low-bit (W8A8) top (as minilm_int8.toml).
TINY_INT8_HW = Path(__file__).parent / "configs" / "tiny_int8.toml"
#: Allowed relative difference between measured and predicted layer cycles.
TOLERANCE = 0.03


def encoder_config(hw, path):
    """The :class:`EncoderConfig` of a loaded hardware config; a one-line
    :class:`ConfigError` naming ``path`` if its units cannot form a top."""
    from bertforge.rtl.encoder import EncoderConfig
    try:
        return EncoderConfig(gemm=hw.gemm, softmax=hw.softmax, layernorm=hw.layernorm, gelu=hw.gelu)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: {error}") from None


def simulate_layers(config, layers, runs, *, mem_latency=1, seed=0, lat_mask=0, p_req=0, p_data=0,
                    p_wr=0, waves=False, quiet=True, workdir=None, check=True, memory=None,
                    clock_mhz=100.0, cycles=None, tail=False):
    """Run a stack of ``layers`` (EncoderLayer, one shape, quantized for
    ``config``) on the harness of ``config``, in one Verilator run, once
    per entry of ``runs``: ``(x, valid)``, layer 0's integer input (S x H)
    and the real tokens (None: all). One command program per layer; every
    layer's weights in the simulated memory; layer ``l + 1`` reads layer
    ``l``'s output where the hardware wrote it.

    Returns ``{"runs": [...], "phases", "sim_seconds", "functional_coverage"}``; per run a list of
    per-layer dicts: ``cycles``, ``ops`` (per operation: ``name``,
    ``class``, measured ``busy`` (first unit input to last completion) and
    ``span`` (previous operation's end to this one's)), ``output`` (the
    layer's int output as the hardware wrote it), ``stages`` and, with
    ``check``, ``match``/``mismatches`` (every stage against the integer
    golden model run on the hardware's own input of that layer). ``cycles``:
    the predicted cycles of the whole run, for its time estimate (refused
    past the limit, progress when long; see :mod:`bertforge.sim.longrun`)
    and the testbench's timeout (a layer's program fails past 10 times it,
    at least 10**6 cycles: a design that hangs; without it 5 * 10**7).
    ``tail``: every run ends with
    :func:`~bertforge.sim.encoder_run.elementwise_program` on the last
    layer (elementwise commands back to back, rewriting values the layer
    wrote: the checks hold after it)."""
    from bertforge.sim.encoder_run import elementwise_program, layer_program, model_program
    layers[0].xq = np.asarray(runs[0][0], dtype=np.int64)
    sdram = () if memory is None or memory.ideal else (memory, clock_mhz)
    banks = (memory.row_words(config.gemm.mem_width) * config.gemm.mem_bytes, memory.banks) \
        if sdram else None
    image, _, regions, groups, abits = model_program(config, layers, banks=banks)  # the weights, once
    programs = []
    for _, valid in runs:                # a run's programs differ only in the softmax's valid
        for layer in layers:
            layer.valid = valid
        programs.append([layer_program(config, layer, r)[0] for layer, r in zip(layers, regions)])
        if tail:
            programs[-1].append(elementwise_program(programs[-1][-1]))
    dtype = "<i1" if config.element_bytes == 1 else "<i2"
    inputs = [np.asarray(x, dtype=np.int64).astype(dtype).ravel().view(np.uint8) for x, _ in runs]
    spec = {"image": image, "programs": programs, "inputs": inputs, "input_addr": regions[0]["x"],
            "abits": abits, "mem_bytes": config.gemm.mem_bytes,
            "seed": seed, "lat_min": mem_latency, "lat_mask": lat_mask, "p_req": p_req,
            "p_data": p_data, "p_wr": p_wr, "read_bytes": regions[0]["read_bytes"],
            # a layer's program that runs 10 times the whole run's prediction hangs
            "timeout": 50_000_000 if cycles is None else max(1_000_000, 10 * cycles)}
    result = simulate(config, "bertforge.sim.encoder_tb", spec, harness=encoder_harness_verilog,
                      extra=_harness_extra(abits, sdram, programs), waves=waves, workdir=workdir,
                      quiet=quiet, cycles=cycles)
    out_runs = []
    for (x, valid), measured in zip(runs, result["runs"]):
        got = measured["image"]
        hw_in = np.asarray(x, dtype=np.int64)
        per_layer = []
        for index, (layer, stamps) in enumerate(zip(layers, measured["layers"])):
            layer.valid, layer.xq = valid, hw_in
            stages = read_stages(got, regions[index], layer, config)
            entry = {"cycles": stamps["cycles"], "commands": len(stamps["starts"]),
                     "passed": _passed(stamps), "stages": stages, "output": stages["out"],
                     "ops": _operations(stamps, groups[index]), "sim_seconds": stamps["sim_seconds"],
                     "starts": stamps["starts"], "ends": stamps["ends"]}
            if check:
                golden = encoder_golden(config, layer)
                entry["golden"] = golden
                entry["mismatches"] = {key: int(np.count_nonzero(stages[key] != golden[key]))
                                       for key in golden}
                entry["match"] = all(v == 0 for v in entry["mismatches"].values())
            per_layer.append(entry)
            hw_in = stages["out"]
        out_runs.append(per_layer)
    return {"runs": out_runs, "phases": result["phases"],
            "sim_seconds": sum(e["sim_seconds"] for run in out_runs for e in run),
            "waves": result.get("waves"), "functional_coverage": result.get("functional_coverage", {})}


def simulate_lowbit(config, imodel, runs, *, mem_latency=1, seed=0, lat_mask=0, p_req=0,
                    p_data=0, p_wr=0, quiet=True, workdir=None, cycles=None):
    """Run an :class:`~bertforge.sim.lowbit_golden.IntegerLowbit` model on
    the low-bit top of ``config`` (harness, one Verilator run), once per
    entry of ``runs``: ``(x16, x8, valid)``, layer 0's int16 residual and
    int8 operand (S x H) and the real tokens (None: all). Each layer is
    checked against ``imodel`` run on the hardware's own input of that
    layer. Returns ``{"runs": [...], "phases", "sim_seconds"}``; per run a
    list of per-layer dicts as :func:`simulate_layers`'s (``cycles``,
    ``ops``, ``stages``, ``output``, ``golden``, ``mismatches``,
    ``match``)."""
    from bertforge.sim.encoder_run import LOWBIT_OPERATIONS, lowbit_program, read_lowbit_stages
    seq = np.shape(runs[0][0])[0]
    valids = {valid for _, _, valid in runs}
    image, _, regions, groups, abits = lowbit_program(config, imodel, seq)
    programs = [lowbit_program(config, imodel, seq, valid)[1] for _, _, valid in runs] \
        if valids != {None} else [lowbit_program(config, imodel, seq)[1]] * len(runs)
    inputs = [np.concatenate([np.asarray(x16, dtype=np.int64).astype("<i2").ravel().view(np.uint8),
                              np.asarray(x8, dtype=np.int64).astype("<i1").ravel().view(np.uint8)])
              for x16, x8, _ in runs]
    spec = {"image": image, "programs": programs, "inputs": inputs, "input_addr": regions[0]["x16"],
            "abits": abits, "mem_bytes": config.gemm.mem_bytes, "seed": seed,
            "lat_min": mem_latency, "lat_mask": lat_mask, "p_req": p_req, "p_data": p_data,
            "p_wr": p_wr, "read_bytes": regions[0]["read_bytes"], "timeout": 50_000_000}
    result = simulate(config, "bertforge.sim.encoder_tb", spec, harness=encoder_harness_verilog,
                      extra=_harness_extra(abits, (), programs), workdir=workdir, quiet=quiet,
                      cycles=cycles)
    hidden, ffn = imodel.plan[0]["w"]["1"].shape
    out_runs = []
    for (x16, x8, valid), measured in zip(runs, result["runs"]):
        got = measured["image"]
        per_layer = []
        for index, stamps in enumerate(measured["layers"]):
            stages = read_lowbit_stages(got, regions[index], seq, hidden, ffn, imodel.heads)
            golden = imodel.run(stages["x16"], stages["x8"], valid, range(index, index + 1))[0]
            keys = [key for key in golden if key in stages and key not in ("x16", "x8")]
            mismatches = {key: int(np.count_nonzero(stages[key] != golden[key])) for key in keys}
            per_layer.append({"cycles": stamps["cycles"], "commands": len(stamps["starts"]),
                              "passed": _passed(stamps), "stages": stages,
                              "output": stages["out"], "golden": golden,
                              "ops": _operations(stamps, groups[index], LOWBIT_OPERATIONS),
                              "sim_seconds": stamps["sim_seconds"], "mismatches": mismatches,
                              "match": not any(mismatches.values())})
        out_runs.append(per_layer)
    return {"runs": out_runs, "phases": result["phases"],
            "sim_seconds": sum(e["sim_seconds"] for run in out_runs for e in run)}


def _passed(stamps):
    """Whether a layer's program ran as it should: no command rejected, and
    every memory request inside the memory (the address bits above it, the
    harness's ``rd_high`` and ``wr_high``, sum to 0)."""
    return not any(stamps["errors"]) and stamps["high"] == [0, 0]


def _harness_extra(abits, sdram, programs):
    """``encoder_harness_verilog``'s arguments after the config: the
    default queue unless the longest program needs a deeper one (the
    harness of a program that fits the default stays as it was)."""
    depth = queue_depth(max(len(p) for run in programs for p in run))
    if depth == MAX_COMMANDS:
        return (abits, *sdram)
    return (abits, *(sdram or (None, 100.0)), depth)


def _operations(stamps, groups, operations=OPERATIONS):
    starts, ends = stamps["starts"], stamps["ends"]
    ops, previous_end = [], 0
    for (name, kind), members in zip(operations, groups, strict=True):
        busy = ends[members[-1]] - starts[members[0]] + 1
        span = ends[members[-1]] - previous_end
        ops.append({"name": name, "class": kind, "busy": busy, "span": span, "gap": span - busy})
        previous_end = ends[members[-1]]
    return ops


def simulate_encoder(config, layer, *, mem_latency=1, seed=0, lat_mask=0, p_req=0, p_data=0,
                     p_wr=0, waves=False, quiet=True, workdir=None, memory=None, clock_mhz=100.0,
                     cycles=None, tail=False):
    """Run ``layer`` on the harness of ``config`` (:func:`simulate_layers`
    with one layer and one run). Returns a dict: ``cycles``, ``ops``,
    ``match`` (every stage equals the golden model), ``mismatches`` (per
    stage), ``max_error`` (output vs the float reference, real units),
    ``cosine``, ``sim_seconds``, ``phases``."""
    result = simulate_layers(config, [layer], [(layer.xq, layer.valid)], mem_latency=mem_latency,
                             seed=seed, lat_mask=lat_mask, p_req=p_req, p_data=p_data, p_wr=p_wr,
                             waves=waves, quiet=quiet, workdir=workdir, memory=memory,
                             clock_mhz=clock_mhz, cycles=cycles, tail=tail)
    run = result["runs"][0][0]
    reference = encoder_float(layer)
    out = run["golden"]["out"] * layer.scales["out"]
    hw_out = run["output"] * layer.scales["out"]
    return {
        "cycles": run["cycles"], "ops": run["ops"], "commands": run["commands"],
        "passed": run["passed"], "match": run["match"], "mismatches": run["mismatches"],
        "max_error": float(np.abs(hw_out - reference).max()),
        "max_error_golden": float(np.abs(out - reference).max()),
        "cosine": cosine(hw_out, reference), "sim_seconds": result["sim_seconds"],
        "output_lsb": layer.scales["out"], "waves": result.get("waves"), "phases": result["phases"],
        "output": run["output"], "functional_coverage": result["functional_coverage"],
    }


def compare_operations(ops, prediction):
    """Measured operations (:func:`simulate_encoder`'s ``ops``) beside
    ``analyze``'s prediction of each."""
    predicted = {r["operation"]: r["cycles"] for r in prediction["operations"]}
    operations = []
    for op in ops:
        if op["name"] not in predicted:
            raise RuntimeError(f"operation {op['name']!r} of the encoder program is not in the workload")
        operations.append({"operation": op["name"], "class": op["class"], "cycles": op["span"],
                           "predicted": predicted[op["name"]], "busy": op["busy"], "wait": op["gap"]})
    return operations


def compare_classes(operations):
    """Measured and predicted cycles per operation class (summed over ``operations``)."""
    classes = []
    for name in dict.fromkeys(op["class"] for op in operations):
        measured = sum(op["cycles"] for op in operations if op["class"] == name)
        model_cycles = sum(op["predicted"] for op in operations if op["class"] == name)
        classes.append({"class": name, "cycles": measured, "predicted": model_cycles,
                        "difference": (measured - model_cycles) / model_cycles})
    return classes


def layer_shape(config, model, seq, where, batch=1):
    """The shape ``MODELS[model]`` of random layers at sequence length
    ``seq`` (``batch`` sentences stacked); a one-line ``CliError`` naming
    ``where`` (the accelerator) if it does not fit ``config``."""
    from bertforge.sim.encoder_run import check_shape
    shape = MODELS[model]
    try:
        check_shape(config, seq, shape.hidden, shape.heads, shape.ffn, batch)
    except ValueError as error:
        sentences = f", batch {batch}" if batch > 1 else ""
        raise CliError(f"{model} at sequence length {seq}{sentences} does not fit {where}: "
                       f"{error}") from None
    return shape


def run_encoder(hw_path, *, model="tiny", seq=32, seed=0, gap=0.0, stall=0.0, waves=False,
                quiet=True, batch=1, tail=False):
    """Simulate one layer (``batch`` sentences of ``seq`` tokens stacked)
    and compare it; returns the result dict. ``tail``: as
    :func:`simulate_layers`'s."""
    from bertforge.sim.encoder_golden import random_layer
    hw = load_hardware(hw_path)
    config = encoder_config(hw, hw_path)
    shape = layer_shape(config, model, seq, hw_path, batch)
    if not 1 <= hw.mem_latency <= 200:
        raise CliError(f"{hw_path}: the simulated memory takes mem_latency 1..200, not {hw.mem_latency}")
    notes = []
    if hw.memory.ideal and hw.mem_bytes_per_cycle < config.gemm.mem_bytes:
        notes.append(f"the simulated memory delivers {config.gemm.mem_bytes} bytes per cycle; "
                     f"predicted for that instead of {hw.mem_bytes_per_cycle:g}")
        hw = dataclasses.replace(hw, mem_bytes_per_cycle=float(config.gemm.mem_bytes))
    prediction = analyze(model, seq, hw, batch=batch, bias=False, transpose=True)  # no biases; X^T on the engine
    layer = random_layer(config, seq, shape.hidden, shape.heads, shape.ffn, seed=seed, batch=batch)
    stalls = gap > 0 or stall > 0
    result = simulate_encoder(config, layer, mem_latency=hw.mem_latency, seed=seed,
                              lat_mask=3 if stalls else 0, p_req=int(stall * 256),
                              p_data=int(gap * 256), p_wr=int(stall * 256), waves=waves, quiet=quiet,
                              memory=hw.memory, clock_mhz=hw.clock_mhz,
                              cycles=prediction["total_cycles"], tail=tail)
    operations = compare_operations(result["ops"], prediction)
    classes = compare_classes(operations)
    total, model_total = result["cycles"], prediction["total_cycles"]
    return {
        "block": "encoder", "design": config.name, "hardware": hw.name, "model": model, "seq": seq,
        "batch": batch,
        "seed": seed, "stalls": stalls, "commands": result["commands"],
        "cycles": total, "predicted_cycles": model_total,
        "difference": (total - model_total) / model_total,
        "classes": classes, "operations": operations,
        "match": result["match"], "mismatches": result["mismatches"], "passed": result["passed"],
        "max_error": result["max_error"], "output_lsb": result["output_lsb"],
        "cosine": result["cosine"], "sim_seconds": result["sim_seconds"],
        "sim_cycles_per_second": total / max(result["sim_seconds"], 1e-9),
        "waves": result.get("waves"), "notes": notes, "config": config.to_dict(),
        "phases": result["phases"], "functional_coverage": result["functional_coverage"],
    }


# ---- bertforge generate/sim/bench encoder

def add_config_args(sub):
    sub.add_argument("--hw", metavar="FILE.toml", default=str(TINY_HW),
                     help="hardware config, as for analyze (default generators/configs/tiny.toml)")


def make_config(block, args):
    return encoder_config(load_hardware(args.hw), args.hw)


def add_sim_args(sub):
    sub.add_argument("--model", default="tiny", choices=sorted(MODELS),
                     help="layer shape (default tiny: hidden 64, 2 heads, FFN 256)")
    sub.add_argument("--seq", type=bounded_int(MAX_SEQ, "a simulated layer's sequence"), default=32,
                     help="sequence length (default 32)")
    sub.add_argument("--batch", type=bounded_int(64, "a simulated layer's batch"), default=1,
                     help="sentences stacked along M in the projections and the FFN; attention "
                          "per sentence (default 1)")


def random_stimulus(config, args, rng):
    return {"summary": {"model": args.model, "seq": args.seq}}


def run(config, stimulus, args):
    return run_encoder(args.hw, model=args.model, seq=args.seq, seed=args.seed, gap=args.gap,
                       stall=args.stall, waves=args.waves, quiet=args.json, batch=args.batch)


def report(result, as_json):
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    print(f"{result['design']}: {result['model']} encoder layer, seq {result['seq']}, "
          f"batch {result['batch']}, {result['commands']} commands")
    print(f"  {'cycles':<17} {result['cycles']:,}")
    print(f"  {'predicted_cycles':<17} {result['predicted_cycles']:,} "
          f"({result['difference']:+.2%} measured vs predicted)")
    for c in result["classes"]:
        print(f"    {c['class']:<15} {c['cycles']:>10,} measured {c['predicted']:>10,} predicted "
              f"{c['difference']:+.2%}")
    print(f"  {'max_error':<17} {result['max_error']:.4f} (output LSB {result['output_lsb']:g})")
    print(f"  {'cosine':<17} {result['cosine']:.5f} (vs the float64 layer)")
    print(f"  {'match':<17} {'yes' if result['match'] else 'NO'} (every stage vs the integer golden model)")
    print(f"  {'sim speed':<17} {result['sim_cycles_per_second']:,.0f} cycles/s")
    for note in result["notes"]:
        print(f"  note: {note}")


def check(result):
    if not result["match"] or not result["passed"]:
        bad = {k: v for k, v in result["mismatches"].items() if v}
        where = f"; waveform: {result['waves']}" if result.get("waves") else ""
        print(f"bertforge: error: the hardware differs from the golden model in {bad}{where}",
              file=sys.stderr)
        return 1
    if not result["stalls"] and abs(result["difference"]) > TOLERANCE:
        print(f"bertforge: error: measured {result['cycles']} cycles, analyze predicts "
              f"{result['predicted_cycles']} ({result['difference']:+.2%})", file=sys.stderr)
        return 1
    return 0


def add_bench_args(sub):
    add_bench_out(sub, "encoder")
    sub.add_argument("--hw", metavar="FILE.toml", default=str(TINY_HW))
    sub.add_argument("--seqs", default="32,64", help="comma-separated sequence lengths (default 32,64)")


def bench(args):
    seqs = int_list("--seqs", args.seqs, 1, MAX_SEQ, "a simulated layer's sequence")
    rows = []
    for seq in seqs:
        print(f"encoder: tiny layer, seq {seq}", file=sys.stderr, flush=True)
        result = run_encoder(args.hw, seq=seq, quiet=False)
        row = {k: result[k] for k in ("design", "seq", "cycles", "predicted_cycles", "difference",
                                      "match", "max_error", "cosine", "sim_seconds",
                                      "sim_cycles_per_second", "classes")}
        for c in result["classes"]:
            row[f"{c['class']}_share"] = c["cycles"] / result["cycles"]
        rows.append(row)
    table = columns("design", ("seq", "seq", "{}"), ("cycles", "cycles", "{:,}"),
                    ("predicted", "predicted_cycles", "{:,}"), ("diff", "difference", "{:+.2%}"),
                    *[(header, f"{name}_share", "{:.1%}") for header, name in
                      (("GEMM", "gemm"), ("softmax", "softmax"), ("layernorm", "layernorm"),
                       ("GELU", "gelu"))],
                    ("match", lambda r: "yes" if r["match"] else "NO"), ("cosine", "cosine", "{:.4f}"),
                    ("max err", "max_error", "{:.3f}"), ("cycles/s", "sim_cycles_per_second", "{:,.0f}"))
    write_results(args.out, "encoder", rows, table, "bertforge bench encoder", notes=[
        "tiny model (hidden 64, 2 heads, FFN 256), random weights ~ N(0, 1/fan_in), int8",
        "predicted = bertforge analyze on the same hardware config; match = every stage equals "
        "the integer golden model; cosine and max error against the float64 layer"])
    return 0 if all(r["match"] for r in rows) else 1


#: The MiniLM layers :func:`sdram_bench` runs on the ULX3S SDRAM: (hardware
#: config in ``configs/``, batch).
SDRAM_CASES = (("minilm_ulx3s.toml", 1), ("minilm_ulx3s.toml", 8), ("minilm_8x8_ulx3s.toml", 1),
               ("minilm_8x8_ulx3s.toml", 8))
#: The operation classes of a layer, in the bench's columns.
CLASSES = ("gemm", "softmax", "layernorm", "gelu")


def sdram_row(config_name, result):
    """The bench row of a :func:`run_encoder` result (``config_name``: its
    hardware config): the engine, batch, measured and ``analyze`` cycles,
    the difference per operation class, bit-exactness, sentences per second
    at the config's clock for the model's layers (measured cycles), and
    the run's minutes (elaborate, build, simulate, check)."""
    from bertforge.rtl.gemm import GemmConfig
    gemm = GemmConfig(**result["config"]["gemm"])
    hw = load_hardware(TINY_HW.parent / config_name)
    layers = MODELS[result["model"]].layers
    row = {"config": config_name, "engine": f"{gemm.rows}x{gemm.cols}", "batch": result["batch"],
           "seq": result["seq"], "commands": result["commands"], "cycles": result["cycles"],
           "predicted_cycles": result["predicted_cycles"], "difference": result["difference"],
           "match": result["match"], "bit_exact": "yes" if result["match"] else "NO",
           "cosine": result["cosine"], "clock_mhz": hw.clock_mhz,
           "sentences_per_second": result["batch"] * hw.clock_mhz * 1e6 / (layers * result["cycles"]),
           "minutes": sum(result["phases"].values()) / 60}
    for c in result["classes"]:
        row[f"{c['class']}_cycles"], row[f"{c['class']}_predicted"] = c["cycles"], c["predicted"]
        row[f"{c['class']}_difference"] = c["difference"]
    return row


def sdram_bench(out_dir, cases=SDRAM_CASES, seed=0):
    """One MiniLM layer (16 tokens, random weights) per case of ``cases``
    on the ULX3S SDRAM in Verilator, against ``analyze``:
    ``out_dir/bench.json`` rows of :func:`sdram_row`. The four cases took
    10, 27, 12 and 34 minutes on 2 shared CPUs (a batch-8 layer is past the
    default 30-minute limit: set ``BERTFORGE_MAX_MINUTES``). Returns the rows."""
    rows = []
    for name, batch in cases:
        print(f"sdram: {name}, batch {batch}", file=sys.stderr, flush=True)
        result = run_encoder(TINY_HW.parent / name, model="minilm-l6-h384", seq=16, batch=batch,
                             seed=seed, quiet=False)
        rows.append(sdram_row(name, result))
    write_sdram_rows(out_dir, rows)
    return rows


#: The SDRAM bench's table: (header, format template of a row).
SDRAM_COLUMNS = [("config", "{config}"), ("engine", "{engine}"), ("batch", "{batch}"),
                 ("cycles", "{cycles:,}"), ("analyze", "{predicted_cycles:,}"),
                 ("diff", "{difference:+.1%}"),
                 *[(name, f"{{{name}_difference:+.1%}}") for name in CLASSES],
                 ("bit-exact", "{bit_exact}"), ("sentences/s", "{sentences_per_second:.2f}"),
                 ("minutes", "{minutes:.0f}")]


def write_sdram_rows(out_dir, rows):
    """``bench.json`` and ``bench.md`` of :func:`sdram_bench`'s rows."""
    table = columns(*[(header, lambda row, t=template: t.format(**row))
                      for header, template in SDRAM_COLUMNS])
    write_results(out_dir, "sdram_minilm", rows, table,
                  "MiniLM, one layer at 16 tokens, on the ULX3S SDRAM in Verilator", notes=[
                      "random MiniLM-shaped weights; analyze on the same hardware config (no "
                      "biases, X^T on the engine, as the program runs)",
                      "per class: measured against predicted cycles; sentences/s: six layers of "
                      "the measured cycles at the config's clock",
                      "minutes: the whole run (elaborate, Verilator build, simulate, check)"])
