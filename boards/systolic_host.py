"""Host side of the systolic board top (:mod:`bertforge.boards.systolic_top`):
the memory images of a tile and its result."""

import numpy as np

from bertforge.rtl.errors import ParameterError
from bertforge.sim.payload_np import pack_bytes, unpack_bytes
from .host import vector_layout

__all__ = ["systolic_tile_bytes", "systolic_result_from_bytes"]


def systolic_tile_bytes(top_config, a, b):
    """Memory images of A and B for one tile, and its K.

    OS: ``a`` is R x K (word k = column k), ``b`` is K x C (word k = row k).
    WS: ``a`` is K x R (word k = row k), ``b`` is R x C (word i = row i).
    """
    array = top_config.array
    a_bytes, b_bytes, _ = top_config.word_bytes()
    a, b = np.asarray(a), np.asarray(b)
    if array.dataflow == "os":
        k, a_words = a.shape[1], a.T
    else:
        k, a_words = a.shape[0], a
    if not 1 <= k <= top_config.k_max:
        raise ParameterError(f"K = {k} does not fit this bitstream (k_max {top_config.k_max})")
    return (pack_bytes(vector_layout(array.width, a_words.shape[1]), a_words, stride=a_bytes),
            pack_bytes(vector_layout(array.width, b.shape[1]), b, stride=b_bytes), k)


def systolic_result_from_bytes(top_config, raw, rows):
    """The result rows (``rows`` x C) from the bytes of memory C."""
    array = top_config.array
    layout = vector_layout(array.acc_width, array.cols)
    return unpack_bytes(layout, raw, top_config.word_bytes()[2])[:rows]
