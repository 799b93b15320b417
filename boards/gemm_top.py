"""Board top-level for a :class:`~bertforge.rtl.gemm.GemmEngine`, or an
N:M :class:`~bertforge.rtl.sparse_engine.SparseEngine` when the config's
``engine`` is a :class:`~bertforge.rtl.sparse_engine.SparseEngineConfig`:
UART host link, two banks of block RAM as the engine's external memory, a
command register, LEDs.

Host memories (``mem`` of the protocol's WRITE/READ):

- ``0`` data: the engine's memory, ``2**addr_width`` bytes (A, B and C live
  here at the addresses the command names), byte-addressed, read and write.
- ``1`` command: the bytes of one packed GEMM command
  (:attr:`GemmTopConfig.command_layout`: the dense engine's
  :func:`~bertforge.rtl.tile_scheduler.command_layout` or the sparse one's
  :func:`~bertforge.rtl.sparse_engine.sparse_command_layout`, little
  endian; see :func:`bertforge.boards.gemm_host.gemm_command_bytes`), write only.

``RUN`` (no arguments) hands the command to the engine and replies when its
completion arrives: ``OK`` with the cycles from start to completion, or
``BAD_ARGUMENT`` if the engine rejected the command (a size of 0, a matrix
outside memory, a bad N:M pattern). LEDs: 0 busy, 1 done at least once, 2 a
bad frame seen.

The memory is two banks of ``mem_width``-bit words (even and odd words), so
the two words an unaligned beat touches are always in different banks: one
read and one write port per bank, which maps onto plain block RAM.
Host accesses use the same ports while the engine is idle.
"""

from dataclasses import dataclass, replace

from amaranth.hdl import Cat, Const, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory

from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.serial_engine import gemm_engine
from bertforge.rtl.sparse_engine import SparseEngine, SparseEngineConfig, sparse_command_layout
from bertforge.rtl.stream import Queue, delay, stage
from bertforge.rtl.tile_scheduler import command_layout
from .systolic_top import BoardTop, BoardTopConfig, status_leds
from bertforge.rtl.errors import ParameterError

__all__ = ["GemmTopConfig", "GemmBoardTop", "board_engine_config", "engine_config_from_dict",
           "ENGINE_READ_LATENCY", "SERIAL_READ_LATENCY", "model_read_latency"]

#: Beats the engine's read-data queue holds (1 beat per cycle with the
#: 3-cycle read pipeline in front of it).
READ_QUEUE = 8
#: The top's read latency as the engines' cycle models count it (their
#: ``lat``): a request's first beat is in the read queue 4 cycles after its
#: handshake (bank addresses, bank words, byte rotation, each registered).
ENGINE_READ_LATENCY = 4
#: The same for the serial engine, which waits for every beat before its
#: next request: a beat is offered 6 cycles after its request's handshake,
#: as the simulation harness's with ``lat`` 3.
SERIAL_READ_LATENCY = 3


def model_read_latency(engine):
    """The ``lat`` at which the cycle model of ``engine`` (a GEMM engine
    config) counts this top's reads: :data:`SERIAL_READ_LATENCY` for the
    serial engine, else :data:`ENGINE_READ_LATENCY`."""
    return SERIAL_READ_LATENCY if engine.serial else ENGINE_READ_LATENCY


def board_engine_config(*, rows=4, cols=4, mem_kib=16, min_chunk=64, sparse=False, **fields):
    """A :class:`GemmConfig` (``sparse``: a :class:`SparseEngineConfig`)
    sized for a board: the narrowest memory word (``max(32, rows*width,
    cols*width)`` bits, and ``m_max*width`` for the sparse engine, rounded
    up to a power of two), ``addr_width`` from ``mem_kib``, short chunks
    (``min_chunk`` elements, or one memory word's); ``fields`` override."""
    width = 16 if fields.get("arith") in ("int16", "bf16") else fields.get("width", 8)
    need = max(32, rows * width, cols * width)
    if sparse:      # a group's M activations in one memory word
        need = max(need, fields.get("m_max", SparseEngineConfig.m_max) * width)
    mem_width = 1 << (need - 1).bit_length()
    values = dict(rows=rows, cols=cols, mem_width=mem_width,
                  addr_width=(mem_kib * 1024 - 1).bit_length(), dim_width=12,
                  k_chunk=max(min_chunk, mem_width // width), m_tile=max(rows, 4))
    values.update(fields)
    return (SparseEngineConfig if sparse else GemmConfig)(**values)


def engine_config_from_dict(raw):
    """The engine config of a saved :meth:`GemmTopConfig.to_dict`'s ``engine``:
    a :class:`SparseEngineConfig` if it has ``m_max``, else a :class:`GemmConfig`."""
    return (SparseEngineConfig if "m_max" in raw else GemmConfig)(**raw)


@dataclass(frozen=True, kw_only=True)
class GemmTopConfig(BoardTopConfig):
    """The engine (a :class:`GemmConfig`, or a :class:`SparseEngineConfig`
    for the N:M sparse engine), the UART divisor (clock / baud) and how many
    PEs of the dense engine may use DSP blocks (``None``: all; the sparse
    engine takes no limit)."""

    engine: GemmConfig = board_engine_config()
    divisor: int = 104
    max_dsp: int = None
    design_id: int          # the PING reply's design byte (from its BoardDesign)

    def __post_init__(self):
        self.check_link()
        if self.sparse and self.max_dsp is not None:
            raise ParameterError(f"max_dsp must be None for the sparse engine (its array has no "
                                 f"DSP limit), not {self.max_dsp!r}")
        replace(self.engine.systolic, max_dsp=self.max_dsp)   # checks max_dsp
        if self.engine.addr_width > 16:
            raise ParameterError(f"engine.addr_width must be at most 16 (the host link addresses "
                             f"64 KiB), not {self.engine.addr_width}")

    @classmethod
    def from_dict(cls, raw):
        return cls(**{**raw, "engine": engine_config_from_dict(raw["engine"])})

    @property
    def sparse(self):
        """True for the N:M sparse engine."""
        return isinstance(self.engine, SparseEngineConfig)

    @property
    def command_layout(self):
        """The engine's command: :func:`command_layout` or :func:`sparse_command_layout`."""
        return (sparse_command_layout if self.sparse else command_layout)(self.engine)

    @property
    def command_bytes(self):
        return (self.command_layout.size + 7) // 8

    def make_engine(self):
        """The engine component: a :class:`SparseEngine`, or a
        :class:`GemmEngine` with ``max_dsp``."""
        if self.sparse:
            return SparseEngine(self.engine)
        return gemm_engine(self.engine, max_dsp=self.max_dsp)


class GemmBoardTop(BoardTop):
    """Host link + banked memory + command register around one GEMM engine
    (dense or N:M sparse: :meth:`GemmTopConfig.make_engine`).

    Pipelined for 100 MHz on ECP5 (no logic after a block RAM output but a
    register, nothing wide between registers): write requests (the
    engine's, or the host's byte writes, registered first) pass two
    stages, the request register, then the byte rotation, byte mask and
    bank addresses into the registers that drive the bank write ports; the
    engine's completion is taken only once that pipeline is empty, so
    neither the reply nor the next command overtakes a write. Engine reads:
    bank addresses from registers, the two bank words registered, rotated
    into a register, then the read queue (3 cycles). Host reads take
    ``READ_LATENCY`` = 3 cycles; the run handshake to the link is
    registered.
    """

    Config = GemmTopConfig

    def build(self, m, link, cfg):
        ecfg = cfg.engine
        MB = ecfg.mem_bytes
        mbb = MB.bit_length() - 1
        W = ecfg.mem_width
        m.submodules.engine = engine = cfg.make_engine()

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

        # Engine reads: one request at a time, one beat per cycle into the
        # read queue: bank addresses (registers) -> bank words (registered)
        # -> rotation into the queue. ``outstanding`` counts the beats issued
        # and not yet taken by the engine, so the queue always has room.
        rq = engine.rd_req
        out = m.submodules.rdata = Queue(shape=W, depth=READ_QUEUE)
        word = Signal(ecfg.addr_width - mbb)
        bank_addr = [Signal(len(rports[0].addr), name=f"rd_addr_{i}") for i in range(2)]
        offset = Signal(mbb)
        left = Signal.like(rq.payload.beats)
        outstanding = Signal(range(READ_QUEUE + 1))
        issue = (left != 0) & (outstanding < READ_QUEUE - 1)
        accept = rq.valid & rq.ready
        m.d.comb += rq.ready.eq(busy & ((left == 0) | ((left == 1) & issue)))
        next_word = Mux(accept, rq.payload.addr >> mbb, word + 1)
        with m.If(accept | issue):
            even_a, odd_a, _ = split(next_word)
            m.d.sync += [word.eq(next_word), bank_addr[0].eq(even_a), bank_addr[1].eq(odd_a)]
        with m.If(issue):
            m.d.sync += left.eq(left - 1)
        with m.If(accept):
            m.d.sync += [offset.eq(rq.payload.addr[:mbb]), left.eq(rq.payload.beats)]
        m.d.sync += outstanding.eq(outstanding + issue - (out.o.valid & out.o.ready))
        read = stage(m, {"odd": word[0], "offset": offset}, "rd_issue", flags={"valid": issue})
        beat = stage(m, {"even": rports[0].data, "odd_word": rports[1].data,
                         "odd": read["odd"], "offset": read["offset"]}, "rd_beat",
                     flags={"valid": read["valid"]})
        lo = Mux(beat["odd"], beat["odd_word"], beat["even"])
        hi = Mux(beat["odd"], beat["even"], beat["odd_word"])
        rotated = stage(m, {"data": (Cat(lo, hi) >> (beat["offset"] * 8))[:W]}, "rd_rotated",
                        flags={"valid": beat["valid"]})
        m.d.comb += [out.i.payload.eq(rotated["data"]), out.i.valid.eq(rotated["valid"])]
        wiring.connect(m, out.o, engine.rd_data)

        # Writes, unaligned and byte-masked over the two banks: the engine's,
        # and the host's byte writes to the data memory (mem 0, while idle;
        # registered first, as they come straight from the link's frame
        # buffer, like the command bytes).
        host = stage(m, {"addr": link.mem_addr, "data": link.mem_wdata}, "host_wr",
                     flags={"valid": link.mem_we & (link.mem_sel == 0) & ~busy,
                            "command": link.mem_we & (link.mem_sel == 1) & ~busy})
        wr = engine.wr_req
        m.d.comb += wr.ready.eq(busy & ~host["valid"])
        nbytes = Mux(host["valid"], 1, wr.payload.bytes)
        request = stage(m, {"addr": Mux(host["valid"], host["addr"], wr.payload.addr),
                            "data": Mux(host["valid"], host["data"], wr.payload.data),
                            "keep": Cat(*(lane < nbytes for lane in range(MB)))}, "wr_req",
                        flags={"valid": host["valid"] | (wr.valid & wr.ready)})
        w_offset = request["addr"][:mbb]
        w_even, w_odd, w_is_odd = split(request["addr"] >> mbb)
        mask = Mux(request["valid"], Cat(request["keep"], Const(0, MB)) << w_offset, 0)
        data = request["data"]
        for bit, amount in enumerate(w_offset):      # rotate left by w_offset bytes
            data = Mux(amount, data.rotate_left(8 << bit), data)
        # Both banks take the rotated beat: word ``w`` its bytes from w_offset
        # on, word ``w + 1`` the ones below.
        write = stage(m, {"addr_even": w_even, "addr_odd": w_odd, "data": data,
                          "en_even": Mux(w_is_odd, mask[MB:2 * MB], mask[:MB]),
                          "en_odd": Mux(w_is_odd, mask[:MB], mask[MB:2 * MB])}, "wr_bank",
                      flags={"valid": request["valid"]})
        for port, name in zip(wports, ("even", "odd")):
            m.d.comb += [port.addr.eq(write[f"addr_{name}"]), port.data.eq(write["data"]),
                         port.en.eq(write[f"en_{name}"])]
        writing = host["valid"] | request["valid"] | write["valid"]

        # Host reads (while idle), READ_LATENCY = 3: address -> bank words
        # (registered as ``beat``) -> byte register.
        host_word = link.mem_addr >> mbb
        for index in range(2):
            m.d.comb += rports[index].addr.eq(Mux(busy, bank_addr[index], host_word >> 1))
        read_lane = Signal(mbb)
        read_bank = Signal()
        read_ok = Signal()
        with m.If(link.mem_re):
            m.d.sync += [read_lane.eq(link.mem_addr[:mbb]), read_bank.eq(host_word[0]),
                         read_ok.eq(link.mem_sel == 0)]
        host_data = Mux(read_bank, beat["odd_word"], beat["even"])
        rdata = Signal(8)
        with m.If(delay(m, link.mem_re, 2, "host_re", reset_less=False)):   # held until the next read
            m.d.sync += rdata.eq(host_data.word_select(read_lane, 8) & read_ok.replicate(8))
        m.d.comb += link.mem_rdata.eq(rdata)

        command = Signal(8 * cfg.command_bytes)
        with m.If(host["command"]):
            for index in range(cfg.command_bytes):
                with m.If(host["addr"] == index):
                    m.d.sync += command[8 * index:8 * index + 8].eq(host["data"])

        # Run: push the command, wait for its completion (taken once the
        # write pipeline is empty), answer the link a cycle later.
        queued = Signal()
        cycles = Signal(32)
        finished = Signal()
        error = Signal()
        m.d.comb += [engine.cmd.payload.eq(command[:cfg.command_layout.size]),
                     engine.cmd.valid.eq(queued), engine.done.ready.eq(busy & ~writing)]
        with m.If(engine.cmd.valid & engine.cmd.ready):
            m.d.sync += queued.eq(0)
        with m.If(link.run_start & ~busy):
            m.d.sync += [busy.eq(1), queued.eq(1), cycles.eq(0)]
        with m.Elif(busy):
            m.d.sync += cycles.eq(cycles + 1)
        m.d.sync += finished.eq(0)
        with m.If(engine.done.valid & engine.done.ready):
            m.d.sync += [busy.eq(0), finished.eq(1), error.eq(engine.done.payload.error)]
        m.d.comb += [link.run_done.eq(finished & ~error), link.run_error.eq(finished & error),
                     link.run_cycles.eq(cycles)]
        return status_leds(m, link, busy)
