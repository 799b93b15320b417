"""Pieces every block's command-line module uses: errors, argument types,
config flags, .npy input/output, result reports."""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from .presets import make_config
from bertforge.rtl.errors import BertforgeError

__all__ = ["CliError", "positive_int", "bounded_int", "int_list", "probability", "add_config_flags", "add_operand_files", "check_given_sizes", "set_help", "config_from_args", "config_overrides",
           "add_sim_flags", "positive_float", "load_npy", "load_int_matrix", "save_npy_atomic", "report", "check_result"]


class CliError(BertforgeError):
    """Bad input from the user: printed as one line, exit code 2."""


def _parse(text, convert, noun):
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None


def probability(text):
    value = _parse(text, float, "a number")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), not {value}")
    return value


def positive_float(text):
    value = _parse(text, float, "a number")
    if not (value > 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def positive_int(text):
    value = _parse(text, int, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


def bounded_int(limit, why):
    """An argparse type: a positive integer at most ``limit``; the error
    names the limit and ``why`` it is there."""
    def parse(text):
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"at most {limit:,} ({why}), not {value:,}")
        return value
    return parse


def int_list(flag, text, low, high, why):
    """Comma-separated integers of ``flag``, each in ``low..high``."""
    try:
        values = tuple(int(item) for item in text.split(","))
    except ValueError:
        raise CliError(f"{flag} must be comma-separated integers, not {text!r}") from None
    if not values or any(not low <= value <= high for value in values):
        raise CliError(f"{flag} must be integers in {low}..{high} ({why}), not {text!r}")
    return values


def add_config_flags(parser, block, *more_blocks):
    """``--preset``, ``--config`` and one flag per config field
    (``acc_width`` -> ``--acc-width``) of ``block`` (a
    :class:`~bertforge.generators.block.Block`); with several blocks, the
    union of their fields (defaults from the first block that has the field)."""
    blocks = (block, *more_blocks)
    title = f"{' / '.join(b.name for b in blocks)} config (defaults from the preset)"
    group = parser.add_argument_group(title)
    group.add_argument("--preset", help="named preset: " + "; ".join(
        f"{b.name}: {', '.join(b.presets)}" if more_blocks else ", ".join(b.presets) for b in blocks))
    group.add_argument("--config", metavar="FILE.toml", help="TOML file with config fields")
    seen = set()
    for b in blocks:
        name, defaults = b.name, b.presets["default"]
        for field in dataclasses.fields(type(defaults)):
            if field.name in seen:
                continue
            seen.add(field.name)
            value = getattr(defaults, field.name)
            kind = int if value is None else type(value)
            if kind is bool:
                kind = _boolean
            group.add_argument("--" + field.name.replace("_", "-"), dest=f"cfg_{field.name}",
                               type=kind, metavar=field.name.upper(),
                               help=("not set by default" if value is None else f"default {value!r}")
                               + (f" ({name})" if more_blocks else ""))


def set_help(parser, flag, text):
    """Replace the help of ``parser``'s ``flag`` (e.g. a config field's
    default that a command sets itself)."""
    parser._option_string_actions[flag].help = text


def _boolean(text):
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r} (use true or false)")


def config_overrides(block, args):
    """The config fields given on the command line for ``block`` (a
    :class:`~bertforge.generators.block.Block`); a flag that belongs to
    another block's config is an error."""
    fields = {field.name for field in dataclasses.fields(block.config)}
    overrides = {key[4:]: value for key, value in vars(args).items() if key.startswith("cfg_")}
    for key, value in overrides.items():
        if value is not None and key not in fields:
            raise CliError(f"--{key.replace('_', '-')} is not a {block.name} config field")
    return {key: value for key, value in overrides.items() if key in fields}


def config_from_args(block, args, defaults=None):
    """``block``'s config (a :class:`~bertforge.generators.block.Block`'s) from
    ``--preset``/``--config`` and the field flags;
    ``defaults`` (field values) stand in for the preset when neither is given."""
    overrides = config_overrides(block, args)
    if defaults and not args.preset and not args.config:
        overrides = {**defaults, **{k: v for k, v in overrides.items() if v is not None}}
    return make_config(block, preset_name=args.preset, toml_path=args.config, overrides=overrides)


def _seed(text):
    value = _parse(text, int, "an integer")
    if not 0 <= value < 1 << 63:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..2**63-1, not {value}")
    return value


def add_operand_files(parser, a_help, b_help, out_help):
    """``--a A.npy``, ``--b B.npy`` (the user's operands) and ``--out C.npy``
    (where to write the result) of a ``sim`` command."""
    parser.add_argument("--a", metavar="A.npy", help=a_help)
    parser.add_argument("--b", metavar="B.npy", help=b_help)
    parser.add_argument("--out", metavar="C.npy", help=out_help)


def add_sim_flags(parser):
    """Flags every ``bertforge sim BLOCK`` has."""
    parser.add_argument("--seed", type=_seed, default=0, help="seed of data and stalls (default 0)")
    parser.add_argument("--gap", type=probability, default=0.0,
                        help="probability of an idle cycle before each input beat (default 0)")
    parser.add_argument("--stall", type=probability, default=0.0,
                        help="probability of output ready low per cycle (default 0)")
    parser.add_argument("--waves", action="store_true", help="write an FST waveform")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--max-minutes", type=positive_float, metavar="N",
                        help="refuse a run estimated longer than N minutes (default 30; "
                             "BERTFORGE_MAX_MINUTES)")


def load_npy(path, label):
    """The array in the .npy file at ``path`` (no pickles); a missing,
    foreign or broken file is a one-line error naming ``label``."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                raise CliError(f"{label} file {path} is not a .npy file (no NumPy header); "
                               "write it with numpy.save")
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CliError(f"{label} file {path} does not exist") from None
    except IsADirectoryError:
        raise CliError(f"{label} file {path} is a directory") from None
    except (ValueError, OSError, EOFError) as error:
        raise CliError(f"{label} file {path} is not a readable .npy file ({error})") from None


def load_int_matrix(path, label, width, *, ndim=2):
    """An integer array from ``path`` whose values fit ``signed(width)``."""
    array = load_npy(path, label)
    if array.dtype.kind not in "iu":
        raise CliError(f"{label} file {path} holds {array.dtype} values; it must hold integers "
                       f"(int{width})")
    if array.ndim != ndim:
        raise CliError(f"{label} file {path} has shape {array.shape}; it must have {ndim} dimensions")
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if array.size and (array.min() < lo or array.max() > hi):
        raise CliError(f"{label} file {path} holds values in [{array.min()}, {array.max()}]; "
                       f"int{width} values must lie in [{lo}, {hi}]")
    return array.astype(np.int64)


def save_npy_atomic(path, array):
    """``numpy.save`` through a temporary file, so no half-written file is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    tmp.replace(path)


def report(result, as_json, title, keys=("cycles", "model_cycles", "ideal_cycles")):
    """Print ``result`` as JSON or as a short aligned list."""
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    print(title)
    for key in keys:
        print(f"  {key:<13} {result[key]}")
    if "utilization" in result:
        print(f"  {'utilization':<13} {result['utilization']:.2%}")
    print(f"  {'match':<13} {'yes' if result['match'] else 'NO'}")
    for key in ("out", "waves"):
        if result.get(key):
            print(f"  {key:<13} {result[key]}")


def check_result(result):
    """Exit code of a simulation: 1, with a line on stderr, if the output
    differs from the golden model, (without stalls, where the model is exact)
    the cycles from the cycle model, or the testbench failed."""
    if not result["match"]:
        where = f"; waveform: {result['waves']}" if result.get("waves") else ""
        print(f"bertforge: error: the hardware's output differs from the golden model in "
              f"{result.get('mismatches', '?')} values{where}", file=sys.stderr)
        return 1
    if (result.get("model_exact", True) and not result.get("stalls")
            and result["cycles"] != result["model_cycles"]):
        print(f"bertforge: error: measured {result['cycles']} cycles, the cycle model says "
              f"{result['model_cycles']}", file=sys.stderr)
        return 1
    if not result.get("passed", True):
        print(f"bertforge: error: the testbench failed; log: {result.get('log')}", file=sys.stderr)
        return 1
    return 0


def check_given_sizes(args, a, **sizes):
    """Refuse size flags that contradict the operands' shapes (``sizes``:
    flag name -> the size the files give)."""
    for name, size in sizes.items():
        given = getattr(args, name, None)
        if given is not None and given != size:
            raise CliError(f"--{name} {given} contradicts the files: A is {a.shape[0]} x "
                           f"{a.shape[1]}, so {name.upper()} is {size}; leave --{name} out")
