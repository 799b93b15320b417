"""The registry of blocks: config class, component class and named presets.

Adding a block is one entry in ``BLOCKS`` and one in ``PRESETS`` here, and
one module name in :data:`bertforge.generators.cli.BLOCK_COMMANDS`.
"""

import dataclasses

from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.butterfly import ButterflyConfig, ButterflyEngine
from bertforge.rtl.gelu import Gelu, GeluConfig
from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.rtl.sparse import SparseArray, SparseConfig

__all__ = ["BLOCKS", "PRESETS"]

#: Block name -> (config class, component class).
BLOCKS = {
    "systolic": (SystolicConfig, SystolicArray),
    "gemm": (GemmConfig, GemmEngine),
    "butterfly": (ButterflyConfig, ButterflyEngine),
    "gelu": (GeluConfig, Gelu),
    "layernorm": (LayerNormConfig, LayerNorm),
    "softmax": (SoftmaxConfig, Softmax),
    "sparse": (SparseConfig, SparseArray),
}

_systolic = SystolicConfig()

#: Block name -> preset name -> config ("default" is the fallback).
PRESETS = {
    "gemm": {
        "default": GemmConfig(),
        "tiny": GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=32, m_tile=16),
        "os-8x8": GemmConfig(rows=8, cols=8),
        "ws-8x8": GemmConfig(rows=8, cols=8, dataflow="ws"),
        "os-16x16": GemmConfig(rows=16, cols=16),
        "ws-16x16": GemmConfig(rows=16, cols=16, dataflow="ws"),
    },
    "butterfly": {
        "default": ButterflyConfig(),
        "n256-l2": ButterflyConfig(n_max=256, lanes=2),
        "n256-l8": ButterflyConfig(n_max=256, lanes=8),
        "n1024-l16": ButterflyConfig(n_max=1024, lanes=16),
        "int8": ButterflyConfig(width=8, weight_width=8),
    },
    "softmax": {
        "default": SoftmaxConfig(),
        "lanes1": SoftmaxConfig(lanes=1),
        "lanes16": SoftmaxConfig(lanes=16),
        "int16": SoftmaxConfig(in_width=16, out_width=16),
        "seq512": SoftmaxConfig(lanes=16, l_max=512),
    },
    "layernorm": {
        "default": LayerNormConfig(),
        "lanes4": LayerNormConfig(lanes=4),
        "lanes16": LayerNormConfig(lanes=16),
        "int32": LayerNormConfig(lanes=16, in_width=32, h_max=1024),
        "no-residual": LayerNormConfig(add_residual=False),
    },
    "gelu": {
        "default": GeluConfig(),
        "lanes4": GeluConfig(lanes=4),
        "lanes16": GeluConfig(lanes=16),
        "int16": GeluConfig(in_width=16, out_width=16, in_mult=1, out_shift=3),
    },
    "systolic": {
        "default": _systolic,
        "tiny": dataclasses.replace(_systolic, rows=2, cols=2),
        "os-8x8": dataclasses.replace(_systolic, rows=8, cols=8),
        "ws-8x8": dataclasses.replace(_systolic, rows=8, cols=8, dataflow="ws"),
        "os-16x16": dataclasses.replace(_systolic, rows=16, cols=16),
        "ws-16x16": dataclasses.replace(_systolic, rows=16, cols=16, dataflow="ws"),
        "int16-4x4": dataclasses.replace(_systolic, width=16),
    },
    "sparse": {
        "default": SparseConfig(),
        "tiny": SparseConfig(rows=2, cols=2, m_max=4),
        "8x8-m8": SparseConfig(rows=8, cols=8, m_max=8),
        "8x8-m16": SparseConfig(rows=8, cols=8, m_max=16),
        "16x16-m8": SparseConfig(rows=16, cols=16, m_max=8),
    },
}
