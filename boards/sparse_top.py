"""Board top-level for an :class:`~bertforge.rtl.sparse.SparseArray`:
UART host link, block RAM for operands and results, a sequencer, LEDs
(the dense :mod:`~bertforge.boards.systolic_top`'s memories and sequencer).

One tile is ``A @ W``: A R x K activations, W K x C weights, N:M sparse
along K for any N:M with M <= ``m_max``, chosen per tile by what is
written to B. Memories (host byte addresses; a word is ``ceil(bits / 8)``
bytes rounded up to a power of two, little endian, low bits first):

- ``0`` A: word g = group g's windows, ``k_max`` words. Row i's window is
  bits ``i * m_max * width ..``: its M activations ``A[i, g*M + j]``
  (``j < M``, zero past K) at ``j * width``, zeros up to ``m_max`` (the
  ``a`` beat's ``data``; ``last`` is made by the sequencer).
- ``1`` B: word b = compressed beat b, ``k_max`` words: the ``b`` beat as
  it is (C weights of ``width`` bits, then C indices of ``log2(m_max)``
  bits, then ``group_end``); a group's N beats in a row, ``group_end`` on
  the N-th.
- ``2`` C: word i = result row i (C accumulators of ``acc_width`` bits),
  R words. Only C can be read back.

``RUN`` takes the number of groups G (2 bytes) and of compressed beats B (2
bytes), each 1 to ``k_max`` (else ``BAD_ARGUMENT``); it streams A and B
through the array at full speed and writes the R result rows to C; the reply
carries the cycles from start to the last result row:
``sparse_cycles(array, [B]) + 1``
(:func:`bertforge.sim.sparse_cycles.sparse_cycles`). The tile ends at
the last beat of B whatever B's ``group_end`` bits say (groups beyond it
are not read), so inconsistent counts give a wrong result, never a hang.
LEDs: 0 busy, 1 done at least once, 2 a bad frame seen.
"""

from dataclasses import dataclass

from bertforge.rtl.sparse import SparseArray, SparseConfig, a_layout, b_layout
from bertforge.rtl.params import check_int
from .systolic_top import (MAX_BYTES, BoardTop, BoardTopConfig, RunSequencer, _MemoryToStream,
                           check_addressable, link_memories)

__all__ = ["SparseTopConfig", "SparseBoardTop", "MAX_BYTES"]


@dataclass(frozen=True, kw_only=True)
class SparseTopConfig(BoardTopConfig):
    """The array, the UART divisor (clock / baud) and ``k_max``, the groups
    (A words) and compressed beats (B words) the memories hold."""

    array: SparseConfig = SparseConfig()
    divisor: int = 104
    k_max: int = 256
    design_id: int          # the PING reply's design byte (from its BoardDesign)

    def __post_init__(self):
        self.check_link(article="an")
        check_int("k_max", self.k_max, maximum=1 << 15)
        check_addressable("k_max", self.k_max, "A", self.word_bytes()[0], "array")

    def word_bits(self):
        """Bits used of a word of A (R windows), B (one ``b`` beat), C (a row)."""
        a = self.array
        return (a_layout(a).size - 1, b_layout(a).size, a.cols * a.acc_width)

    def depths(self):
        return self.k_max, self.k_max, self.array.rows


class SparseBoardTop(BoardTop):
    """Host link + memories + sequencer around one N:M sparse array."""

    Config = SparseTopConfig

    def build(self, m, link, cfg):
        m.submodules.array = array = SparseArray(cfg.array)
        mem_a, mem_b, mem_c = link_memories(m, link, cfg.word_bytes(), cfg.depths())

        groups, beats = link.run_args[:16], link.run_args[16:32]
        bad_args = ((groups == 0) | (groups > cfg.k_max) | (beats == 0) | (beats > cfg.k_max))
        run = RunSequencer(m, link, bad_args, cfg.array.rows)
        a_reader = _MemoryToStream(m, mem_a.read_port(), array.a, groups, run.start, "a_rd")
        b_reader = _MemoryToStream(m, mem_b.read_port(), array.b, beats, run.start, "b_rd")
        b = array.b.payload
        data_bits = len(b.data.as_value())
        index_bits = len(b.index.as_value())
        # The last beat of B ends the group and the tile, so that the array
        # always finishes (with consistent counts and group_end bits, as the
        # host packs them, this changes nothing).
        m.d.comb += [array.a.payload.data.as_value().eq(a_reader.data),
                     array.a.payload.last.eq(a_reader.last | b_reader.last),
                     b.data.as_value().eq(b_reader.data[:data_bits]),
                     b.index.as_value().eq(b_reader.data[data_bits:data_bits + index_bits]),
                     b.group_end.eq(b_reader.data[data_bits + index_bits] | b_reader.last)]
        run.write_results(m, mem_c, array.c)
        return run.leds
