"""The payload codec: values of any ``amaranth.lib.data`` layout <-> bits.

One codec packs every command, stream beat and board memory word, so no
module computes bit offsets by hand. A layout is anything amaranth casts to
a :class:`~amaranth.lib.data.Layout` (``StructLayout``, ``ArrayLayout``,
``UnionLayout``, nested) or a plain shape (``signed(8)``, ``1``, ``range``).
Bit 0 of a layout is bit 0 of the integer, the first field / element in the
low bits (amaranth's layout rules); words go to bytes little endian.

Two forms of values:

- **One value** (:func:`pack`, :func:`unpack`): a ``StructLayout`` takes a
  dict of its fields (a missing field is 0, a key the layout does not have
  is ignored), an ``ArrayLayout`` a sequence (list or numpy array), a plain
  shape an int; nested as the layout nests. Underneath are amaranth's
  ``Layout.const(value).as_bits()`` and ``Layout.from_bits(bits)``.
- **Many beats, column-wise** (:func:`~bertforge.sim.payload_np.pack_beats`,
  :func:`~bertforge.sim.payload_np.pack_bytes` and their inverses, in
  :mod:`bertforge.sim.payload_np`: rtl is hardware only and imports no
  numpy), vectorized with numpy: a plain shape takes an array of
  ``beats`` ints, an ``ArrayLayout`` an array with the beats first and the
  element index next (``beats x length``; nested arrays add axes), a
  ``StructLayout`` a dict of such columns. An array of structs takes a dict
  of the struct's fields, each ``beats x length``. Any column may be a
  scalar or lack the beats axis: it is broadcast to every beat. Fields of
  8, 16, 32 or 64 bits on byte boundaries are moved as whole bytes (numpy
  views); other fields go through a bit matrix (``np.packbits``).

Values are truncated to their field's width (two's complement), as the
hardware would; unpacking sign-extends signed fields.
"""

from amaranth.hdl import Shape
from amaranth.lib import data

__all__ = ["cast_layout", "layout_width", "layout_bytes", "pack", "unpack", "words_to_bytes",
           "bytes_to_words"]


def cast_layout(layout):
    """``layout`` as a :class:`data.Layout`, or as a plain :class:`Shape`."""
    try:
        return data.Layout.cast(layout)
    except TypeError:
        return Shape.cast(layout)


def layout_width(layout):
    """Bits of ``layout`` (a layout or a plain shape)."""
    return Shape.cast(layout).width


def layout_bytes(layout):
    """Bytes of one word of ``layout``: ``ceil(width / 8)``."""
    return (layout_width(layout) + 7) // 8


# ---- one value: Layout.const / Layout.from_bits --------------------------------

def _init(layout, value):
    """``value`` as an initializer ``Layout.const`` takes: plain ints, lists and
    dicts (numpy arrays and numpy ints converted, unknown keys and ``None``
    dropped)."""
    layout = cast_layout(layout)
    if isinstance(layout, data.ArrayLayout):
        return [_init(layout.elem_shape, element) for element in value]
    if isinstance(layout, data.Layout):
        if value is None:
            return {}
        return {name: _init(field.shape, value[name]) for name, field in layout if name in value}
    return int(value)


def pack(layout, value):
    """One value of ``layout`` -> the int of its bits (see the module doc for
    the value's form). Uses ``layout.const(value).as_bits()``; a plain shape
    gives its two's complement bits."""
    layout = cast_layout(layout)
    if isinstance(layout, data.Layout):
        return layout.const(_init(layout, value)).as_bits()
    return int(value) & ((1 << layout.width) - 1)


def _plain(view):
    """A ``data.Const`` view -> nested dicts / lists / ints."""
    if not isinstance(view, data.Const):
        return int(view)
    layout = data.Layout.cast(view.shape())
    if isinstance(layout, data.ArrayLayout):
        return [_plain(view[index]) for index in range(layout.length)]
    return {name: _plain(view[name]) for name, _ in layout}


def unpack(layout, bits):
    """The int ``bits`` (bits above the layout ignored) -> one value of
    ``layout``: a dict for a struct, a list for an array, an int (signed
    when the shape is) for a plain shape. Uses ``layout.from_bits(bits)``."""
    layout = cast_layout(layout)
    bits = int(bits) & ((1 << Shape.cast(layout).width) - 1)
    if isinstance(layout, data.Layout):
        return _plain(layout.from_bits(bits))
    if layout.signed and bits >> (layout.width - 1):
        return bits - (1 << layout.width)
    return bits


def words_to_bytes(words, stride):
    """Ints -> ``stride`` little-endian bytes each, back to back."""
    return b"".join(int(word).to_bytes(stride, "little") for word in words)


def bytes_to_words(raw, stride):
    """Bytes -> one int per ``stride`` little-endian bytes (a short last word
    is taken as it is)."""
    return [int.from_bytes(raw[offset:offset + stride], "little")
            for offset in range(0, len(raw), stride)]
