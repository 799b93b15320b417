"""The whole SoC in simulation: the LiteX SoC of ``soc build`` (UARTBone,
LiteDRAM's SDR controller on its SDRAM PHY model with the DFI timing
checker, the accelerator on its own LiteDRAM port) built once in Verilator
through the runner (:mod:`bertforge.sim.runner`), driven over its UART pins
by the testbench :mod:`bertforge.boards.soc_board_tb`.

:func:`soc_sim_model` makes the simulation SoC of a hardware config (the
Verilog the runner builds and caches, the map); :func:`simulate_soc` runs
a list of checks on it, the SDRAM loaded through the back door with a
memory image; :func:`soc_encoder` runs encoder layers as one program from
the SDRAM and checks the output against the integer golden model.
"""

import contextlib
import json
import logging
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

__all__ = ["PERIOD_NS", "soc_sim_model", "simulate_soc", "dfi_violations", "soc_encoder",
           "layers_program", "check_outputs", "soc_prepare", "soc_encode",
           "MINILM_SOC_HW", "MINILM_SENTENCE", "soc_model_rows", "soc_model_bench", "soc_hardware",
           "run_soc_layers", "run_soc_sim", "sim_report", "golden_exit", "soc_layer_bench", "BENCH_CASES", "controller_bench"]

#: The simulated clock's period (simulation time only: the SoC's clock is
#: the map's ``sys_clk_hz``, which its SDRAM timings and UART use).
PERIOD_NS = 10
_MODELS = {}
#: The SoC's accelerator for all-MiniLM-L6-v2 (:func:`soc_encode`).
MINILM_SOC_HW = Path(__file__).parent / "configs" / "minilm_soc.toml"


def soc_sim_model(hw=None):
    """``(config, sim)`` of the hardware config file ``hw`` (default
    ``configs/tiny.toml``): the accelerator's config and
    :func:`bertforge.boards.soc_sim.sim_soc` of it (made once per process)."""
    from bertforge.boards.soc_sim import sim_soc
    from .soc_cli import DEFAULT_HW, soc_accelerator
    hw = str(hw or DEFAULT_HW)
    if hw not in _MODELS:
        config, bus, verilog, module = soc_accelerator(hw)
        _MODELS[hw] = config, sim_soc(config, verilog, module, bus=bus)
    return _MODELS[hw]


def dfi_violations(log_text):
    """The DFI timing checker's violation lines in a simulation log."""
    return [line for line in log_text.splitlines() if "violation" in line]


@contextlib.contextmanager
def _without_info(quiet):
    """LiteX set up logging at INFO: when ``quiet``, the runner's INFO
    lines are not shown inside."""
    if quiet:
        logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def simulate_soc(sim, checks, *, image=None, workdir=None, quiet=True):
    """Run ``checks`` (see :mod:`bertforge.boards.soc_board_tb`) on the SoC
    ``sim``, its SDRAM holding ``image`` (bytes from ``main_ram``'s base on;
    zeros if None) at the start. Returns the testbench's result plus
    ``passed``, ``violations`` (the DFI timing checker's lines in the
    log) and ``phases`` (build and simulation seconds)."""
    from bertforge.boards.soc_sim import SIM_TOP, write_sdram_banks
    from bertforge.sim import runner
    phases = {}
    start = time.perf_counter()
    with _without_info(quiet):
        runner.build(sim["verilog"], SIM_TOP, quiet=quiet)
    phases["build"] = time.perf_counter() - start
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="bertforge-soc-"))
    work.mkdir(parents=True, exist_ok=True)
    write_sdram_banks(np.zeros(4, np.uint8) if image is None else image, sim, work)
    soc_map = sim["map"]
    spec = {"map": soc_map, "period_ns": PERIOD_NS, "checks": checks,
            "divisor": soc_map["sys_clk_hz"] // soc_map["uartbone"]["baudrate"]}
    mark = time.perf_counter()
    with _without_info(quiet):
        result = runner.run(sim["verilog"], SIM_TOP, "bertforge.boards.soc_board_tb", spec,
                            workdir=work, quiet=quiet, rerun_with_waves=False)
    phases["simulate"] = time.perf_counter() - mark
    result["violations"] = dfi_violations(Path(result["log"]).read_text())
    result["phases"] = phases
    if workdir is None and result["passed"]:
        shutil.rmtree(work)
        del result["log"]
    return result


def soc_encoder(layers, *, hw=None, upload=True, quiet=True, per_operation=False,
                every_layer=False):
    """Encoder ``layers`` (:class:`~bertforge.sim.encoder_golden.EncoderLayer`,
    one shape, quantized for the accelerator of ``hw``) as ONE program run
    from the simulated SDRAM: the weights and the input loaded through the
    back door, the program written over UARTBone (``upload``; else through
    the back door too), LiteDRAM initialized, the program started by one
    register write, the irq waited for, the last layer's output read back
    over UARTBone (``every_layer``: every layer's). Returns ``{"match"`` (the
    outputs bit for bit the integer golden model's), ``"mismatches"`` (in
    all), ``"layer_mismatches"`` (per layer read back, from the first),
    ``"outputs"`` (those layers' outputs, int64 rows), ``"program"`` (the
    check's result: pc, counters, polls), ``"commands"``, ``"violations"``,
    ``"passed"``, ``"phases"``, ``"cycles"`` (of the whole simulation), ``"layout"`` (per
    layer, each operation's commands, a unit's with its ``record``'s
    address and bytes, for ``analyze``'s ``program``)}.

    ``per_operation``: each operation of each layer (``OPERATIONS`` of
    :mod:`bertforge.sim.encoder_run`) runs as its own program, one
    after another (the same commands, the same result); ``"operations"``
    then lists per operation its ``layer``, ``name``, ``class``, the
    accelerator's ``counters`` and the SoC's ``perf`` counters."""
    from bertforge.boards.soc import MAIN_RAM_BASE
    from .program import record_bytes
    config, sim = soc_sim_model(hw)
    geometry = sim["geometry"]
    plan = layers_program(config, layers, geometry["cols"] * geometry["word_bytes"],
                          geometry["banks"])
    program = plan["program"]
    memory = plan["image"][:plan["base"]]
    if not upload:
        memory = np.concatenate([memory, np.frombuffer(program, np.uint8)])
    outs = plan["outs"] if every_layer else plan["outs"][-1:]
    checks = [{"kind": "sdram_init"},
              {"kind": "program", "base": MAIN_RAM_BASE + plan["base"], "program": program.hex(),
               "upload": upload, "outputs": [[MAIN_RAM_BASE + at, plan["out_bytes"]] for at in outs],
               "poll_cycles": 20_000, "max_polls": 1_000_000,
               "segments": plan["segments"] if per_operation else None}]
    result = simulate_soc(sim, checks, image=memory, quiet=quiet)
    out = {"passed": result["passed"], "violations": result.get("violations"),
           "phases": result["phases"], "commands": plan["commands"], "cycles": result.get("cycles"),
           "log": result.get("log"), "match": False, "mismatches": None, "layer_mismatches": None,
           "outputs": None, "program": None, "record_bytes": record_bytes(config),
           "layout": plan["operations"]}
    if not result["passed"] or len(result.get("checks", [])) != 2:
        return out
    run = result["checks"][1]
    out["program"] = {k: v for k, v in run.items() if k not in ("outputs", "segments")}
    if per_operation:
        out["operations"] = [{**name, "counters": seg["counters"], "perf": seg["perf"]}
                             for name, seg in zip(plan["names"], run["segments"])]
    out["layer_mismatches"], out["outputs"] = check_outputs(
        config, plan, [bytes.fromhex(raw) for raw in run["outputs"]])
    out["mismatches"] = sum(out["layer_mismatches"])
    out["match"] = (out["mismatches"] == 0 and run["pc"] == plan["commands"])
    return out


def layers_program(config, layers, row_bytes, banks):
    """Encoder ``layers`` (one shape) as ONE program in an SDRAM of
    ``banks`` banks of ``row_bytes`` rows: ``{"image"`` (the weights and
    layer 0's input, from the SDRAM's base; zeros from ``"base"`` on),
    ``"program"`` (the assembled records), ``"base"`` (where the program
    goes: the first 4 KiB past every tensor), ``"input"`` (layer 0's input:
    offset, bytes), ``"outs"`` (each layer's output offset), ``"out"``,
    ``"out_bytes"`` (the last layer's output: offset, whole words),
    ``"commands"``, ``"segments"``/``"names"`` (each operation's record
    range and its layer, name, class), ``"layers"``, ``"operations"`` (per
    layer, each operation's commands, a unit's with its ``record``'s
    address and bytes: ``analyze``'s ``program``)}; offsets from the
    SDRAM's base, the commands' addresses the bus's."""
    from bertforge.boards.soc import MAIN_RAM_BASE
    from bertforge.sim.encoder_run import OPERATIONS, model_program
    from .program import assemble, record_bytes
    stack = list(layers)
    image, programs, regions, groups, _ = model_program(config, stack, banks=(row_bytes, banks),
                                                        origin=MAIN_RAM_BASE)
    base = -(-regions[-1]["end"] // 4096) * 4096
    segments, names, offset, operations = [], [], 0, []
    for index, (program, layer_groups) in enumerate(zip(programs, groups)):
        operations.append({})
        for (name, kind), members in zip(OPERATIONS, layer_groups):
            segments.append([offset + members[0], len(members)])
            names.append({"layer": index, "name": name, "class": kind})
            size = record_bytes(config)     # each command with where its record lies
            operations[-1][name] = [{**program[i].get("gemm", program[i]),
                                     "record": (MAIN_RAM_BASE + base + (offset + i) * size,
                                                size)} for i in members]
        offset += len(program)
    commands = [command for program in programs for command in program]
    first, last = stack[0], stack[-1]
    in_bytes = first.batch * first.seq * first.hidden * config.element_bytes
    out_bytes = last.batch * last.seq * last.hidden * config.element_bytes
    return {"image": image, "program": assemble(config, commands),
            "base": base,
            "input": (regions[0]["x"], in_bytes), "outs": [r["out"] for r in regions],
            "out": regions[-1]["out"], "out_bytes": -(-out_bytes // 4) * 4,
            "commands": len(commands), "segments": segments, "names": names, "layers": stack,
            "operations": operations}


def check_outputs(config, plan, raws):
    """``(mismatches, outputs)``: the hardware's outputs ``raws`` (bytes
    read back) of the last ``len(raws)`` layers of ``plan`` as int64 rows,
    and per layer the elements that differ from the integer golden model
    run on that layer's input (the hardware's previous output where it was
    read back, else the golden model's: one program, layer l's output is
    layer l + 1's input)."""
    from bertforge.sim.encoder_golden import encoder_golden
    stack = plan["layers"]
    shape = (stack[-1].batch * stack[-1].seq, stack[-1].hidden)
    dtype = "<i1" if config.element_bytes == 1 else "<i2"
    size = int(np.prod(shape)) * config.element_bytes
    outputs = [np.frombuffer(bytes(raw)[:size], dtype=dtype).reshape(shape).astype(np.int64)
               for raw in raws]
    first = len(stack) - len(outputs)
    mismatches, x = [], stack[0].xq
    for index, layer in enumerate(stack):
        layer.xq = x
        x = encoder_golden(config, layer)["out"]
        if index >= first:
            hw = outputs[index - first]
            mismatches.append(int(np.count_nonzero(hw != x)))
            x = hw
    return mismatches, outputs


def soc_prepare(texts, *, checkpoint="all-minilm-l6-v2", hw=None, seq=None, batch=1):
    """``(hw, prep)``: :func:`~bertforge.generators.model_sim.prepare` of
    ``texts`` for the SoC's accelerator ``hw`` (default
    ``configs/minilm_soc.toml``), ``batch`` sentences a program, the
    prediction :func:`soc_hardware`'s (checked: one line if they do not
    fit)."""
    from .model_sim import prepare
    hw = str(hw or MINILM_SOC_HW)
    return hw, prepare(texts, checkpoint=checkpoint, hw=hw, seq=seq, batch=batch,
                       hardware=soc_hardware(hw))


def soc_encode(texts, *, checkpoint="all-minilm-l6-v2", hw=None, seq=None, quiet=True,
               progress=None, per_operation=False, prepared=None):
    """Sentence embeddings of ``texts`` from the simulated SoC, as
    :func:`~bertforge.generators.model_sim.encode` makes them on the
    encoder's harness (its preparation, quantization and report): per
    sentence the embeddings on the host, every layer of ``checkpoint`` as
    ONE program from the SDRAM (:func:`soc_encoder`: weights, input and
    program through the back door, one register write starts it), every
    layer's output read back over UARTBone and checked bit for bit against
    the integer golden model, the embedding against the float model.
    ``hw``: the SoC's accelerator (default ``configs/minilm_soc.toml``);
    the prediction is :func:`soc_hardware`'s, each layer's commands at
    the program's addresses (``prepared``: :func:`soc_prepare`
    of them, done already). The result is ``encode``'s
    plus ``soc``: per batch its ``layer_mismatches``, the SoC's ``perf``
    counters, ``violations`` (DFI timing) and ``simulated_cycles`` (and
    with ``per_operation``, each operation run as its own program,
    :func:`soc_encoder`'s ``operations``)."""
    from bertforge.rtl.errors import BertforgeError
    from .analyze import analyze
    from .model_sim import encode_programs, quantized_runs
    hw, prep = prepared or soc_prepare(texts, checkpoint=checkpoint, hw=hw, seq=seq)
    qmodel, runs = quantized_runs(prep)
    details = []

    def run_batch(layers):
        result = soc_encoder(layers, hw=hw, upload=False, every_layer=True, quiet=quiet,
                             per_operation=per_operation)
        if result["program"] is None:
            raise BertforgeError(f"the SoC simulation failed; its log: {result['log']}")
        details.append({"layer_mismatches": result["layer_mismatches"],
                        "perf": result["program"]["perf"], "violations": result["violations"],
                        "simulated_cycles": result["cycles"],
                        "operations": result.get("operations")})
        return {"run": result["program"], "stages": {"out": result["outputs"][-1]},
                "mismatches": {f"layer{index}.out": count
                               for index, count in enumerate(result["layer_mismatches"])},
                "match": result["match"] and not result["violations"],
                "phases": result["phases"],
                # analyze of each layer, its commands at the program's addresses
                "predictions": [analyze(prep["shape"], prep["seq"], prep["hardware"],
                                        batch=prep["batch"], bias=True, transpose=True,
                                        program=layout)
                                for layout in result["layout"]]}
    out = encode_programs(prep, qmodel, runs, run_batch, where="in the SoC", progress=progress)
    out["soc"] = details
    return out


def soc_hardware(hw=None):
    """``analyze``'s hardware of the SoC around the accelerator of the
    hardware config file ``hw`` (default configs/tiny.toml): its engine at
    the SoC's clock with the board's SDRAM behind LiteDRAM's controller
    (``[memory] board = "ulx3s"``, ``controller = "litedram"``, its
    refreshes postponed as the SoC's)."""
    from bertforge.boards.soc import REFRESH_POSTPONING
    from bertforge.boards.soc_sim import SIM_CLOCK_MHZ
    from .analyze import hardware_from_table
    from .presets import ConfigError
    from .soc_cli import DEFAULT_HW
    path = Path(hw or DEFAULT_HW)
    try:
        table = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    table["hardware"] = {k: v for k, v in table.get("hardware", {}).items()
                         if k != "mem_bytes_per_cycle"}
    table["hardware"]["clock_mhz"] = SIM_CLOCK_MHZ
    table["memory"] = {"board": "ulx3s", "controller": "litedram",
                       "refresh_postponing": REFRESH_POSTPONING}
    return hardware_from_table(table, str(path), path.stem)


def run_soc_layers(*, hw=None, model="tiny", layers=1, seq=8, seed=0, per_operation=False,
                   quiet=True):
    """Random encoder layers of ``model``'s shape (seeds ``seed`` on) as one
    program from the simulated SoC's SDRAM (:func:`soc_encoder`), beside
    ``analyze``'s prediction (:func:`soc_hardware`). Returns ``{"match"``,
    ``"mismatches"``, ``"cycles"`` (the accelerator's), ``"predicted_cycles"``,
    ``"difference"``, ``"classes"`` (with ``per_operation``: measured and
    predicted per operation class), ``"counters"``, ``"perf"`` (the SoC's
    counters), ``"violations"``, ``"seconds"``, ...}. ``CliError`` (one
    line) when the shape does not fit the accelerator."""
    from bertforge.sim.encoder_golden import random_layer
    from bertforge.rtl.errors import BertforgeError
    from .analyze import analyze, load_hardware
    from .encoder_sim import compare_classes, encoder_config, layer_shape
    from .soc_cli import DEFAULT_HW
    start = time.perf_counter()
    hw = str(hw or DEFAULT_HW)
    config = encoder_config(load_hardware(hw), hw)       # checked before the SoC is made
    shape = layer_shape(config, model, seq, f"the accelerator of {hw}")
    config, _ = soc_sim_model(hw)
    stack = [random_layer(config, seq, shape.hidden, shape.heads, shape.ffn, seed=seed + index)
             for index in range(layers)]
    result = soc_encoder(stack, hw=hw, quiet=quiet, per_operation=per_operation)
    if not result["passed"] or result["program"] is None:
        raise BertforgeError(f"the SoC simulation failed; its log: {result['log']}")
    counters = result["program"]["counters"]
    # analyze of each layer, its GEMMs at the addresses the program gives them
    predictions = [analyze(model, seq, soc_hardware(hw), transpose=True, program=layout)
                   for layout in result["layout"]]
    predicted = sum(p["total_cycles"] for p in predictions)
    out = {"model": model, "layers": layers, "seq": seq, "seed": seed, "hardware": hw,
           "design": config.name, "clock_mhz": soc_hardware(hw).clock_mhz,
           "memory": "ulx3s " + soc_hardware(hw).memory.chip, "match": result["match"],
           "mismatches": result["mismatches"], "commands": result["commands"],
           "cycles": counters["cycles"], "predicted_cycles": predicted,
           "difference": counters["cycles"] / predicted - 1, "counters": counters,
           "perf": result["program"]["perf"], "violations": result["violations"],
           "classes": None, "seconds": time.perf_counter() - start}
    if per_operation:
        by_name = [{op["operation"]: op["cycles"] for op in p["operations"]} for p in predictions]
        out["classes"] = compare_classes([{"class": op["class"], "cycles": op["counters"]["cycles"],
                                           "predicted": by_name[op["layer"]][op["name"]]}
                                          for op in result["operations"]])
        out["cycles"] = sum(op["counters"]["cycles"] for op in result["operations"])
        out["difference"] = out["cycles"] / predicted - 1
    return out


def run_soc_sim(args):
    """``bertforge soc sim``: :func:`~bertforge.generators.soc_simulate.run_soc_layers`,
    or with ``--text``/``--file``/``--checkpoint`` :func:`soc_encode`."""
    from bertforge.sim.longrun import timed
    from .model_sim import texts_of
    from .soc_cli import check_text_args, fill_layer_args
    texts = texts_of(args)
    if texts or args.checkpoint:
        check_text_args(args)
        return _run_soc_text(args, texts)
    fill_layer_args(args)
    key = f"soc sim {args.hw} {args.model} {args.layers} {args.seq} {args.per_operation}"
    with timed(key, "simulating the SoC", 60, quiet=args.json):
        result = run_soc_layers(hw=args.hw, model=args.model, layers=args.layers, seq=args.seq,
                                seed=args.seed, per_operation=args.per_operation)
    return _report(args, result, sim_report(result), result["match"])


def _run_soc_text(args, texts):
    """``bertforge soc sim --text``: :func:`soc_encode`, reported as ``sim model`` reports."""
    from bertforge.sim.longrun import timed
    from .model_sim import model_json, model_report
    prepared = soc_prepare(texts, checkpoint=args.checkpoint or "all-minilm-l6-v2", hw=args.hw,
                           seq=args.seq, batch=args.batch)
    key = f"soc sim {prepared[0]} {args.checkpoint} {len(texts)} texts {prepared[1]['seq']}"
    with timed(key, "simulating the SoC", 600, quiet=args.json):
        result = soc_encode(texts, prepared=prepared, per_operation=args.per_operation)
    lines = [model_report(result)]
    for number, done in enumerate(result["soc"]):
        perf = done["perf"]
        lines.append(f"  batch {number + 1} in the SoC: elements differing per layer "
                     f"{done['layer_mismatches']}; SDRAM {perf['read']:,} reads, "
                     f"{perf['write']:,} writes, {perf['activate']:,} activates, "
                     f"{perf['refresh']:,} refreshes; DFI timing violations "
                     f"{len(done['violations'])}; {done['simulated_cycles']:,} clocks simulated\n")
        if done["operations"]:
            layers = sorted({op["layer"] for op in done["operations"]})
            lines.append("    cycles per layer (each operation its own program): " + ", ".join(
                f"{sum(op['counters']['cycles'] for op in done['operations'] if op['layer'] == l):,}"
                for l in layers) + "\n")
    return _report(args, model_json(result), "".join(lines), result["match"])


def _report(args, data, text, match):
    """``soc sim``'s end: ``data`` and ``text`` as ``report.json`` and
    ``report.md`` in ``--out``, printed (``--json``: the JSON), and the exit
    code (:func:`golden_exit`)."""
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
        (out / "report.md").write_text(text)
    print(json.dumps(data, indent=2) if args.json else text, end="\n" if args.json else "")
    return golden_exit(match, "the SoC")


def golden_exit(match, hardware):
    """0, or 1 after one line on stderr that ``hardware``'s output differs
    from the integer golden model."""
    if match:
        return 0
    print(f"bertforge: error: {hardware}'s output differs from the integer golden model",
          file=sys.stderr)
    return 1


def sim_report(result):
    """The text report of :func:`~bertforge.generators.soc_simulate.run_soc_layers`."""
    perf, counters = result["perf"], result["counters"]
    lines = [f"{result['design']} in the SoC: {result['layers']} x {result['model']} layer, "
             f"sequence {result['seq']}, from the simulated SDRAM ({result['memory']}, "
             f"{result['clock_mhz']:g} MHz)",
             f"  cycles {result['cycles']:,}, predicted {result['predicted_cycles']:,} "
             f"(analyze, ULX3S SDRAM) {result['difference']:+.2%}"]
    for c in result["classes"] or []:
        lines.append(f"    {c['class']:<10} {c['cycles']:>12,} measured {c['predicted']:>12,} "
                     f"predicted {c['difference']:+.2%}")
    moved = counters["bytes_read"] + counters["bytes_written"]
    lines += [f"  memory: {counters['bytes_read']:,} bytes read, {counters['bytes_written']:,} "
              f"written ({moved / result['cycles']:.2f} bytes/cycle); waited "
              f"{counters['mem_wait']:,} cycles",
              f"  SDRAM: {perf['read']:,} reads, {perf['write']:,} writes, {perf['activate']:,} "
              f"activates, {perf['refresh']:,} refreshes; DFI timing violations: "
              f"{len(result['violations'])}",
              f"  match: {'yes' if result['match'] else 'NO'} (the last layer's output vs the "
              f"integer golden model); {result['seconds']:.1f} s"]
    return "\n".join(lines) + "\n"

#: The tiny model's layers the bench runs: ``(layers, sequence length)``.
BENCH_CASES = ((1, 8), (1, 32), (2, 16))


def soc_layer_bench(out_dir, cases=BENCH_CASES):
    """Run the tiny model's layers (:data:`BENCH_CASES`) from the simulated
    SDRAM (:func:`soc_encoder`, configs/tiny.toml), each operation as its
    own program (``per_operation``), and write ``out_dir/bench.json``
    (what :func:`~bertforge.generators.manual.store_bench` stores): per case
    and operation class (then ``all``) the accelerator's cycles, ``analyze``'s
    for the same engine with the board's SDRAM behind LiteDRAM's controller
    (:func:`soc_hardware`) at the SoC's clock, its operations at the program's
    addresses, the bytes the engine moved and the SoC's counters
    (SDRAM reads, writes, activates, refreshes; see
    :data:`~bertforge.boards.soc_sim.PERF_COUNTERS`). Returns the rows."""
    from bertforge.sim.encoder_golden import random_layer
    from .analyze import analyze
    from .workload import MODELS
    config, _ = soc_sim_model()
    shape = MODELS["tiny"]
    hw = soc_hardware()
    rows = []
    for layers, seq in cases:
        stack = [random_layer(config, seq, shape.hidden, shape.heads, shape.ffn, seed=seed)
                 for seed in range(layers)]
        start = time.perf_counter()
        result = soc_encoder(stack, per_operation=True)
        seconds = time.perf_counter() - start
        if not result["passed"] or result["program"] is None:
            raise RuntimeError(f"the SoC simulation of {layers} x seq {seq} failed: {result['log']}")
        predicted = [{op["operation"]: op["cycles"]
                      for op in analyze("tiny", seq, hw, transpose=True, program=layout)["operations"]}
                     for layout in result["layout"]]
        operations = result["operations"]
        classes = list(dict.fromkeys(op["class"] for op in operations)) + ["all"]
        for kind in classes:
            ops = [op for op in operations if kind in ("all", op["class"])]
            total = {name: sum(op["counters"][name] for op in ops) for name in ops[0]["counters"]}
            perf = {name: sum(op["perf"][name] for op in ops) for name in ops[0]["perf"]}
            cycles = total["cycles"]
            model_cycles = sum(predicted[op["layer"]][op["name"]] for op in ops)
            moved = total["bytes_read"] + total["bytes_written"]
            rows.append({"layers": layers, "seq": seq, "class": kind, "match": result["match"],
                         "mismatches": result["mismatches"], "cycles": cycles,
                         "mem_wait": total["mem_wait"], "bytes": moved,
                         "bytes_per_cycle": moved / cycles, "sdram_reads": perf["read"],
                         "sdram_writes": perf["write"], "activates": perf["activate"],
                         "refreshes": perf["refresh"], "analyze_cycles": model_cycles,
                         "over_analyze": cycles / model_cycles - 1,
                         "violations": len(result["violations"]), "seconds": seconds})
    return _bench_rows(out_dir, rows)


#: The MiniLM engines :func:`controller_bench` costs (hardware configs in ``configs/``).
CONTROLLER_CONFIGS = ("minilm_ulx3s.toml", "minilm_8x8_ulx3s.toml")


def controller_bench(out_dir, configs=CONTROLLER_CONFIGS, batches=(1, 8)):
    """``analyze``'s MiniLM (16 tokens, the encoder program's layer) on the
    ULX3S SDRAM engines of ``configs`` at their clocks, per batch, behind
    the simple controller (the simulation harness's) and behind LiteDRAM's
    (``controller = "litedram"``, 8 refreshes postponed, as the SoC has it):
    ``out_dir/bench.json`` rows with cycles and milliseconds per sentence,
    sentences per second at the clock the board build reached and the
    GEMMs' share. Returns the rows."""
    from bertforge.boards.soc import REFRESH_POSTPONING
    from .analyze import analyze, hardware_from_table
    from .soc_cli import DEFAULT_HW
    rows = []
    for name in configs:
        path = Path(DEFAULT_HW).parent / name
        table = tomllib.loads(path.read_text())
        for batch in batches:
            for controller in ("simple", "litedram"):
                memory = dict(table.get("memory", {}), controller=controller)
                if controller == "litedram":
                    memory["refresh_postponing"] = REFRESH_POSTPONING
                hw = hardware_from_table({**table, "memory": memory}, str(path), path.stem)
                start = time.perf_counter()
                result = analyze("minilm-l6-h384", 16, hw, batch=batch, transpose=True)
                totals = result["totals"]
                gemm = next(c["cycles"] for c in result["classes"] if c["class"] == "gemm")
                rows.append({"config": name, "engine": f"{hw.gemm.rows}x{hw.gemm.cols}",
                             "clock_mhz": hw.clock_mhz, "batch": batch, "controller": controller,
                             "cycles_per_sentence": totals["cycles_per_sentence"],
                             "ms_per_sentence": totals["sentence_ms_at_board_clock"],
                             "sentences_per_second": totals["sentences_per_second_at_board_clock"],
                             "gemm_share": gemm / result["total_cycles"],
                             "seconds": time.perf_counter() - start})
    return _bench_rows(out_dir, rows)


#: The sentence of the MiniLM bench (and the slow test): 13 tokens, sequence 16.
MINILM_SENTENCE = "A chef is chopping onions on a cutting board."


def soc_model_rows(result):
    """The bench rows of a :func:`soc_encode` result: per sentence, per
    operation class (the accelerator's ``BUSY_*`` counters), per layer (with
    ``per_operation``) and ``all`` (its ``CYCLES``), each with ``analyze``'s
    cycles for the same engine with the board's SDRAM at the SoC's clock,
    the layers whose output was bit-exact, the cosine against the float
    model, the DFI timing violations and the SoC's SDRAM counters."""
    rows = []
    layers = result["layers"]
    per_layer = result["predicted_cycles"] / len(result["sentences"]) / layers
    for sentence, soc in zip(result["sentences"], result["soc"]):
        counters = sentence["counters"]
        common = {"text": sentence["text"], "tokens": sentence["tokens"], "seq": result["seq"],
                  "layers": layers, "layers_exact": soc["layer_mismatches"].count(0),
                  "mismatches": sum(soc["layer_mismatches"]), "cosine": sentence["cosine"],
                  "violations": len(soc["violations"]), "sdram_reads": soc["perf"]["read"],
                  "sdram_writes": soc["perf"]["write"], "activates": soc["perf"]["activate"],
                  "refreshes": soc["perf"]["refresh"], "simulated_cycles": soc["simulated_cycles"],
                  "clock_mhz": result["clock_mhz"]}
        parts = [(c["class"], counters[f"busy_{c['class']}"], c["predicted"] / len(result["soc"]))
                 for c in result["classes"]]
        if soc.get("operations"):
            parts += [(f"layer {index}", sum(op["counters"]["cycles"] for op in soc["operations"]
                                             if op["layer"] == index), per_layer)
                      for index in range(layers)]
        parts.append(("all", counters["cycles"], sentence["predicted_cycles"]))
        for name, cycles, predicted in parts:
            rows.append({**common, "class": name, "cycles": cycles, "analyze_cycles": predicted,
                         "over_analyze": cycles / predicted - 1,
                         "ms": cycles / (result["clock_mhz"] * 1e3)})
    return rows


def soc_model_bench(out_dir, texts=(MINILM_SENTENCE,), *, checkpoint="all-minilm-l6-v2", hw=None,
                    per_operation=False):
    """Run ``texts`` through every layer of ``checkpoint`` in the simulated
    SoC (:func:`soc_encode`) and write ``out_dir/bench.json`` (the rows of
    :func:`soc_model_rows`, plus the run's ``seconds``: what
    :func:`~bertforge.generators.manual.store_bench` stores). Returns the
    rows."""
    result = soc_encode(list(texts), checkpoint=checkpoint, hw=hw, per_operation=per_operation)
    rows = [{**row, "match": result["match"], "seconds": result["seconds"]}
            for row in soc_model_rows(result)]
    return _bench_rows(out_dir, rows)


def _bench_rows(out_dir, rows):
    """Write ``rows`` as ``out_dir/bench.json`` (what
    :func:`~bertforge.generators.manual.store_bench` reads); returns them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"results": rows}, indent=1) + "\n")
    return rows
