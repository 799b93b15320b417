"""Board top-level for a :class:`~bertforge.rtl.gemm.GemmEngine`:
UART host link, one block RAM as the engine's external memory, a command
register, LEDs.

Host memories (``mem`` of the protocol's WRITE/READ):

- ``0`` data: the engine's memory, ``2**addr_width`` bytes (A, B and C live
  here at the addresses the command names), byte-addressed, read and write.
- ``1`` command: the bytes of one packed GEMM command
  (:func:`bertforge.rtl.tile_scheduler.command_layout`, little endian; see
  :func:`bertforge.boards.host.gemm_command_bytes`), write only.

``RUN`` (no arguments) hands the command to the engine and replies when its
completion arrives: ``OK`` with the cycles from start to completion, or
``BAD_ARGUMENT`` if the engine rejected the command (a size of 0, a matrix
outside memory). LEDs: 0 busy, 1 done at least once, 2 a bad frame seen.

The memory is two banks of ``mem_width``-bit words (even and odd words), so
the two words an unaligned beat touches are always in different banks: one
read and one write port per bank, which maps onto plain block RAM.
Host accesses use the same ports while the engine is idle.
"""

from dataclasses import dataclass, replace

from amaranth.hdl import Cat, Const, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory

from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.stream import Queue
from bertforge.rtl.tile_scheduler import command_layout
from .systolic_top import BoardTop, BoardTopConfig, status_leds
from bertforge.rtl.errors import ParameterError

__all__ = ["GemmTopConfig", "GemmBoardTop", "board_engine_config"]


def board_engine_config(*, rows=4, cols=4, mem_kib=16, **fields):
    """A :class:`GemmConfig` sized for a board: the narrowest memory word
    (``max(32, rows*width, cols*width)`` bits rounded up to a power of two),
    ``addr_width`` from ``mem_kib``, short chunks; ``fields`` override."""
    width = fields.get("width", 8)
    need = max(32, rows * width, cols * width)
    mem_width = 1 << (need - 1).bit_length()
    values = dict(rows=rows, cols=cols, mem_width=mem_width,
                  addr_width=(mem_kib * 1024 - 1).bit_length(), dim_width=12,
                  k_chunk=max(64, mem_width // width), m_tile=max(rows, 4))
    values.update(fields)
    return GemmConfig(**values)


@dataclass(frozen=True, kw_only=True)
class GemmTopConfig(BoardTopConfig):
    """The engine, the UART divisor (clock / baud) and how many PEs may use
    DSP blocks (``None``: all)."""

    engine: GemmConfig = board_engine_config()
    divisor: int = 104
    max_dsp: int = None
    design_id: int          # the PING reply's design byte (from its BoardDesign)

    def __post_init__(self):
        self.check_link()
        replace(self.engine.systolic, max_dsp=self.max_dsp)   # checks max_dsp
        if self.engine.addr_width > 16:
            raise ParameterError(f"engine.addr_width must be at most 16 (the host link addresses "
                             f"64 KiB), not {self.engine.addr_width}")

    @property
    def command_bytes(self):
        return (command_layout(self.engine).size + 7) // 8


class GemmBoardTop(BoardTop):
    """Host link + banked memory + command register around one GEMM engine."""

    Config = GemmTopConfig

    def build(self, m, link, cfg):
        ecfg = cfg.engine
        MB = ecfg.mem_bytes
        mbb = MB.bit_length() - 1
        W = ecfg.mem_width
        m.submodules.engine = engine = GemmEngine(ecfg, max_dsp=cfg.max_dsp)

        busy = Signal()
        depth = 1 << (ecfg.addr_width - mbb - 1)
        banks = [Memory(shape=W, depth=depth, init=[]) for _ in range(2)]
        m.submodules.bank_even, m.submodules.bank_odd = banks
        rports = [bank.read_port(transparent_for=()) for bank in banks]
        wports = [bank.write_port(granularity=8) for bank in banks]

        def split(word):
            """(even-bank address, odd-bank address, word is odd) of words
            ``word`` and ``word + 1``."""
            return (word + 1) >> 1, word >> 1, word[0]

        # Engine reads: one request at a time, one beat per cycle into a small queue.
        rq = engine.rd_req
        out = m.submodules.rdata = Queue(shape=W, depth=4)
        word = Signal(ecfg.addr_width - mbb)
        offset = Signal(mbb)
        left = Signal.like(rq.payload.beats)
        pending = Signal()
        issue = (left != 0) & (out.level + pending < 3)
        m.d.comb += rq.ready.eq(busy & ((left == 0) | ((left == 1) & issue)))
        with m.If(issue):
            m.d.sync += [word.eq(word + 1), left.eq(left - 1)]
        with m.If(rq.valid & rq.ready):
            m.d.sync += [word.eq(rq.payload.addr >> mbb), offset.eq(rq.payload.addr[:mbb]),
                         left.eq(rq.payload.beats)]
        even_a, odd_a, odd = split(word)
        was_odd = Signal()
        read_offset = Signal(mbb)
        m.d.sync += [pending.eq(issue), was_odd.eq(odd), read_offset.eq(offset)]
        lo = Mux(was_odd, rports[1].data, rports[0].data)
        hi = Mux(was_odd, rports[0].data, rports[1].data)
        m.d.comb += [out.i.payload.eq((Cat(lo, hi) >> (read_offset * 8))[:W]),
                     out.i.valid.eq(pending)]
        wiring.connect(m, out.o, engine.rd_data)

        # Engine writes: unaligned, byte-masked, over the two banks.
        wr = engine.wr_req
        m.d.comb += wr.ready.eq(busy)
        shifted = Signal(2 * W)
        mask = Signal(2 * MB)
        w_word = wr.payload.addr >> mbb
        m.d.comb += [
            shifted.eq(Cat(wr.payload.data, Const(0, W)) << (wr.payload.addr[:mbb] * 8)),
            mask.eq(Mux(wr.valid & busy, ((Const(1, 2 * MB + 1) << wr.payload.bytes) - 1)
                        << wr.payload.addr[:mbb], 0)),
        ]
        w_even, w_odd, w_is_odd = split(w_word)

        # Host bytes: data memory (mem 0) while idle, command register (mem 1).
        host_word = link.mem_addr >> mbb
        lane = link.mem_addr[:mbb]
        host_bank = host_word[0]
        host_we = link.mem_we & (link.mem_sel == 0) & ~busy
        with m.If(busy):
            m.d.comb += [
                rports[0].addr.eq(even_a), rports[1].addr.eq(odd_a),
                wports[0].addr.eq(w_even), wports[1].addr.eq(w_odd),
                wports[0].data.eq(Mux(w_is_odd, shifted[W:], shifted[:W])),
                wports[1].data.eq(Mux(w_is_odd, shifted[:W], shifted[W:])),
                wports[0].en.eq(Mux(w_is_odd, mask[MB:], mask[:MB])),
                wports[1].en.eq(Mux(w_is_odd, mask[:MB], mask[MB:])),
            ]
        with m.Else():
            for index in range(2):
                m.d.comb += [rports[index].addr.eq(host_word >> 1),
                             wports[index].addr.eq(host_word >> 1),
                             wports[index].data.eq(link.mem_wdata.replicate(MB))]
                with m.If(host_we & (host_bank == index)):
                    m.d.comb += wports[index].en.eq(1 << lane)

        # Host reads: READ_LATENCY = 2 (address -> bank word -> byte register).
        read_lane = Signal(mbb)
        read_bank = Signal()
        read_ok = Signal()
        with m.If(link.mem_re):
            m.d.sync += [read_lane.eq(lane), read_bank.eq(host_bank),
                         read_ok.eq(link.mem_sel == 0)]
        host_data = Mux(read_bank, rports[1].data, rports[0].data)
        rdata = Signal(8)
        read_now = Signal()
        m.d.sync += read_now.eq(link.mem_re)
        with m.If(read_now):   # held until the next read
            m.d.sync += rdata.eq(host_data.word_select(read_lane, 8) & read_ok.replicate(8))
        m.d.comb += link.mem_rdata.eq(rdata)

        command = Signal(8 * cfg.command_bytes)
        with m.If(link.mem_we & (link.mem_sel == 1) & ~busy):
            for index in range(cfg.command_bytes):
                with m.If(link.mem_addr == index):
                    m.d.sync += command[8 * index:8 * index + 8].eq(link.mem_wdata)

        # Run: push the command, wait for its completion.
        queued = Signal()
        cycles = Signal(32)
        m.d.comb += [engine.cmd.payload.eq(command[:command_layout(ecfg).size]),
                     engine.cmd.valid.eq(queued), engine.done.ready.eq(1)]
        with m.If(engine.cmd.valid & engine.cmd.ready):
            m.d.sync += queued.eq(0)
        with m.If(link.run_start & ~busy):
            m.d.sync += [busy.eq(1), queued.eq(1), cycles.eq(0)]
        with m.Elif(busy):
            m.d.sync += cycles.eq(cycles + 1)
        with m.If(engine.done.valid):
            m.d.sync += busy.eq(0)
            m.d.comb += [link.run_done.eq(~engine.done.payload.error),
                         link.run_error.eq(engine.done.payload.error)]
        m.d.comb += link.run_cycles.eq(cycles + 1)
        return status_leds(m, link, busy)
