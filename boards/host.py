"""Host side of a board: operand packing for the board memories, and
``bertforge run`` over a serial port (pyserial)."""

import numpy as np

__all__ = ["pack_words", "unpack_words", "systolic_tile_bytes", "systolic_result_from_bytes"]


def pack_words(rows, width, word_bytes):
    """Each row of signed ints -> one little-endian word of ``word_bytes``
    bytes, element 0 in the low bits."""
    out = bytearray()
    mask = (1 << width) - 1
    for row in np.asarray(rows, dtype=np.int64):
        value = 0
        for index, element in enumerate(row.tolist()):
            value |= (element & mask) << (index * width)
        out += value.to_bytes(word_bytes, "little")
    return bytes(out)


def unpack_words(data, width, count, word_bytes):
    """Inverse of :func:`pack_words`: bytes -> rows of ``count`` signed ints."""
    rows = []
    for offset in range(0, len(data), word_bytes):
        value = int.from_bytes(data[offset:offset + word_bytes], "little")
        row = []
        for index in range(count):
            field = (value >> (index * width)) & ((1 << width) - 1)
            row.append(field - (1 << width) if field >> (width - 1) else field)
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(-1, count)


def systolic_tile_bytes(top_config, a, b):
    """Memory images of A and B for one tile, and its K.

    OS: ``a`` is R x K (word k = column k), ``b`` is K x C (word k = row k).
    WS: ``a`` is K x R (word k = row k), ``b`` is R x C (word i = row i).
    """
    array = top_config.array
    a_bytes, b_bytes, _ = top_config.word_bytes()
    a = np.asarray(a)
    if array.dataflow == "os":
        k, a_words = a.shape[1], a.T
    else:
        k, a_words = a.shape[0], a
    if not 1 <= k <= top_config.k_max:
        raise ValueError(f"K = {k} does not fit this bitstream (k_max {top_config.k_max})")
    return (pack_words(a_words, array.width, a_bytes), pack_words(b, array.width, b_bytes), k)


def systolic_result_from_bytes(top_config, data, rows):
    array = top_config.array
    return unpack_words(data, array.acc_width, array.cols, top_config.word_bytes()[2])[:rows]
