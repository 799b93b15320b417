"""The payload codec's numpy side: many beats of any ``amaranth.lib.data``
layout <-> bytes or payload ints, column-wise and vectorized (the value
forms and bit order are those of :mod:`bertforge.rtl.payload`, whose
:func:`~bertforge.rtl.payload.pack` and :func:`~bertforge.rtl.payload.unpack`
handle one value; rtl imports no numpy, so this half lives here).

A plain shape takes an array of ``beats`` ints, an ``ArrayLayout`` an array
with the beats first and the element index next (``beats x length``; nested
arrays add axes), a ``StructLayout`` a dict of such columns. An array of
structs takes a dict of the struct's fields, each ``beats x length``. Any
column may be a scalar or lack the beats axis: it is broadcast to every
beat. Fields of 8, 16, 32 or 64 bits on byte boundaries are moved as whole
bytes (numpy views); other fields go through a bit matrix
(``np.packbits``). Values are truncated to their field's width (two's
complement); unpacking sign-extends signed fields.
"""

import numpy as np
from amaranth.lib import data

from bertforge.rtl.payload import (bytes_to_words, cast_layout, layout_bytes, layout_width,
                                   words_to_bytes)

__all__ = ["pack_bytes", "unpack_bytes", "pack_beats", "unpack_beats", "pack_int4", "unpack_int4",
           "pack_codes"]


def _leaves(layout, value, base):
    """``(bit offsets, plain shape, column)`` per plain field of ``layout``;
    ``base`` holds the bit offsets of the enclosing array elements (its shape
    is the element axes). Fields missing from a dict are left out (0)."""
    layout = cast_layout(layout)
    if isinstance(layout, data.ArrayLayout):
        step = layout_width(layout.elem_shape)
        inner = base[..., None] + step * np.arange(layout.length)
        yield from _leaves(layout.elem_shape, value, inner)
    elif isinstance(layout, data.Layout):
        for name, field in layout:
            if name in value:
                yield from _leaves(field.shape, value[name], base + field.offset)
    else:
        yield base, layout, value


def _aligned(shape, offsets):
    return shape.width in (8, 16, 32, 64) and not np.any(offsets % 8)


def _positions(offsets, count):
    """``offsets`` (any shape) -> ``(elements, count)`` indices ``offset + 0 .. count-1``."""
    return offsets.reshape(-1, 1) + np.arange(count)


def pack_bytes(layout, value, beats=None, stride=None):
    """``beats`` words of ``layout`` from the column-wise ``value`` (module
    doc), ``stride`` bytes each (default :func:`layout_bytes`), little
    endian, back to back. ``beats`` defaults to the length of the columns'
    beats axis (1 if every column is a scalar)."""
    layout = cast_layout(layout)
    width = layout_width(layout)
    stride = layout_bytes(layout) if stride is None else stride
    if stride * 8 < width:
        raise ValueError(f"a stride of {stride} bytes cannot hold a {width}-bit word")
    leaves = [(offsets, shape, np.asarray(column))
              for offsets, shape, column in _leaves(layout, value, np.zeros((), np.int64))]
    if beats is None:
        beats = max([column.shape[0] for offsets, _, column in leaves
                     if column.ndim > offsets.ndim] or [1])
    out = np.zeros((beats, stride), dtype=np.uint8)
    bits = None
    for offsets, shape, column in leaves:
        column = np.broadcast_to(column, (beats,) + offsets.shape).reshape(beats, offsets.size)
        if column.dtype.kind not in "iub":
            column = column.astype(object if shape.width > 64 else np.int64)
        if shape.width > 64:
            mask, nbytes = (1 << shape.width) - 1, (shape.width + 7) // 8
            raw = np.frombuffer(b"".join((int(v) & mask).to_bytes(nbytes, "little")
                                         for v in column.reshape(-1)), dtype=np.uint8)
            field_bits = np.unpackbits(raw.reshape(-1, nbytes), axis=1, bitorder="little")
            field_bits = field_bits[:, :shape.width].reshape(beats, offsets.size, shape.width)
        elif _aligned(shape, offsets):
            nbytes = shape.width // 8
            if column.dtype.kind != "u":
                column = column.astype(np.int64)
            raw = column.astype(f"<u{nbytes}", order="C").view(np.uint8).reshape(beats, offsets.size, nbytes)
            out[:, _positions(offsets // 8, nbytes)] = raw
            continue
        else:
            unsigned_column = column.astype(np.int64).astype(np.uint64) \
                if column.dtype.kind != "u" else column.astype(np.uint64)
            shifts = np.arange(shape.width, dtype=np.uint64)
            field_bits = ((unsigned_column[..., None] >> shifts) & 1).astype(np.uint8)
        if bits is None:
            bits = np.zeros((beats, stride * 8), dtype=np.uint8)
        bits[:, _positions(offsets, shape.width)] = field_bits
    if bits is not None:
        out |= np.packbits(bits, axis=1, bitorder="little")
    return out.tobytes()


def _column(shape, offsets, words, bits):
    """The values of one plain field (``beats x elements``) from the word
    bytes ``words`` (``beats x stride``) or their bit matrix ``bits()``."""
    beats = words.shape[0]
    if _aligned(shape, offsets):
        nbytes = shape.width // 8
        raw = np.ascontiguousarray(words[:, _positions(offsets // 8, nbytes)])
        values = raw.view(f"<{'i' if shape.signed else 'u'}{nbytes}").reshape(beats, offsets.size)
        return values if shape.width == 64 and not shape.signed else values.astype(np.int64)
    field_bits = bits()[:, _positions(offsets, shape.width)]
    if shape.width > 64:
        raw = np.packbits(field_bits, axis=2, bitorder="little")
        values = np.array([int.from_bytes(row.tobytes(), "little")
                           for row in raw.reshape(-1, raw.shape[2])], dtype=object)
        if shape.signed:
            values = np.array([v - (1 << shape.width) if v >> (shape.width - 1) else v
                               for v in values], dtype=object)
        return values.reshape(beats, offsets.size)
    values = (field_bits.astype(np.uint64) << np.arange(shape.width, dtype=np.uint64)).sum(
        axis=2, dtype=np.uint64)
    if shape.signed:
        values = values.view(np.int64)
        if shape.width < 64:
            values = values - (((values >> (shape.width - 1)) & 1) << shape.width)
        return values
    return values if shape.width == 64 else values.astype(np.int64)


def _build(layout, base, words, bits):
    layout = cast_layout(layout)
    if isinstance(layout, data.ArrayLayout):
        step = layout_width(layout.elem_shape)
        return _build(layout.elem_shape, base[..., None] + step * np.arange(layout.length),
                      words, bits)
    if isinstance(layout, data.Layout):
        return {name: _build(field.shape, base + field.offset, words, bits)
                for name, field in layout}
    return _column(layout, base, words, bits).reshape((words.shape[0],) + base.shape)


def unpack_bytes(layout, raw, stride=None):
    """Inverse of :func:`pack_bytes`: the bytes ``raw`` (words of ``stride``
    bytes, a short last word zero-padded) -> the column-wise value (module
    doc): int64 arrays (uint64 for unsigned 64-bit fields, Python ints in
    object arrays past 64 bits), signed fields sign-extended."""
    layout = cast_layout(layout)
    stride = layout_bytes(layout) if stride is None else stride
    buffer = np.frombuffer(bytes(raw), dtype=np.uint8)
    beats = -(-buffer.size // stride)
    words = np.zeros((beats, stride), dtype=np.uint8)
    words.reshape(-1)[:buffer.size] = buffer
    cache = []

    def bits():
        if not cache:
            cache.append(np.unpackbits(words, axis=1, bitorder="little"))
        return cache[0]

    return _build(layout, np.zeros((), np.int64), words, bits)


def pack_beats(layout, value, beats=None):
    """Like :func:`pack_bytes`, but one int per beat (a stream's payloads)."""
    stride = layout_bytes(layout)
    return bytes_to_words(pack_bytes(layout, value, beats, stride), stride)


def unpack_beats(layout, words):
    """Inverse of :func:`pack_beats`: payload ints (bits above the layout
    ignored) -> the column-wise value."""
    stride, mask = layout_bytes(layout), (1 << layout_width(layout)) - 1
    return unpack_bytes(layout, words_to_bytes((int(w) & mask for w in words), stride), stride)


def pack_int4(q):
    """Signed 4-bit values (-8 .. 7, any shape with an even last axis) as
    uint8 bytes, two per byte: element ``2i`` in the low nibble, ``2i + 1``
    in the high nibble (the order a loader unpacks them in)."""
    q = np.asarray(q, dtype=np.int64)
    if q.shape[-1] % 2:
        raise ValueError(f"the last axis must have an even length, not {q.shape[-1]}")
    if q.size and (q.min() < -8 or q.max() > 7):
        raise ValueError("4-bit values must lie in -8 .. 7")
    nib = (q & 0xF).astype(np.uint8)
    return nib[..., 0::2] | (nib[..., 1::2] << 4)


def pack_codes(codes):
    """4-bit codes (0 .. 15, rows x n) as ``rows x ceil(n / 2)`` bytes,
    column ``2i`` in the low nibble of byte ``i`` and ``2i + 1`` in the high
    one (a zero nibble past an odd n): the group multiplier codes of
    :class:`~bertforge.rtl.gemm.GemmConfig` ``weight_group``."""
    codes = np.asarray(codes, dtype=np.int64)
    if codes.size and (codes.min() < 0 or codes.max() > 15):
        raise ValueError("4-bit codes must lie in 0 .. 15")
    codes = np.concatenate([codes, np.zeros((codes.shape[0], codes.shape[1] % 2), np.int64)], axis=1)
    return pack_int4(np.where(codes > 7, codes - 16, codes))


def unpack_int4(b):
    """The inverse of :func:`pack_int4`: uint8 bytes -> sign-extended int64
    values (twice the last axis)."""
    b = np.asarray(b, dtype=np.uint8)
    lo, hi = (b & 0xF).astype(np.int64), (b >> 4).astype(np.int64)
    out = np.stack([lo, hi], axis=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])
    return out - ((out & 8) << 1)
