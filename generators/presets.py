"""Named presets and TOML loading for block configs.

A TOML config file holds the block's fields, either at top level or in a
table named after the block::

    [systolic]
    rows = 8
    cols = 8
    dataflow = "ws"

Example files live in ``generators/configs/``.
"""

import dataclasses
import tomllib
from pathlib import Path

from bertforge.rtl.systolic import SystolicConfig

__all__ = ["ConfigError", "PRESETS", "preset", "load_toml", "make_config"]


class ConfigError(ValueError):
    """A config file, preset or field that cannot be used."""


_systolic = SystolicConfig()

#: Block -> preset name -> config.
PRESETS = {
    "systolic": {
        "default": _systolic,
        "tiny": dataclasses.replace(_systolic, rows=2, cols=2),
        "os-8x8": dataclasses.replace(_systolic, rows=8, cols=8),
        "ws-8x8": dataclasses.replace(_systolic, rows=8, cols=8, dataflow="ws"),
        "os-16x16": dataclasses.replace(_systolic, rows=16, cols=16),
        "ws-16x16": dataclasses.replace(_systolic, rows=16, cols=16, dataflow="ws"),
        "int16-4x4": dataclasses.replace(_systolic, width=16),
    },
}


def preset(block, name):
    try:
        return PRESETS[block][name]
    except KeyError:
        names = ", ".join(sorted(PRESETS.get(block, {})))
        raise ConfigError(f"no {block} preset named {name!r}; presets: {names}") from None


def load_toml(block, path):
    """Fields for ``block`` from the TOML file at ``path`` (a dict)."""
    path = Path(path)
    try:
        table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read config file {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path} is not valid TOML: {error}") from None
    if block in table and isinstance(table[block], dict):
        table = table[block]
    return table


def make_config(block, *, preset_name=None, toml_path=None, overrides=None):
    """Config of ``block``: preset (default "default"), then the TOML file's
    fields, then ``overrides`` (fields set on the command line)."""
    base = preset(block, preset_name or "default")
    fields = {}
    if toml_path is not None:
        fields.update(load_toml(block, toml_path))
    fields.update({k: v for k, v in (overrides or {}).items() if v is not None})
    known = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"unknown {block} field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
    return dataclasses.replace(base, **fields)
