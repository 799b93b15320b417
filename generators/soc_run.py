"""``bertforge soc run``: encoder layers on a board's SoC (``soc build``,
flashed) over UARTBone on its serial port, by the host code the SoC's
simulation runs (:mod:`bertforge.boards.soc_host`, the driver): LiteDRAM's
init, the weights, input and program uploaded once (read back and
compared; a marker in the SDRAM skips the upload when the board holds
them), the program started by one register write, the irq polled, the
output read back and compared with the integer golden model, the
accelerator's counters read."""

import contextlib
import json
import time
from pathlib import Path

from .cli_common import CliError
from .soc_cli import check_text_args, fill_layer_args
from .soc_simulate import golden_exit

__all__ = ["DEFAULT_MAP", "open_port", "board_blob", "board_layers", "run_soc_text", "run_soc_run"]

#: The map ``soc build --board ulx3s-85f`` writes by default.
DEFAULT_MAP = Path("build-soc-ulx3s-85f") / "soc_map.json"


def open_port(port, baudrate):
    """The serial port ``port`` at ``baudrate`` (pyserial), one line if it
    cannot be opened."""
    import serial
    try:
        return serial.Serial(port, baudrate, timeout=1.0)
    except (OSError, ValueError, serial.SerialException) as error:
        raise CliError(f"cannot open the serial port {port}: {error}") from None


def board_blob(config, layers, soc_map):
    """``(plan, blob, writes)``: :func:`~bertforge.generators.soc_simulate.layers_program`
    of ``layers`` for the SoC's SDRAM chip; what stays in the SDRAM from
    run to run (``blob``: from its base to the last non-zero word of the
    weights, layer 0's input left zero) and what is written each run
    (``writes``: layer 0's input and the program, ``(offset, bytes)``)."""
    import numpy as np
    from bertforge.sim.sdram import CHIPS
    from .soc_simulate import layers_program
    chip = CHIPS[soc_map["sdram"]["module"]]
    plan = layers_program(config, layers, chip.columns * chip.data_width // 8, chip.banks)
    image = plan["image"][:plan["base"]].copy()
    at, size = plan["input"]
    size = -(-size // 4) * 4
    writes = [(at, image[at:at + size].tobytes()), (plan["base"], plan["program"])]
    image[at:at + size] = 0
    used = -(-(int(np.flatnonzero(image)[-1]) + 1 if image.any() else 0) // 4) * 4
    return plan, image[:used].tobytes(), writes


def board_layers(bus, soc_map, layers, config, *, force_upload=False, every_layer=False,
                 sleep=time.sleep):
    """Run encoder ``layers`` on the SoC behind ``bus`` (its ``soc_map``):
    :func:`~bertforge.boards.soc_host.run_image` of :func:`board_blob`,
    the last layer's output read back (``every_layer``: every layer's) and
    checked (:func:`~bertforge.generators.soc_simulate.check_outputs`).
    Returns ``match``, ``mismatches`` (in all), ``layer_mismatches``,
    ``outputs`` (int64 rows), ``upload``, ``commands``, ``pc``,
    ``counters``, ``seconds``, ``layout`` (per layer, each GEMM
    operation's commands, for ``analyze``'s ``program``)."""
    from bertforge.boards.soc_host import run_image
    from .soc_simulate import check_outputs
    plan, blob, writes = board_blob(config, layers, soc_map)
    outs = plan["outs"] if every_layer else plan["outs"][-1:]
    done = run_image(bus, soc_map, blob, program=plan["base"], records=plan["commands"],
                     outputs=[(at, plan["out_bytes"]) for at in outs], writes=writes,
                     force_upload=force_upload, sleep=sleep)
    mismatches, outputs = check_outputs(config, plan, done["outputs"])
    run = done["run"]
    return {"match": sum(mismatches) == 0 and run["pc"] == plan["commands"],
            "mismatches": sum(mismatches), "layer_mismatches": mismatches, "outputs": outputs,
            "upload": done["upload"], "commands": plan["commands"], "pc": run["pc"],
            "counters": run["counters"], "seconds": done["seconds"],
            "layout": plan["operations"]}


def _read_map(path):
    """``(soc_map, baudrate, module)`` of the map file ``path``; one line if it is not one."""
    path = Path(path or DEFAULT_MAP)
    if not path.is_file():
        raise CliError(f"no SoC map {path}; build the SoC first (bertforge soc build "
                       f"--board ulx3s-85f) or give its soc_map.json with --map")
    try:
        soc_map = json.loads(path.read_text())
        return soc_map, soc_map["uartbone"]["baudrate"], soc_map["accelerator"]["module"]
    except (ValueError, KeyError, TypeError) as error:
        raise CliError(f"{path} is not a SoC map (soc_map.json): {error}") from None


def _check_module(config, module, map_path, hw):
    from .axi_sim import axi_name
    if axi_name(config) != module:
        raise CliError(f"the SoC of {map_path} carries {module}, not the accelerator of "
                       f"{hw} ({axi_name(config)}); give the --hw it was built with")


@contextlib.contextmanager
def _board(port, baudrate, soc_map):
    """The SoC's bus (UARTBone) on the serial port ``port``, answering; a
    UARTBone or run error inside becomes one line naming the port."""
    from bertforge.boards.uartbone import UartBone, UartBoneError
    from bertforge.rtl.errors import BertforgeError
    with open_port(port, baudrate) as serial_port:
        bus = UartBone(serial_port)
        try:
            bus.read32(soc_map["csr"]["ctrl_scratch"]["addr"])
        except UartBoneError as error:
            raise CliError(f"no answer from the SoC on {port} at {baudrate:,} baud "
                           f"(flashed? bertforge flash --design soc): {error}") from None
        try:
            yield bus
        except CliError:
            raise
        except (UartBoneError, BertforgeError) as error:
            raise CliError(f"on {port}: {error}") from None


def _upload_text(up, seconds):
    """What :func:`~bertforge.boards.soc_host.upload` did, in words."""
    return (f"uploaded and read back ({seconds['upload']:.1f} s)" if up["uploaded"]
            else f"already on the board (CRC-32 {up['crc32']:#010x})")


def run_soc_text(args, texts):
    """``bertforge soc run --text/--file``: the sentences' embeddings from
    the board, every layer of ``--checkpoint`` as one program a sentence,
    as :func:`~bertforge.generators.soc_simulate.soc_encode` runs them in
    simulation (:func:`~bertforge.generators.model_sim.prepare`,
    :func:`board_layers`)."""
    from .analyze import load_hardware
    from .encoder_sim import encoder_config
    from .model_sim import encode_programs, model_json, model_report, prepare, quantized_runs
    from .soc_simulate import MINILM_SOC_HW, soc_hardware
    hw = args.hw or str(MINILM_SOC_HW)
    soc_map, baudrate, module = _read_map(args.map)
    config = encoder_config(load_hardware(hw), hw)
    _check_module(config, module, args.map or DEFAULT_MAP, hw)
    boards = []
    with _board(args.port, baudrate, soc_map) as bus:
        prep = prepare(texts, checkpoint=args.checkpoint or "all-minilm-l6-v2", hw=hw,
                       seq=args.seq, batch=args.batch, hardware=soc_hardware(hw))
        qmodel, runs = quantized_runs(prep)

        def run_batch(layers):
            done = board_layers(bus, soc_map, layers, config, force_upload=args.force_upload,
                                every_layer=True)
            boards.append({key: done[key] for key in ("layer_mismatches", "upload", "seconds")})
            return {"run": {"pc": done["pc"], "counters": done["counters"]},
                    "stages": {"out": done["outputs"][-1]},
                    "mismatches": {f"layer{index}.out": count
                                   for index, count in enumerate(done["layer_mismatches"])},
                    "match": done["match"], "phases": {"build": 0.0, "simulate": 0.0}}
        result = encode_programs(prep, qmodel, runs, run_batch, where=f"on {args.port}",
                                 port=args.port, board=boards)
    if args.json:
        print(json.dumps(model_json(result), indent=2))
    else:
        print(model_report(result), end="")
        for number, done in enumerate(boards):
            up = done["upload"]
            print(f"  sentence {number + 1}: weights {up['bytes']:,} bytes "
                  + _upload_text(up, done["seconds"]) + f"; layers bit-exact: {done['layer_mismatches'].count(0)} of "
                  f"{len(done['layer_mismatches'])}")
    return golden_exit(result["match"], "the board")


def run_soc_run(args):
    """``bertforge soc run``."""
    from bertforge.sim.encoder_golden import random_layer
    from .analyze import analyze, load_hardware
    from .encoder_sim import encoder_config, layer_shape
    from .model_sim import texts_of
    from .soc_simulate import soc_hardware
    texts = texts_of(args)
    if texts or args.checkpoint:
        check_text_args(args)
        return run_soc_text(args, texts)
    fill_layer_args(args)
    map_path = Path(args.map or DEFAULT_MAP)
    soc_map, _, module = _read_map(map_path)
    config = encoder_config(load_hardware(args.hw), args.hw)
    shape = layer_shape(config, args.model, args.seq, f"the accelerator of {args.hw}")
    _check_module(config, module, map_path, args.hw)
    layers = [random_layer(config, args.seq, shape.hidden, shape.heads, shape.ffn,
                           seed=args.seed + index) for index in range(args.layers)]
    with _board(args.port, soc_map["uartbone"]["baudrate"], soc_map) as bus:
        result = board_layers(bus, soc_map, layers, config, force_upload=args.force_upload)
    result.pop("outputs")
    predicted = sum(analyze(args.model, args.seq, soc_hardware(args.hw), transpose=True,
                            program=layout)["total_cycles"] for layout in result.pop("layout"))
    counters = result["counters"]
    result.update({"port": args.port, "map": str(map_path), "model": args.model,
                   "layers": args.layers, "seq": args.seq, "predicted_cycles": predicted,
                   "clock_hz": soc_map["sys_clk_hz"]})
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        up = result["upload"]
        print(f"{module} on {soc_map['board']} ({args.port}): {args.layers} x {args.model} "
              f"layer, sequence {args.seq}")
        print(f"  upload: {up['bytes']:,} bytes, " + _upload_text(up, result["seconds"]))
        print(f"  cycles {counters['cycles']:,} ({counters['cycles'] / soc_map['sys_clk_hz'] * 1e3:.2f} ms), "
              f"predicted {predicted:,} (analyze, ULX3S SDRAM)")
        print("  counters: " + ", ".join(f"{name} {value:,}" for name, value in counters.items()))
        print(f"  match: {'yes' if result['match'] else 'NO'} (the last layer's output vs the "
              f"integer golden model)")
    return golden_exit(result["match"], "the board")
