"""Presets and TOML files -> block configs.

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

from bertforge.rtl.errors import ParameterError

__all__ = ["ConfigError", "preset", "load_toml", "make_config"]


class ConfigError(ParameterError):
    """A config file, preset or field that cannot be used."""


def preset(block, name):
    """The preset ``name`` of ``block`` (a :class:`~bertforge.generators.block.Block`)."""
    try:
        return block.presets[name]
    except KeyError:
        names = ", ".join(sorted(block.presets))
        raise ConfigError(f"no {block.name} preset named {name!r}; presets: {names}") from None


def load_toml(block, path):
    """Fields for ``block`` from the TOML file at ``path`` (a dict)."""
    path = Path(path)
    try:
        from .userfiles import read_text
        table = tomllib.loads(read_text(path, "config file"))
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
    """Config of ``block`` (a :class:`~bertforge.generators.block.Block`):
    preset (default "default"), then the TOML file's fields, then
    ``overrides`` (fields set on the command line)."""
    base = preset(block, preset_name or "default")
    fields = {}
    if toml_path is not None:
        fields.update(load_toml(block.name, toml_path))
    fields.update({k: v for k, v in (overrides or {}).items() if v is not None})
    known = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"unknown {block.name} field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
    return dataclasses.replace(base, **fields)
