"""The registry of blocks: config class, component class and named presets.

Adding a block is one entry in ``BLOCKS`` and one in ``PRESETS`` here, and
one module name in :data:`bertforge.generators.cli.BLOCK_COMMANDS`.
"""

import dataclasses

from bertforge.rtl.systolic import SystolicArray, SystolicConfig

__all__ = ["BLOCKS", "PRESETS"]

#: Block name -> (config class, component class).
BLOCKS = {
    "systolic": (SystolicConfig, SystolicArray),
}

_systolic = SystolicConfig()

#: Block name -> preset name -> config ("default" is the fallback).
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
