"""Host side of a board: what every design's host code shares. Each
design's own (operand packing for its board memories, ``bertforge run``
over a serial port with pyserial) is in ``boards/<block>_host.py``:
:mod:`~bertforge.boards.systolic_host`, :mod:`~bertforge.boards.sparse_host`,
:mod:`~bertforge.boards.gemm_host`, :mod:`~bertforge.boards.norm_host` and
:mod:`~bertforge.boards.butterfly_host`."""

from amaranth.hdl import signed
from amaranth.lib import data

__all__ = ["vector_layout"]


def vector_layout(width, count):
    """A memory word of ``count`` signed ``width``-bit elements, element 0 in
    the low bits (pack and unpack with :mod:`bertforge.rtl.payload`)."""
    return data.ArrayLayout(signed(width), count)
