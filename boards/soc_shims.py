"""LiteX's build flow on the YoWASP tools (PyPI): LiteX runs ``yosys``,
``nextpnr-ecp5`` and ``ecppack`` by those names; :func:`write_shims` puts
a script of each name in a ``bin`` folder that runs the YoWASP command,
and :func:`relative_sources` makes the yosys script name its sources by
their path relative to the build folder (YoWASP's tools run sandboxed
and see only their working directory: an absolute path is not found)."""

import os
import re
import shlex
from pathlib import Path

from bertforge.rtl.errors import BertforgeError

__all__ = ["SHIM_TOOLS", "write_shims", "relative_sources"]

#: The tool names LiteX's ECP5 flow runs -> the variables of
#: :func:`~bertforge.boards.targets.toolchain_environment` naming the YoWASP commands.
SHIM_TOOLS = {"yosys": "YOSYS", "nextpnr-ecp5": "NEXTPNR_ECP5", "ecppack": "ECPPACK"}


def write_shims(directory, toolchain):
    """Write ``directory/yosys``, ``nextpnr-ecp5`` and ``ecppack``: shell
    scripts that run the YoWASP commands of ``toolchain`` (the dict of
    :func:`~bertforge.boards.targets.toolchain_environment`). Returns
    ``{tool name: path}``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, variable in SHIM_TOOLS.items():
        path = directory / name
        path.write_text(f"#!/bin/sh\n# bertforge: LiteX's {name} is YoWASP's\n"
                        f"exec {shlex.quote(toolchain[variable])} \"$@\"\n")
        path.chmod(0o755)
        paths[name] = path
    return paths


_READ = re.compile(r"^(\s*read_\w+(?:\s+-\S+)*\s+)(\S+)(\s*)$")


def relative_sources(script, base):
    """Rewrite the yosys ``script``'s ``read_*`` lines so that each source
    under ``base`` is named relative to it; a source outside ``base`` is a
    :class:`BertforgeError` (the sandboxed tools could not read it)."""
    script, base = Path(script), Path(base).resolve()
    lines = []
    for line in script.read_text().splitlines():
        match = _READ.match(line)
        if match and os.path.isabs(match.group(2)):
            path = Path(match.group(2)).resolve()
            if not path.is_relative_to(base):
                raise BertforgeError(f"{script}: source {path} is outside {base}; the YoWASP "
                                     "tools see only their working directory")
            line = match.group(1) + path.relative_to(base).as_posix() + match.group(3)
        lines.append(line)
    script.write_text("\n".join(lines) + "\n")
