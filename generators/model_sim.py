"""A whole BERT checkpoint on :class:`~bertforge.rtl.encoder.EncoderTop` in
Verilator: ``bertforge model fetch``, ``bertforge sim model``,
``bertforge bench model`` and the Python API :func:`encode`.

Per sentence: tokens (``tokenizers``), embeddings on the host, then every
encoder layer on the emitted Verilog, then mean pooling over the real
tokens and L2 normalization on the host. All sentences and all layers run
in one Verilator run: every layer's weights are in the simulated memory
once; per sentence the host writes layer 0's input, then queues one
command program per layer (layer ``l + 1`` reads layer ``l``'s output where
the hardware wrote it, and makes its own ``X^T`` on the GEMM engine: no
host step between layers). Each layer is checked bit-exact against the
integer golden model (:mod:`bertforge.sim.bert_golden`) on the same input,
its cycles per operation against ``analyze``'s prediction (with the input
transpose); the sentence embedding against the float64 reference (cosine).

Activations are int8 or int16 as the hardware config says; minilm.toml
and minilm_8x8.toml run int16 activations (int8 ones give cosine 0.85 on
all-MiniLM-L6-v2, see the manual's checkpoints page). A low-bit hardware
config (minilm_int8.toml: ``[layernorm] second_output``) runs W8A8, or
W4A8 with group multipliers in its engine (minilm_w4a8.toml: ``[gemm]
weight_group``) (the manual's low-bit page): the model quantized by
:mod:`bertforge.generators.lowbit` from the calibration sentences, each
layer checked against its integer golden model
(:class:`~bertforge.sim.lowbit_golden.IntegerLowbit`); one sentence a run.

Activation scales come from the calibration sentences shipped in
``generators/data/calibration.txt`` (16); ``generators/data/evaluation.txt``
(24 others) is the evaluation set of ``bench model``.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from bertforge.sim.bert_golden import (QuantizedModel, calibrate_model, float_forward, pool,
                                       similarity_spearman, spearman)
from bertforge.sim.encoder_run import check_shape
from .analyze import analyze, load_hardware
from .axi_cli import add_bus_args, bus_of, wants_axi
from .checkpoint import KNOWN, fetch, load_checkpoint, tokenize
from .cli_common import CliError, bounded_int, save_npy_atomic
from .encoder_sim import compare_classes, compare_operations, encoder_config, simulate_layers
from .workload import BertModel

__all__ = ["encode", "prepare", "quantized_runs", "encode_programs", "read_sentences", "spearman",
           "CALIBRATION", "EVALUATION", "MINILM_HW", "add_parsers", "add_checkpoint_arg",
           "add_text_args", "texts_of", "model_json", "model_report", "REPORT_KEYS", "run_fetch", "run_sim_model", "run_bench_model", "write_bench_model"]

DATA = Path(__file__).parent / "data"
CALIBRATION = DATA / "calibration.txt"
EVALUATION = DATA / "evaluation.txt"
MINILM_HW = Path(__file__).parent / "configs" / "minilm.toml"
#: Most sentences one call takes.
MAX_TEXTS = 1000


def read_sentences(path):
    """Non-empty lines of a text file (``#`` starts a comment line)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CliError(f"sentence file {path} does not exist") from None
    except UnicodeDecodeError:
        raise CliError(f"sentence file {path} is not UTF-8 text") from None
    texts = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not texts:
        raise CliError(f"sentence file {path} holds no sentence (one per line)")
    return texts




def prepare(texts, *, checkpoint="all-minilm-l6-v2", hw=MINILM_HW, calibration=None, seq=None,
            batch=1, hardware=None):
    """What :func:`encode` needs before the hardware runs (checked: one
    line if the texts or the checkpoint do not fit ``hw``): a dict of
    ``texts``, ``model`` (the checkpoint), ``hardware`` (``analyze``'s, of
    ``hw`` unless given), ``config`` (the encoder's), ``ids`` (tokens per
    text), ``seq``, ``batch``, ``groups`` (the texts' tokens in batches, the
    last filled with copies), ``calibration_ids``, ``prediction``
    (``analyze`` of one layer) and ``start`` (the wall clock)."""
    start = time.perf_counter()
    texts = list(texts)
    if not texts:
        raise CliError("no text to encode: give --text or --file")
    if len(texts) > MAX_TEXTS:
        raise CliError(f"at most {MAX_TEXTS} texts per run, not {len(texts)}")
    model = load_checkpoint(checkpoint)
    hardware = hardware or load_hardware(hw)
    config = encoder_config(hardware, hw)
    ids = tokenize(model, texts, config.softmax.l_max)
    step = config.gemm.mem_bytes // 4           # softmax rows of int32 fill memory words
    longest = max(max(len(i) for i in ids), seq or 0)
    seq = max(step, -(-longest // step) * step)
    if seq > config.softmax.l_max:
        raise CliError(f"sequence length {seq} exceeds the softmax unit's l_max = "
                       f"{config.softmax.l_max} of {hw}")
    try:
        check_shape(config, seq, model.hidden, model.heads, model.ffn, batch)
    except ValueError as error:
        raise CliError(f"{Path(model.path).name} at sequence length {seq} does not fit {hw}: "
                       f"{error}") from None
    if hardware.memory.ideal and hardware.mem_bytes_per_cycle < config.gemm.mem_bytes:
        import dataclasses
        hardware = dataclasses.replace(hardware, mem_bytes_per_cycle=float(config.gemm.mem_bytes))
    calibration = calibration or read_sentences(CALIBRATION)
    calibration_ids = tokenize(model, calibration, config.softmax.l_max)
    shape = BertModel(Path(model.path).name, model.hidden, model.heads, len(model.layers), model.ffn)
    prediction = analyze(shape, seq, hardware, batch=batch, bias=True, transpose=True)
    groups = [ids[start:start + batch] for start in range(0, len(ids), batch)]
    groups[-1] = groups[-1] + [groups[-1][-1]] * (batch - len(groups[-1]))
    return {"texts": texts, "model": model, "hardware": hardware, "config": config, "ids": ids,
            "seq": seq, "batch": batch, "groups": groups, "calibration_ids": calibration_ids,
            "prediction": prediction, "shape": shape, "start": start}


def quantized_runs(prep):
    """``(qmodel, runs)`` of :func:`prepare`'s ``prep`` (int8 or int16
    activations, not low-bit): the model quantized for the encoder with
    the calibration sentences' scales, and per batch layer 0's input (the
    embeddings of its texts, stacked) and the valid tokens."""
    config, model, seq, batch = prep["config"], prep["model"], prep["seq"], prep["batch"]
    qmodel = QuantizedModel(config, model, calibrate_model(model, prep["calibration_ids"]), seq)
    for layer in qmodel.layers:
        layer.batch = batch
    runs = [(np.concatenate([qmodel.input(tokens) for tokens in group]),
             len(group[0]) if batch == 1 else [len(tokens) for tokens in group])
            for group in prep["groups"]]
    return qmodel, runs


def encode(texts, *, checkpoint="all-minilm-l6-v2", hw=MINILM_HW, calibration=None, quiet=True,
           progress=None, seq=None, batch=1, bus=None):
    """Sentence embeddings of ``texts`` from the emitted Verilog.

    ``checkpoint``: a name (:data:`~bertforge.generators.checkpoint.KNOWN`)
    or a Hugging Face BERT directory; ``hw``: a hardware config (TOML);
    ``calibration``: sentences for the activation scales (default the
    shipped ones); ``seq``: pad to at least this many tokens (default: the
    longest text, rounded up to what the softmax rows need); ``batch``:
    sentences run together (stacked along M in the projections and the FFN;
    a last, short batch is filled with copies of its last text, whose results
    are dropped; a sentence's cycles are its batch's over ``batch``). Returns a dict: ``embeddings`` (N x H float32, hardware),
    ``reference`` (N x H, float64 model), ``sentences`` (per text: tokens,
    cycles, predicted cycles, cosine), ``match`` (every layer of every
    sentence bit-exact against the integer golden model), ``cosine_min``,
    ``cosine_mean``, ``spearman`` (pairwise similarities, hardware vs float;
    None under 3 texts), ``cycles``, ``predicted_cycles``, ``classes``,
    ``operations`` (measured and predicted cycles per operation, summed),
    ``seq``, ``seconds`` (wall time), ``build_seconds`` (the Verilator
    build, 0 when cached), ``sim_seconds`` (the Verilator run).

    ``bus``: None, the encoder's own harness; or a dict of AXI parameters
    (:func:`~bertforge.generators.axi_cli.bus_of`, ``{}`` for the
    defaults): every batch runs as ONE program (all layers) on the
    encoder's AXI top (:func:`~bertforge.generators.axi_sim.simulate_axi_encoder`:
    program fetch, cocotbext-axi memory, AXI-Lite registers), each layer
    checked bit-exact as on the harness. Per sentence ``cycles`` is then the
    ``CYCLES`` register (the whole program, fetches included) and
    ``counters`` the performance counters; ``classes`` are the
    ``BUSY_*`` counters against ``analyze``'s prediction per class, and
    ``operations`` is empty (the top keeps no per-operation stamps)."""
    prep = prepare(texts, checkpoint=checkpoint, hw=hw, calibration=calibration, seq=seq,
                   batch=batch)
    model, hardware, config, ids, seq, groups, prediction, start = (
        prep[key] for key in ("model", "hardware", "config", "ids", "seq", "groups", "prediction",
                              "start"))
    texts, calibration_ids, out_scale = prep["texts"], prep["calibration_ids"], \
        config.layernorm.out_scale
    run_cycles = prediction["total_cycles"] * prediction["totals"]["layers"] * len(groups)
    if config.lowbit:
        if bus is not None:
            raise CliError(f"{hw}: the low-bit top runs on the harness only: remove --bus")
        simulated = _simulate_lowbit(model, config, hardware, hw, calibration_ids, groups, seq,
                                     quiet=quiet, cycles=run_cycles)
    else:
        qmodel, runs = quantized_runs(prep)
        if bus is not None:
            from .axi_sim import simulate_axi_encoder
            return encode_programs(
                prep, qmodel, runs, lambda layers: simulate_axi_encoder(config, layers, bus=bus,
                                                                        quiet=quiet),
                where="on the AXI top", progress=progress, bus=bus)
        simulated = simulate_layers(config, qmodel.layers, runs, mem_latency=hardware.mem_latency,
                                    quiet=quiet, memory=hardware.memory,
                                    clock_mhz=hardware.clock_mhz, cycles=run_cycles)
    build_seconds = simulated["phases"]["build"]
    sentences, embeddings, references, operations = [], [], [], []
    match = True
    for index, (text, tokens) in enumerate(zip(texts, ids)):
        layers, place = simulated["runs"][index // batch], index % batch
        cycles, ops = 0, []
        for number, layer in enumerate(layers):
            if place == 0 and not (layer["passed"] and layer["match"]):
                match = False
                bad = {k: v for k, v in layer["mismatches"].items() if v}
                print(f"bertforge: text {index + 1}, layer {number}: the hardware differs from "
                      f"the golden model in {bad}", file=sys.stderr)
            if place == 0:
                ops += compare_operations(layer["ops"], prediction)
            cycles += layer["cycles"] if batch == 1 else layer["cycles"] / batch
        x = layers[-1]["output"][place * seq:(place + 1) * seq]
        embedding = pool(x * out_scale, len(tokens))
        reference = pool(float_forward(model, tokens), len(tokens))
        cosine = float(embedding @ reference)
        predicted = prediction["total_cycles"] * len(model.layers)
        predicted = predicted if batch == 1 else predicted / batch
        sentences.append({"text": text, "tokens": len(tokens), "cycles": cycles,
                          "predicted_cycles": predicted, "cosine": cosine})
        embeddings.append(embedding)
        references.append(reference)
        operations += ops
        if progress:
            progress(index, sentences[-1])
    classes = compare_classes(operations)
    per_operation = {}
    for op in operations:
        entry = per_operation.setdefault(op["operation"], {"operation": op["operation"],
                                                           "class": op["class"], "cycles": 0,
                                                           "predicted": 0})
        entry["cycles"] += op["cycles"]
        entry["predicted"] += op["predicted"]
    return _summary(model, hardware, config, texts, sentences, embeddings, references,
                    seq=seq, batch=batch, layers=len(model.layers), match=match, classes=classes,
                    operations=list(per_operation.values()), start=start,
                    build_seconds=build_seconds, sim_seconds=simulated["phases"]["simulate"])


def _summary(model, hardware, config, texts, sentences, embeddings, references, *, layers,
             start, **fields):
    """:func:`encode`'s result: the run's ``fields`` and what follows from
    the sentences (cosines, Spearman, cycle totals)."""
    got, ref = np.array(embeddings), np.array(references)
    cosines = [s["cosine"] for s in sentences]
    return {
        "checkpoint": str(model.path), "hardware": hardware.name, "design": config.name,
        "layers": layers, "texts": len(texts),
        "embeddings": got.astype(np.float32), "reference": ref, "sentences": sentences,
        "cosine_min": min(cosines), "cosine_mean": float(np.mean(cosines)),
        "spearman": similarity_spearman(got, ref),
        "cycles": sum(s["cycles"] for s in sentences),
        "predicted_cycles": sum(s["predicted_cycles"] for s in sentences),
        "clock_mhz": hardware.clock_mhz, "seconds": time.perf_counter() - start, **fields,
    }


def _simulate_lowbit(model, config, hardware, hw, calibration_ids, groups, seq, *, quiet, cycles):
    """:func:`~bertforge.generators.encoder_sim.simulate_lowbit` of the
    W8A8 model, or W4A8 on an engine with group multipliers (``[gemm]
    weight_group``; GPTQ on the Hessians of ``calibration_ids`` and
    :data:`~bertforge.generators.lowbit.CALIBRATION_HESSIAN`'s sentences)
    (:mod:`bertforge.generators.lowbit`, calibrated on ``calibration_ids``)
    for sentences ``groups`` (batches of one)."""
    from bertforge.sim.bert_golden import embed
    from .encoder_sim import simulate_lowbit
    from .lowbit import (CALIBRATION_HESSIAN, PRECISIONS, calibration_stats, integer_model,
                         quantize_model)
    if len(groups[0]) != 1:
        raise CliError(f"{hw}: the low-bit top runs one sentence at a time: --batch 1")
    if not hardware.memory.ideal:
        raise CliError(f"{hw}: the low-bit top runs on the ideal memory: remove [memory]")
    group = config.gemm.weight_group
    if group and group != PRECISIONS["w4a8"].group:
        raise CliError(f"{hw}: W4A8's 4-bit weights come in groups of {PRECISIONS['w4a8'].group} "
                       f"along K: set [gemm] weight_group and k_chunk to "
                       f"{PRECISIONS['w4a8'].group}, not {group}")
    if group:
        hessian = tokenize(model, read_sentences(CALIBRATION_HESSIAN), config.softmax.l_max)
        stats = calibration_stats(model, calibration_ids, hessian_sentences=hessian)
    else:
        stats = calibration_stats(model, calibration_ids, hessian=False)
    imodel = integer_model(model, config, quantize_model(model, stats, "w4a8" if group else "w8a8"),
                           stats)
    runs = []
    for (tokens,) in groups:
        x = np.zeros((seq, model.hidden))
        x[:len(tokens)] = embed(model, tokens)
        runs.append((*imodel.input(x), len(tokens)))
    return simulate_lowbit(config, imodel, runs, mem_latency=hardware.mem_latency, quiet=quiet,
                           cycles=cycles)


def encode_programs(prep, qmodel, runs, run_batch, *, where, progress=None, **fields):
    """:func:`encode`'s result for ``qmodel``'s ``runs`` (:func:`quantized_runs`)
    run as ONE program a batch by ``run_batch(layers)`` (every layer, its
    inputs set): a dict with ``run`` (``pc``, ``counters``: the
    accelerator's registers), ``stages`` (``out``: the last layer's output),
    ``mismatches`` (per layer and stage against the integer golden model),
    ``match`` and ``phases`` (``build``, ``simulate`` seconds), as
    :func:`~bertforge.generators.axi_sim.simulate_axi_encoder` returns it,
    and optionally ``predictions`` (``analyze`` of each layer at the
    program's own addresses, else ``prep``'s prediction counts for every
    layer); ``where`` names the hardware in messages; ``fields`` go into
    the result."""
    texts, ids, model, config, hardware, prediction, batch, seq, start = (
        prep[key] for key in ("texts", "ids", "model", "config", "hardware", "prediction", "batch",
                              "seq", "start"))
    sentences, embeddings, references, results = [], [], [], []
    match = True
    for number, (x, valid) in enumerate(runs):
        for layer in qmodel.layers:
            layer.valid = valid
        qmodel.layers[0].xq = np.asarray(x, dtype=np.int64)
        result = run_batch(qmodel.layers)
        if not result["match"]:
            match = False
            bad = {k: v for k, v in (result["mismatches"] or {}).items() if v}
            print(f"bertforge: batch {number + 1} {where}: "
                  + (f"the hardware differs from the golden model in {bad}" if bad else
                     f"the program did not end well ({result['run']})"), file=sys.stderr)
        results.append(result)
    def layer_predictions(result):
        # analyze of each layer: the batch's own (``predictions``: at its
        # program's addresses) or the prepared one
        return result.get("predictions") or [prediction] * len(qmodel.layers)
    for index, (text, tokens) in enumerate(zip(texts, ids)):
        result, place = results[index // batch], index % batch
        predicted = sum(p["total_cycles"] for p in layer_predictions(result)) / batch
        counters = result["run"]["counters"] if result["run"] else {}
        x = result["stages"]["out"][place * seq:(place + 1) * seq]
        embedding = pool(x * config.layernorm.out_scale, len(tokens))
        reference = pool(float_forward(model, tokens), len(tokens))
        sentences.append({"text": text, "tokens": len(tokens),
                          "cycles": counters.get("cycles", 0) / batch if batch > 1
                          else counters.get("cycles", 0),
                          "predicted_cycles": predicted, "cosine": float(embedding @ reference),
                          "counters": counters})
        embeddings.append(embedding)
        references.append(reference)
        if progress:
            progress(index, sentences[-1])
    by_class = {}
    for row in (row for result in results for p in layer_predictions(result)
                for row in p["operations"]):
        by_class[row["class"]] = by_class.get(row["class"], 0) + row["cycles"]
    classes = []
    for name, cycles in by_class.items():
        if f"busy_{name}" not in sentences[0]["counters"]:
            continue
        measured = sum(r["run"]["counters"][f"busy_{name}"] for r in results if r["run"])
        model_cycles = cycles
        classes.append({"class": name, "cycles": measured, "predicted": model_cycles,
                        "difference": (measured - model_cycles) / model_cycles})
    return _summary(model, hardware, config, texts, sentences, embeddings, references,
                    seq=seq, batch=batch, layers=len(qmodel.layers), match=match, classes=classes,
                    operations=[], start=start, **fields,
                    build_seconds=sum(r["phases"]["build"] for r in results),
                    sim_seconds=sum(r["phases"]["simulate"] for r in results))


# ---- command line

def add_parsers(commands, sim_blocks, bench_blocks):
    model = commands.add_parser("model", help="fetch a named BERT checkpoint")
    actions = model.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    fetch_parser = actions.add_parser("fetch", help="download a named checkpoint into the cache")
    fetch_parser.add_argument("name", choices=sorted(KNOWN))

    sim = sim_blocks.add_parser("model", help="a BERT checkpoint, every layer on the encoder top")
    _add_common(sim)
    add_text_args(sim)
    sim.add_argument("--out", metavar="EMB.npy", help="write the N x H float32 embeddings")
    sim.add_argument("--json", action="store_true", help="print the result as JSON")
    sim.add_argument("--seq", type=bounded_int(4096, "a sequence"), default=None, metavar="N",
                     help="pad every text to at least N tokens (default: the longest text)")
    sim.add_argument("--batch", type=bounded_int(64, "a batch"), default=1, metavar="B",
                     help="sentences run together, stacked along M in the projections and the "
                          "FFN; attention per sentence (default 1)")
    add_bus_args(sim)

    bench = bench_blocks.add_parser("model", help="the evaluation sentences on two hardware configs")
    _add_common(bench)
    bench.add_argument("--out", default="bench-model", metavar="DIR",
                       help="output directory (default bench-model)")
    bench.add_argument("--small-hw", metavar="FILE.toml", default=str(MINILM_HW.with_name("minilm_8x8.toml")),
                       help="the smaller hardware config (default generators/configs/minilm_8x8.toml)")
    bench.add_argument("--sentences", type=int, default=0, metavar="N",
                       help="only the first N evaluation sentences (default all 24)")
    bench.add_argument("--precision", action="store_true",
                       help="the precision axis instead (W16A16, W8A8, W4A8; numerics models, no "
                            "Verilator): quality, bytes per sentence, ULX3S sentences/s")


def add_checkpoint_arg(sub, default="all-minilm-l6-v2", extra=""):
    """``--checkpoint`` (``sim model``, ``bench model``, ``soc sim``, ``soc run``)."""
    sub.add_argument("--checkpoint", default=default, metavar="NAME|DIR",
                     help="a named checkpoint (all-minilm-l6-v2, fetched on first use) or a "
                          "Hugging Face BERT directory" + extra)


def add_text_args(sub):
    """``--text`` and ``--file``: the sentences to encode (:func:`texts_of`)."""
    sub.add_argument("--text", action="append", default=[], metavar="TEXT",
                     help="a sentence to encode (repeat for more)")
    sub.add_argument("--file", metavar="SENTENCES.txt", help="sentences, one per line")


def texts_of(args):
    """The sentences of ``--text`` and ``--file``."""
    return list(args.text) + (read_sentences(args.file) if args.file else [])


def _add_common(sub):
    add_checkpoint_arg(sub)
    sub.add_argument("--hw", metavar="FILE.toml", default=str(MINILM_HW),
                     help="hardware config (default generators/configs/minilm.toml)")


def run_fetch(args):
    print(fetch(args.name))
    return 0


#: :func:`encode`'s result as ``--json`` prints it (and ``bus``, ``port``,
#: ``board``, ``soc`` when there).
REPORT_KEYS = ("checkpoint", "hardware", "design", "seq", "layers", "texts", "match", "cosine_min",
               "cosine_mean", "spearman", "cycles", "predicted_cycles", "clock_mhz", "classes",
               "seconds", "build_seconds", "sim_seconds", "operations", "sentences")


def model_json(result):
    """:func:`encode`'s result for JSON (no arrays)."""
    return {key: result[key] for key in REPORT_KEYS + ("bus", "port", "board", "soc")
            if key in result}


def model_report(result):
    """:func:`encode`'s result as text."""
    lines = [f"{result['design']}: {result['layers']} layers of {result['checkpoint']}, "
             f"sequence {result['seq']}"]
    lines += [f"  {s['tokens']:>3} tokens {s['cycles']:>10,} cycles  cosine {s['cosine']:.4f}  "
              f"{s['text'][:60]}" for s in result["sentences"]]
    lines.append(f"  cosine mean {result['cosine_mean']:.4f}, min {result['cosine_min']:.4f}"
                 + (f"; spearman {result['spearman']:.4f}" if result["spearman"] is not None
                    else ""))
    lines.append(f"  cycles {result['cycles']:,.0f}, predicted {result['predicted_cycles']:,.0f}")
    if "counters" in result["sentences"][0]:
        lines.append("  counters of the first batch: " + ", ".join(
            f"{name} {value:,}" for name, value in result["sentences"][0]["counters"].items()))
    lines += [f"    {c['class']:<10} {c['cycles']:>12,} measured {c['predicted']:>12,} "
              f"predicted {c['difference']:+.2%}" for c in result["classes"]]
    lines.append(f"  match: {'yes' if result['match'] else 'NO'} (every layer vs the integer "
                 f"golden model); {result['seconds']:.1f} s (Verilator build "
                 f"{result['build_seconds']:.1f} s, run {result['sim_seconds']:.1f} s)")
    return "\n".join(lines) + "\n"


def run_sim_model(args):
    texts = texts_of(args)
    bus = None
    if wants_axi(args):
        bus = bus_of(encoder_config(load_hardware(args.hw), args.hw), args)
    result = encode(texts, checkpoint=args.checkpoint, hw=args.hw, quiet=args.json, seq=args.seq,
                    batch=args.batch, bus=bus)
    if args.out:
        save_npy_atomic(args.out, result["embeddings"])
    print(json.dumps(model_json(result), indent=2) if args.json else model_report(result),
          end="\n" if args.json else "")
    return 0 if result["match"] else 1


def run_bench_model(args):
    texts = read_sentences(EVALUATION)
    if args.sentences:
        texts = texts[:args.sentences]
    if args.precision:
        from .lowbit import CALIBRATION_HESSIAN, bench_precisions, write_bench_precisions
        rows = bench_precisions(args.checkpoint, texts, args.hw, read_sentences(CALIBRATION),
                                read_sentences(CALIBRATION_HESSIAN))
        write_bench_precisions(args.out, args.checkpoint, rows)
        return 0
    results = []
    for hw in (args.hw, args.small_hw):
        print(f"model: {len(texts)} sentences on {hw}", file=sys.stderr, flush=True)
        results.append(encode(texts, checkpoint=args.checkpoint, hw=hw, quiet=False))
    return write_bench_model(args.out, args.checkpoint, results)


def write_bench_model(out, checkpoint, results):
    """``bench.json``, ``bench.md`` and ``similarity.png`` of :func:`encode`
    results (one per hardware config); 0 if every run was bit-exact."""
    from .bench import columns, write_results
    from .lowbit import QUALITY_COLUMNS, quality_note
    rows, pictures = [], []
    for result in results:
        texts = result["texts"]
        cycles_per = result["cycles"] / texts
        rows.append({"hardware": result["hardware"], "design": result["design"], "seq": result["seq"],
                     "texts": texts, "match": result["match"],
                     "cosine_mean": result["cosine_mean"], "cosine_min": result["cosine_min"],
                     "spearman": result["spearman"], "cycles_per_sentence": cycles_per,
                     "predicted_per_sentence": result["predicted_cycles"] / texts,
                     "latency_ms": cycles_per / (result["clock_mhz"] * 1e3),
                     "seconds": result["seconds"], "build_seconds": result["build_seconds"],
                     "sim_seconds": result["sim_seconds"], "classes": result["classes"],
                     "operations": result["operations"]})
        pictures.append((f"{result['hardware']} ({texts} sentences)", result["embeddings"],
                         result["reference"]))
    table = columns(("hardware", "hardware", "{}"), ("texts", "texts", "{}"), ("seq", "seq", "{}"),
                    *QUALITY_COLUMNS,
                    ("cycles/sentence", "cycles_per_sentence", "{:,.0f}"),
                    ("predicted", "predicted_per_sentence", "{:,.0f}"),
                    ("ms at clock", "latency_ms", "{:.3f}"),
                    ("match", lambda r: "yes" if r["match"] else "NO"),
                    ("build s", "build_seconds", "{:.0f}"), ("run s", "sim_seconds", "{:.0f}"),
                    ("total s", "seconds", "{:.0f}"))
    write_results(out, "model", rows, table, "bertforge bench model", notes=[
        quality_note(checkpoint), "match = every layer bit-exact",
        "build s = Verilator build (0 when cached), run s = the one Verilator run of every "
        "sentence through all layers, total s = wall time with calibration and golden checks"])
    _plot(Path(out) / "similarity.png", pictures)
    return 0 if all(r["match"] for r in rows) else 1


def _plot(path, pictures):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 1 + len(pictures), figsize=(4.2 * (1 + len(pictures)), 4))
    ref = max((p[2] for p in pictures), key=len)
    panels = [(f"float64 model ({len(ref)} sentences)", ref)] + [
        (f"hardware: {name}", got) for name, got, _ in pictures]
    for ax, (title, emb) in zip(axes, panels):
        image = ax.imshow(emb @ emb.T, vmin=-0.2, vmax=1.0, cmap="viridis")
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8)
    tmp = path.with_name(path.name + ".tmp.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
