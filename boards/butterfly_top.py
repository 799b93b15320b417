"""Board top-level for a :class:`~bertforge.rtl.butterfly.ButterflyEngine`:
UART host link, block RAM for the input vectors, the weights and the
results, a scale register, a sequencer, LEDs (the memories and sequencer of
:mod:`~bertforge.boards.systolic_top`).

Memories (host byte addresses; a word is ``ceil(bits / 8)`` bytes rounded
up to a power of two, little endian, low bits first):

- ``0`` X: word k = beat k of the engine's ``x`` stream (``lanes`` complex
  elements, ``re`` then ``im``, ``width`` bits each; lane l = vector l of
  its group), ``depth`` words: group g's n beats at words ``g*n .. g*n+n-1``.
- ``1`` W: word j = beat j of the ``w`` stream (``[w00, w01, w10, w11]``,
  ``weight_width`` bits each; stage major, butterfly minor),
  ``log2(n_max) * n_max / 2`` words. Linear mode only.
- ``2`` Y: word k = beat k of ``y`` (its data, without ``last``), ``depth``
  words. Only Y can be read back.
- ``3`` scale: linear mode's requantization, 3 bytes: ``mult`` (2 bytes),
  ``shift`` (1 byte, low 6 bits used); after reset ``mult = 1, shift = 0``.
  Write only.

``RUN`` takes 4 bytes, one little-endian word laid out as the low 32 bits of
the engine's ``cmd`` payload: ``mode`` in bits 1:0 (0 linear, 1 fft, 2 ifft),
``n`` in bits 17:2, ``groups`` in bits 31:18 (groups of ``lanes`` vectors).
It answers ``BAD_ARGUMENT`` unless the engine would take the command
(:func:`~bertforge.rtl.butterfly.command_is_valid`: ``n`` a power of two in
``[2, n_max]``, ``groups >= 1``), ``mode`` is not 3 and the ``groups * n``
beats fit ``depth``. Linear mode first loads the ``(n/2) log2 n`` weights of
W into the engine (a weight command), then runs the data command; FFTs run
the data command alone. The X beats stream at full speed, the ``groups * n``
result beats are written to Y from word 0, and the reply carries the cycles
from start to the last result written:
``butterfly_cycles(engine, n, groups * lanes) + 1``, plus
``(n/2) log2 n + 1`` in linear mode
(:func:`bertforge.boards.butterfly_board_tb.board_cycles`).
LEDs: 0 busy, 1 done at least once, 2 a bad frame seen.
"""

from dataclasses import dataclass

from amaranth.hdl import Mux, Signal

from bertforge.rtl.butterfly import MODES, ButterflyConfig, ButterflyEngine, command_is_valid
from bertforge.rtl.params import check_int
from .systolic_top import (BoardTop, BoardTopConfig, RunSequencer, _MemoryToStream,
                           check_addressable, link_memories)
from bertforge.rtl.errors import ParameterError

__all__ = ["ButterflyTopConfig", "ButterflyBoardTop", "RUN_MODES", "SCALE_MEM",
           "run_is_valid"]

#: Modes a ``RUN`` takes (the engine's ``MODES`` codes).
RUN_MODES = ("linear", "fft", "ifft")

#: Host memory of the scale register.
SCALE_MEM = 3

#: Most result beats: ``groups`` has 14 bits in the ``RUN`` word.
MAX_DEPTH = 1 << 14


def run_is_valid(config, mode, n, groups):
    """True if the top starts a ``RUN`` (``mode`` a code of :data:`RUN_MODES`),
    else it answers ``BAD_ARGUMENT``."""
    return (0 <= mode < len(RUN_MODES) and command_is_valid(config.engine, mode, n, groups)
            and groups * n <= config.depth)


@dataclass(frozen=True, kw_only=True)
class ButterflyTopConfig(BoardTopConfig):
    """The engine, the UART divisor (clock / baud) and ``depth``, the beats
    memories X and Y hold (``groups * n`` of one run)."""

    engine: ButterflyConfig = ButterflyConfig()
    divisor: int = 104
    depth: int = 256
    design_id: int          # the PING reply's design byte (from its BoardDesign)

    def __post_init__(self):
        self.check_link()
        check_int("depth", self.depth, maximum=MAX_DEPTH)
        if self.depth < self.engine.n_max:
            raise ParameterError(f"depth must be at least n_max = {self.engine.n_max} (one group "
                             f"of the longest vectors), not {self.depth}")
        check_addressable("depth", self.depth, "X", self.word_bytes()[0], "engine")

    def word_bits(self):
        """Bits used of a word of X (an ``x`` beat), W (a ``w`` beat), Y (a ``y`` beat's data)."""
        e = self.engine
        return 2 * e.lanes * e.width, 4 * e.weight_width, 2 * e.lanes * e.width

    def depths(self):
        e = self.engine
        return self.depth, e.log_n_max * e.n_max // 2, self.depth


class ButterflyBoardTop(BoardTop):
    """Host link + memories + scale register + sequencer around one butterfly engine."""

    Config = ButterflyTopConfig

    def build(self, m, link, cfg):
        ecfg = cfg.engine
        m.submodules.engine = engine = ButterflyEngine(ecfg)
        mem_x, mem_w, mem_y = link_memories(m, link, cfg.word_bytes(), cfg.depths())

        # Scale register (memory 3): mult (2 bytes), shift (1 byte).
        mult = Signal(16, init=1)
        shift = Signal(6)
        with m.If(link.mem_we & (link.mem_sel == SCALE_MEM)):
            for index, target in enumerate((mult[:8], mult[8:], shift)):
                with m.If(link.mem_addr == index):
                    m.d.sync += target.eq(link.mem_wdata)

        # RUN word: mode[1:0], n[17:2], groups[31:18].
        mode, n, groups = link.run_args[:2], link.run_args[2:18], link.run_args[18:32]
        logn = Signal(range(ecfg.log_n_max + 1))
        for j in range(1, ecfg.log_n_max + 1):
            with m.If(n == (1 << j)):
                m.d.comb += logn.eq(j)
        linear = mode == MODES["linear"]
        x_beats = groups << logn
        w_beats = Mux(linear, (logn << logn) >> 1, 0)
        bad_args = (mode == MODES["weights"]) | (logn == 0) | (groups == 0) | (x_beats > cfg.depth)
        run = RunSequencer(m, link, bad_args, x_beats)

        # Engine commands: in linear mode the weight load, then the data command.
        cmd_valid = Signal()
        weights_next = Signal()
        run_mode = Signal(2)
        run_n = Signal(16)
        run_groups = Signal(14)
        with m.If(run.start):
            m.d.sync += [cmd_valid.eq(1), weights_next.eq(linear), run_mode.eq(mode),
                         run_n.eq(n), run_groups.eq(groups)]
        with m.Elif(engine.cmd.valid & engine.cmd.ready):
            m.d.sync += weights_next.eq(0)
            with m.If(~weights_next):
                m.d.sync += cmd_valid.eq(0)
        cmd = engine.cmd.payload
        m.d.comb += [engine.cmd.valid.eq(cmd_valid),
                     cmd.mode.eq(Mux(weights_next, MODES["weights"], run_mode)),
                     cmd.n.eq(run_n), cmd.groups.eq(run_groups),
                     cmd.mult.eq(mult), cmd.shift.eq(shift)]

        x_reader = _MemoryToStream(m, mem_x.read_port(), engine.x, x_beats, run.start, "x_rd")
        w_reader = _MemoryToStream(m, mem_w.read_port(), engine.w, w_beats, run.start, "w_rd")
        x_bits, w_bits, _ = cfg.word_bits()
        m.d.comb += [engine.x.payload.as_value().eq(x_reader.data[:x_bits]),
                     engine.w.payload.as_value().eq(w_reader.data[:w_bits])]
        run.write_results(m, mem_y, engine.y)
        return run.leds
