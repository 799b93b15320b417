"""``bertforge soc run``: encoder layers on a board's SoC (``soc build``,
flashed) over UARTBone on its serial port, by the host code the SoC's
simulation runs (:mod:`bertforge.boards.soc_host`, the driver): LiteDRAM's
init, the weights, input and program uploaded once (read back and
compared; a marker in the SDRAM skips the upload when the board holds
them), the program started by one register write, the irq polled, the
output read back and compared with the integer golden model, the
accelerator's counters read."""

import json
import sys
import time
from pathlib import Path

from .cli_common import CliError

__all__ = ["DEFAULT_MAP", "open_port", "board_blob", "board_layers", "run_soc_run"]

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
    """``(plan, blob)``: :func:`~bertforge.generators.soc_simulate.layers_program`
    of ``layers`` for the SoC's SDRAM chip, and what goes into the SDRAM:
    the image up to its last non-zero word (layer 0's input, the weights),
    padded with zeros to the program, then the program."""
    import numpy as np
    from bertforge.sim.sdram import CHIPS
    from .soc_simulate import layers_program
    chip = CHIPS[soc_map["sdram"]["module"]]
    plan = layers_program(config, layers, chip.columns * chip.data_width // 8, chip.banks)
    image = plan["image"]
    used = -(-(int(np.flatnonzero(image)[-1]) + 1 if image.any() else 0) // 4) * 4
    blob = image[:used].tobytes() + bytes(plan["base"] - used) + plan["program"]
    return plan, blob


def board_layers(bus, soc_map, layers, config, *, force_upload=False, sleep=time.sleep):
    """Run encoder ``layers`` on the SoC behind ``bus`` (its ``soc_map``):
    :func:`~bertforge.boards.soc_host.run_image` of :func:`board_blob`.
    Returns ``match``, ``mismatches``, ``upload``, ``commands``, ``pc``,
    ``counters``, ``seconds``, ``layout`` (per layer, each GEMM
    operation's commands, for ``analyze``'s ``program``)."""
    from bertforge.boards.soc_host import run_image
    from .soc_simulate import output_mismatches
    plan, blob = board_blob(config, layers, soc_map)
    done = run_image(bus, soc_map, blob, program=plan["base"], records=plan["commands"],
                     output=(plan["out"], plan["out_bytes"]), force_upload=force_upload,
                     sleep=sleep)
    mismatches = output_mismatches(config, plan, done["output"])
    run = done["run"]
    return {"match": mismatches == 0 and run["pc"] == plan["commands"], "mismatches": mismatches,
            "upload": done["upload"], "commands": plan["commands"], "pc": run["pc"],
            "counters": run["counters"], "seconds": done["seconds"],
            "layout": plan["operations"]}


def run_soc_run(args):
    """``bertforge soc run``."""
    from bertforge.boards.uartbone import UartBone, UartBoneError
    from bertforge.rtl.errors import BertforgeError
    from bertforge.sim.encoder_golden import random_layer
    from .analyze import analyze, load_hardware
    from .axi_sim import axi_name
    from .encoder_sim import encoder_config, layer_shape
    from .soc_simulate import soc_hardware
    map_path = Path(args.map or DEFAULT_MAP)
    if not map_path.is_file():
        raise CliError(f"no SoC map {map_path}; build the SoC first (bertforge soc build "
                       f"--board ulx3s-85f) or give its soc_map.json with --map")
    try:
        soc_map = json.loads(map_path.read_text())
        baudrate = soc_map["uartbone"]["baudrate"]
        module = soc_map["accelerator"]["module"]
    except (ValueError, KeyError, TypeError) as error:
        raise CliError(f"{map_path} is not a SoC map (soc_map.json): {error}") from None
    config = encoder_config(load_hardware(args.hw), args.hw)
    shape = layer_shape(config, args.model, args.seq, f"the accelerator of {args.hw}")
    if axi_name(config) != module:
        raise CliError(f"the SoC of {map_path} carries {module}, not the accelerator of "
                       f"{args.hw} ({axi_name(config)}); give the --hw it was built with")
    layers = [random_layer(config, args.seq, shape.hidden, shape.heads, shape.ffn,
                           seed=args.seed + index) for index in range(args.layers)]
    with open_port(args.port, baudrate) as port:
        bus = UartBone(port)
        try:
            bus.read32(soc_map["csr"]["ctrl_scratch"]["addr"])
        except UartBoneError as error:
            raise CliError(f"no answer from the SoC on {args.port} at {baudrate:,} baud "
                           f"(flashed? bertforge flash --design soc): {error}") from None
        try:
            result = board_layers(bus, soc_map, layers, config, force_upload=args.force_upload)
        except (UartBoneError, BertforgeError) as error:
            raise CliError(f"on {args.port}: {error}") from None
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
        print(f"  upload: {up['bytes']:,} bytes, "
              + (f"written and read back ({result['seconds']['upload']:.1f} s)" if up["uploaded"]
                 else f"already on the board (CRC-32 {up['crc32']:#010x})"))
        print(f"  cycles {counters['cycles']:,} ({counters['cycles'] / soc_map['sys_clk_hz'] * 1e3:.2f} ms), "
              f"predicted {predicted:,} (analyze, ULX3S SDRAM)")
        print("  counters: " + ", ".join(f"{name} {value:,}" for name, value in counters.items()))
        print(f"  match: {'yes' if result['match'] else 'NO'} (the last layer's output vs the "
              f"integer golden model)")
    if not result["match"]:
        print("bertforge: error: the board's output differs from the integer golden model",
              file=sys.stderr)
        return 1
    return 0
