"""Stream and pipeline building blocks shared by every block.

- :class:`Queue`: a FIFO between two :mod:`amaranth.lib.stream` interfaces
  (the only place the tree builds a ``SyncFIFOBuffered``);
- :func:`register`, :func:`stage`, :func:`delay`: pipeline registers;
- :func:`tree`: a balanced reduction (adder, max, ...) tree;
- :func:`clamp`: saturation of a signed value to a narrower width;
- :func:`row_layout`: the ``{data, last}`` payload of a row of elements.
"""

import operator

from amaranth.hdl import Module, Mux, Shape, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .errors import ParameterTypeError
from .params import check_int

__all__ = ["Queue", "register", "stage", "delay", "tree", "clamp", "row_layout"]


class Queue(wiring.Component):
    """A first in, first out queue of ``depth`` payloads of ``shape``.

    Payloads taken on ``i`` leave on ``o`` in order, none dropped or
    duplicated. Built on :class:`amaranth.lib.fifo.SyncFIFOBuffered` (block
    RAM friendly): a payload taken on ``i`` is offered on ``o`` 2 cycles later
    when the queue was empty (1 cycle for ``depth=1``); one payload per cycle
    in and out (``depth=1``: one every other cycle).

    Parameters
    ----------
    shape : shape-like or data.Layout
        The payload's shape (a layout gives views on both ports).
    depth : int
        Payloads the queue holds, at least 1.

    Attributes
    ----------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    level : Out(range(depth + 1))
        Payloads held (for credit counting), ``o``'s head included.
    """

    def __init__(self, *, shape, depth):
        try:
            width = Shape.cast(shape).width
        except TypeError:
            raise ParameterTypeError(f"shape must be a shape or a data.Layout, not {shape!r}") from None
        self.shape = shape
        self.depth = check_int("depth", depth)
        self._width = width
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = SyncFIFOBuffered(width=self._width, depth=self.depth)
        m.d.comb += [
            fifo.w_data.eq(self.i.payload),
            fifo.w_en.eq(self.i.valid),
            self.i.ready.eq(fifo.w_rdy),
            self.o.payload.eq(fifo.r_data),
            self.o.valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.o.ready),
            self.level.eq(fifo.level),
        ]
        return m


def _shape_of(value):
    """A value's shape, or its layout when it is a view."""
    return value.shape() if hasattr(value, "shape") else Value.cast(value).shape()


def register(shape, name, *, reset_less=True):
    """A pipeline register: a ``Signal(shape)`` named ``name``, reset-less
    by default (data); ``reset_less=False`` for flags that must reset to 0.
    The caller loads it in ``m.d.sync`` (1 cycle of latency)."""
    return Signal(shape, name=name, reset_less=reset_less)


def stage(m, values, name, *, en=None, flags=None):
    """One register stage: ``{key: register}`` for each of ``values``
    (reset-less, each shaped like its value) and ``flags`` (1 bit, reset to
    0), named ``f"{name}_{key}"``, loaded every cycle or, with ``en``, only
    while ``en`` is high. Latency 1 cycle."""
    flags = flags or {}
    regs = {key: register(_shape_of(value), f"{name}_{key}")
            for key, value in values.items()}
    regs.update({key: register(1, f"{name}_{key}", reset_less=False) for key in flags})
    assignments = [regs[key].eq(value) for key, value in {**values, **flags}.items()]
    if en is None:
        m.d.sync += assignments
    else:
        with m.If(en):
            m.d.sync += assignments
    return regs


def delay(m, value, cycles, name, *, reset_less=True):
    """``value`` delayed by ``cycles`` registers named ``f"{name}_d{n}"``
    (``cycles = 0``: ``value`` itself). Reset-less by default; with
    ``reset_less=False`` (flags such as valid) the registers reset to 0."""
    for n in range(cycles):
        if reset_less:   # like value (its shape and power-up value)
            reg = Signal.like(value, name=f"{name}_d{n}", reset_less=True)
        else:
            reg = register(_shape_of(value), f"{name}_d{n}", reset_less=False)
        m.d.sync += reg.eq(value)
        value = reg
    return value


def tree(values, op=operator.add):
    """Reduction of ``values`` by ``op`` as a balanced binary tree:
    neighbours pair up level by level (an odd one out moves up unchanged),
    ``ceil(log2(len(values)))`` operators deep. Combinational: register its
    result (or ``op``'s) for a pipelined tree."""
    values = list(values)
    while len(values) > 1:
        values = [op(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def clamp(value, width):
    """The signed ``value`` saturated to ``signed(width)`` (combinational).

    A value of at most ``width`` bits is returned as is. One of ``width + 1``
    bits (a sum of two ``width``-bit values) overflows when its two top bits
    differ, and its sign bit then picks the bound; a wider value overflows
    unless its bits from ``width - 1`` up are all equal (a tree of LUTs, no
    carry chain), and its sign bit picks the bound.
    """
    value = Value.cast(value)
    if len(value) <= width:
        return value
    hi, lo = (1 << (width - 1)) - 1, -(1 << (width - 1))
    if len(value) == width + 1:
        top, sign = value[width], value[width - 1]
        return Mux(top ^ sign, Mux(top, lo, hi), value[:width])[:width].as_signed()
    top = value[width - 1:]
    fits = top.all() | ~top.any()
    return Mux(fits, value[:width], Mux(value[-1], lo, hi))[:width].as_signed()


def row_layout(shape, lanes):
    """A beat of ``lanes`` elements of ``shape`` and the ``last`` flag:
    ``StructLayout({"data": ArrayLayout(shape, lanes), "last": 1})``."""
    return data.StructLayout({"data": data.ArrayLayout(shape, lanes), "last": 1})
