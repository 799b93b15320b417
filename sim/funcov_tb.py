"""Functional coverage points of the stream testbenches (``cocotb-coverage``).

:class:`StreamCoverage` is handed to :meth:`StreamTB.run
<bertforge.sim.stream_tb.StreamTB.run>`, which samples it once per cycle
after the clock edge. For each input stream (a :class:`StreamDriver`) and
output stream (a :class:`StreamMonitor`) of the block it records, as
``cocotb_coverage`` cover points named ``<block>.<stream>.<point>``:

- ``refused``: the block held an input beat off (``valid`` and not
  ``ready``: its queues were full or busy), by run length ``1``, ``2-3``,
  ``4+`` cycles: backpressure at every depth;
- ``idle``: the block was ready and the input had no beat (its queues ran
  empty of input);
- ``stalled``: an output beat held by the consumer (``valid`` and not
  ``ready``), by run length ``1``, ``2-3``, ``4+``;
- ``waiting``: the consumer was ready and the block had nothing to give
  (its output side ran empty: a bubble);
- ``full``: an input refused while the output was stalled (the block filled
  up behind a stalled consumer);
- ``last``: the ``last`` flag of every beat that moved, ``True`` and
  ``False`` (given ``last_of``, a function of the payload int);
- ``first_beat_last``: a row of one beat (``last`` on a row's first beat);
  left out for the streams named in ``fixed_rows``, whose rows the design
  makes longer than one beat (an output stationary array's ``R`` result
  rows, ``R > 1``).

:meth:`Coverage.values` adds operand extremes: the bins ``min``,
``max``, ``zero``, ``-1`` and ``+1`` of a signed ``width``-bit operand,
each hit if some element of the array had that value;
:meth:`Coverage.bounds` adds the smallest and largest accepted value
of a length or address (bins ``lo`` and ``hi``).

:meth:`Coverage.pairs` adds back-to-back commands: the kind of each
command or tile and of the one after it, a bin per ordered pair of kinds;
:meth:`Coverage.kinds` a bin per kind present (the reasons a command is
rejected, address bounds); :meth:`Coverage.flags` records cover bits that
the design's simulation harness keeps in HDL, and
:meth:`Coverage.hdl_streams` turns a harness's stream bits
(:func:`bertforge.sim.gemm_harness.engine_cover`) into the same
``refused``/``idle``/``stalled``/``waiting``/``full`` points, for an engine
that runs without Python in the cycle loop. :class:`Coverage` has these
without the per-cycle stream sampling.

:meth:`StreamCoverage.report` gives ``{point: {bin: hits}}``, which the
testbench writes into its result as ``functional_coverage``; the tests merge
the results of a block's runs and assert every bin hit
(:func:`bertforge.sim.coverage.uncovered`).
"""

import numpy as np
from cocotb_coverage.coverage import CoverPoint, coverage_db

__all__ = ["Coverage", "StreamCoverage", "HeldRuns", "flag_of", "run_bin", "RUN_BINS",
           "EXTREME_BINS"]

RUN_BINS = ["1", "2-3", "4+"]
EXTREME_BINS = ["min", "max", "zero", "-1", "+1"]


def flag_of(layout, name="last"):
    """``last_of`` for a stream of struct ``layout``: the bit of field
    ``name`` (``last``, ``group_end``) of a payload int."""
    offset = layout[name].offset
    return lambda payload: payload >> offset & 1


def run_bin(cycles):
    """The bin of ``RUN_BINS`` of a run of ``cycles`` held cycles."""
    return "1" if cycles == 1 else "2-3" if cycles <= 3 else "4+"


class HeldRuns:
    """Runs of cycles a handshake is held (valid, not ready), into
    ``point`` (a sampling function of :meth:`Coverage.point`): its bin of
    :data:`RUN_BINS` when a run ends, or ``True`` with ``lengths=False``
    (a point of one bin)."""

    def __init__(self, point, lengths=True):
        self.point, self.lengths, self.run = point, lengths, 0

    def sample(self, held):
        """Once a cycle: the handshake is held this cycle."""
        if held:
            self.run += 1
        else:
            self.close()

    def close(self):
        """End the run in progress, if any."""
        if self.run:
            self.point(run_bin(self.run) if self.lengths else True)
            self.run = 0


class _Stream:
    def __init__(self, cover, name, port, last_of, is_input, one_beat_rows=True):
        self.port, self.last_of, self.is_input = port, last_of, is_input
        self.beat_in_row = 0
        kind = "refused" if is_input else "stalled"
        self.held = HeldRuns(cover.point(f"{name}.{kind}", RUN_BINS))
        self.empty = cover.point(f"{name}.{'idle' if is_input else 'waiting'}", [True])
        self.last = cover.point(f"{name}.last", [True, False]) if last_of else None
        self.first_last = (cover.point(f"{name}.first_beat_last", [True])
                           if last_of and one_beat_rows else None)

    def ready_now(self):
        return bool(self.port.ready_now) if not self.is_input else bool(int(self.port.ready.value))

    def sample(self):
        """One cycle after the edge; True if a beat was held (valid, not ready)."""
        valid = bool(int(self.port.valid.value))
        ready = self.ready_now()
        held = valid and not ready
        self.held.sample(held)
        if ready and not valid:
            self.empty(True)
        if valid and ready and self.last is not None:
            last = bool(self.last_of(int(self.port.payload.value)))
            self.last(last)
            if last and self.beat_in_row == 0 and self.first_last is not None:
                self.first_last(True)
            self.beat_in_row = 0 if last else self.beat_in_row + 1
        return held

    def close(self):
        self.held.close()


class Coverage:
    """Cover points of one block, named ``<block>.<name>``, without stream
    sampling: :meth:`point`, :meth:`values`, :meth:`bounds`, :meth:`pairs`,
    :meth:`flags` and :meth:`report`."""

    def __init__(self, block):
        self.block = block
        self.names = []

    def point(self, name, bins):
        """A cover point ``name`` with ``bins``: returns its sampling function."""
        if name in coverage_db:       # one testbench may run twice in one simulator
            del coverage_db[name]
        self.names.append(name)
        return CoverPoint(name, xf=lambda value: value, bins=list(bins))(lambda value: None)

    def values(self, name, array, width):
        """Operand extremes of a signed ``width``-bit ``array``."""
        sample = self.point(f"{self.block}.{name}.extremes", EXTREME_BINS)
        present = set(np.unique(np.asarray(array, dtype=np.int64)).tolist())
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        for label, value in zip(EXTREME_BINS, (lo, hi, 0, -1, 1)):
            if value in present:
                sample(label)

    def bounds(self, name, values, lo, hi):
        """Values (lengths, addresses) at their exact bounds ``lo`` and ``hi``
        (the smallest and the largest accepted): bins ``lo`` and ``hi``."""
        sample = self.point(f"{self.block}.{name}.bounds", ["lo", "hi"])
        present = {int(v) for v in values}
        for label, value in (("lo", lo), ("hi", hi)):
            if value in present:
                sample(label)

    def pairs(self, name, sequence, kinds):
        """Back-to-back commands: ``sequence`` (each command's kind, in
        order) against every ordered pair of ``kinds``, bins ``"a>b"``."""
        sample = self.point(f"{self.block}.{name}.pairs", [f"{a}>{b}" for a in kinds for b in kinds])
        for first, second in zip(sequence, sequence[1:]):
            sample(f"{first}>{second}")

    def kinds(self, name, sequence, kinds):
        """Every kind of ``kinds`` present in ``sequence`` (a bin each)."""
        sample = self.point(f"{self.block}.{name}", list(kinds))
        for kind in sequence:
            sample(kind)

    def flags(self, name, bins, bits):
        """HDL cover bits: bin ``bins[i]`` hit if bit ``i`` of ``bits`` is set."""
        sample = self.point(f"{self.block}.{name}", bins)
        for i, label in enumerate(bins):
            if bits >> i & 1:
                sample(label)

    def hdl_streams(self, streams, bits):
        """The stream points of :class:`StreamCoverage` (``refused``/``idle``
        of an input, ``stalled``/``waiting`` of an output, ``full``) from a
        harness's HDL cover ``bits``
        (:func:`bertforge.sim.gemm_harness.engine_cover` of ``streams``,
        ``(name, is_input)`` pairs: four bits each, then ``full``)."""
        for i, (name, is_input) in enumerate(streams):
            word = bits >> 4 * i
            held, empty = ("refused", "idle") if is_input else ("stalled", "waiting")
            self.flags(f"{name}.{held}", RUN_BINS, word & 7)
            self.flags(f"{name}.{empty}", [True], word >> 3 & 1)
        self.flags("full", [True], bits >> 4 * len(streams) & 1)

    def report(self):
        return {name: {str(b): int(hits) for b, hits in coverage_db[name].detailed_coverage.items()}
                for name in self.names}


class StreamCoverage(Coverage):
    """Cover points of one block's streams (see the module docstring).

    ``inputs`` and ``outputs``: ``{name: (driver_or_monitor, last_of)}``,
    ``last_of`` None for a stream without ``last``; ``fixed_rows``: names of
    streams with no row of one beat (no ``first_beat_last`` point).
    """

    def __init__(self, block, inputs, outputs, fixed_rows=()):
        super().__init__(block)
        self.inputs = [_Stream(self, f"{block}.{name}", port, last_of, True, name not in fixed_rows)
                       for name, (port, last_of) in inputs.items()]
        self.outputs = [_Stream(self, f"{block}.{name}", port, last_of, False,
                                name not in fixed_rows)
                        for name, (port, last_of) in outputs.items()]
        self.full = self.point(f"{block}.full", [True])

    def sample(self):
        refused = [stream.sample() for stream in self.inputs]
        stalled = [stream.sample() for stream in self.outputs]
        if any(refused) and any(stalled):
            self.full(True)

    def report(self):
        for stream in self.inputs + self.outputs:
            stream.close()
        return super().report()
