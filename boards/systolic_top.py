"""Board top-level for a :class:`~bertforge.rtl.systolic.SystolicArray`:
UART host link, block RAM for operands and results, a sequencer, LEDs.

Memories (host byte addresses; a word is ``ceil(bits / 8)`` bytes rounded
up to a power of two, little endian, element 0 in the low bits, as :mod:`bertforge.sim.stream_tb` packs):

- ``0`` A: word k = beat k of the ``a`` stream (R elements), ``k_max`` words.
- ``1`` B: word k = beat k of the ``b`` stream (C elements): OS ``k_max``
  words (rows of B), WS R words (the weight block).
- ``2`` C: word i = result row i (C accumulators): OS R words, WS ``k_max``.
  Only C can be read back.

``RUN`` takes K (2 bytes, 1 to ``k_max``; else ``BAD_ARGUMENT``), streams A and B through the array at full speed
and writes the result rows to C; the reply carries the cycles from start to
the last result row. LEDs: 0 busy, 1 done at least once, 2 a bad frame seen.
"""

from dataclasses import dataclass, fields

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from bertforge.rtl.host_link import HostLink
from bertforge.rtl.params import check_instance, check_int
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.rtl.errors import ParameterError
from bertforge.rtl.uart import Uart, UartConfig

__all__ = ["SystolicTopConfig", "SystolicBoardTop", "link_memories", "RunSequencer",
           "BOARD_TOP_PORTS", "uart_host_link", "BoardTopConfig", "BoardTop", "pow2_bytes", "MAX_BYTES", "check_addressable", "status_leds"]


#: Bytes the host link addresses in one memory (16-bit addresses).
MAX_BYTES = 1 << 16


def check_addressable(name, value, memory, word_bytes, what):
    """``value`` words (the field ``name``) of ``word_bytes`` bytes in
    ``memory`` fit the :data:`MAX_BYTES` the host link addresses, else a
    ``ParameterError`` naming the most this ``what`` (array, engine, unit)
    takes."""
    if word_bytes * value > MAX_BYTES:
        raise ParameterError(f"{name} must be at most {MAX_BYTES // word_bytes} for this {what} "
                             f"(memory {memory} has {word_bytes}-byte words and the host link "
                             f"addresses {MAX_BYTES} bytes), not {value}")


def pow2_bytes(bits):
    """Bytes of a memory word of ``bits`` bits, rounded up to a power of two,
    so that byte addresses split into word and lane with wires, not dividers."""
    return 1 << (((bits + 7) // 8) - 1).bit_length()


class BoardTopConfig:
    """Base of the board-top configs (frozen dataclasses): the first field is
    the block's config, ``divisor`` the UART divisor (clock / baud) and
    ``design_id`` the PING reply's design byte."""

    @classmethod
    def _block_field(cls):
        return fields(cls)[0]

    @property
    def block(self):
        """The block's config (the first field)."""
        return getattr(self, self._block_field().name)

    def check_link(self, *, article="a"):
        """The block's config type, the UART divisor and the design byte."""
        field = self._block_field()
        check_instance(field.name, self.block, field.type, article=article)
        UartConfig(divisor=self.divisor)
        check_int("design_id", self.design_id, minimum=0, maximum=255)

    @property
    def name(self):
        return f"board_{self.block.name}"

    def to_dict(self):
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        return {**values, self._block_field().name: self.block.to_dict()}

    @classmethod
    def from_dict(cls, raw):
        field = cls._block_field()
        return cls(**{**raw, field.name: field.type(**raw[field.name])})

    def word_bytes(self):
        """Bytes per word of each memory (:func:`pow2_bytes` of :meth:`word_bits`)."""
        return tuple(pow2_bytes(bits) for bits in self.word_bits())


@dataclass(frozen=True, kw_only=True)
class SystolicTopConfig(BoardTopConfig):
    """The array, the UART divisor (clock / baud) and the longest K."""

    array: SystolicConfig = SystolicConfig()
    divisor: int = 104
    k_max: int = 256
    design_id: int          # the PING reply's design byte (from its BoardDesign)

    def __post_init__(self):
        self.check_link()
        check_int("k_max", self.k_max, maximum=1 << 15)

    def word_bits(self):
        """Bits of a word of A (an ``a`` beat's data), B (a ``b`` beat), C (a row)."""
        a = self.array
        return a.rows * a.width, a.cols * a.width, a.cols * a.acc_width

    def depths(self):
        a = self.array
        if a.dataflow == "os":
            return self.k_max, self.k_max, a.rows
        return self.k_max, a.rows, self.k_max


#: The ports of a board top-level (what :func:`bertforge.boards.build.connect_uart_top` wires).
BOARD_TOP_PORTS = {"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1), "leds": Out(3)}


def uart_host_link(m, top, divisor, design_id):
    """A :class:`~bertforge.rtl.uart.Uart` on ``top``'s UART pins and a
    :class:`~bertforge.rtl.host_link.HostLink` behind it (added to ``m`` as
    ``uart`` and ``link``); returns the link."""
    m.submodules.uart = uart = Uart(UartConfig(divisor=divisor))
    m.submodules.link = link = HostLink(design_id=design_id)
    wiring.connect(m, uart.rx, link.rx)
    wiring.connect(m, link.tx, uart.tx)
    m.d.comb += [uart.rx_pin.eq(top.uart_rx), top.uart_tx.eq(uart.tx_pin)]
    return link


def status_leds(m, link, busy):
    """The board top's LEDs: 0 ``busy``, 1 a run done at least once, 2 a bad frame seen."""
    done_once = Signal()
    with m.If(link.run_done):
        m.d.sync += done_once.eq(1)
    return Cat(busy, done_once, link.bad_frames != 0)


class _MemoryToStream:
    """Reads words ``0 .. count-1`` of a memory read port into a stream,
    one word per cycle while the stream is ready."""

    def __init__(self, m, port, stream, count, start, name):
        pointer = Signal(len(port.addr) + 1, name=f"{name}_ptr")
        remaining = Signal(17, name=f"{name}_remaining")
        valid = Signal(name=f"{name}_valid")
        advance = ~valid | stream.ready
        m.d.comb += [port.addr.eq(pointer), port.en.eq(advance), stream.valid.eq(valid)]
        with m.If(start):
            m.d.sync += [pointer.eq(0), remaining.eq(count), valid.eq(0)]
        with m.Elif(advance):
            m.d.sync += valid.eq(remaining != 0)
            with m.If(remaining != 0):
                m.d.sync += [pointer.eq(pointer + 1), remaining.eq(remaining - 1)]
        self.data = port.data
        self.last = Signal(name=f"{name}_last")
        self.index = Signal.like(pointer, name=f"{name}_index")
        with m.If(advance):
            m.d.sync += [self.index.eq(pointer), self.last.eq(remaining == 1)]


def link_memories(m, link, word_bytes, depths):
    """Block RAMs A, B and C (``word_bytes[i]`` bytes by ``depths[i]`` words)
    on the host link's byte bus: the host writes byte lanes of A and B and
    reads C (A and B read as 0; ``READ_LATENCY`` = 2). Returns the three
    memories (added to ``m`` as ``mem_a``, ``mem_b``, ``mem_c``)."""
    mems = []
    for index, (nbytes, depth) in enumerate(zip(word_bytes, depths)):
        mem = Memory(shape=8 * nbytes, depth=depth, init=[])
        m.submodules[f"mem_{'abc'[index]}"] = mem
        mems.append(mem)
    mem_a, mem_b, mem_c = mems

    # Host writes into A and B, byte lanes of a word.
    for index, mem in enumerate((mem_a, mem_b)):
        port = mem.write_port(granularity=8)
        nbytes = word_bytes[index]
        m.d.comb += [port.addr.eq(link.mem_addr // nbytes),
                     port.data.eq(link.mem_wdata.replicate(nbytes))]
        with m.If(link.mem_we & (link.mem_sel == index)):
            m.d.comb += port.en.eq(1 << (link.mem_addr % nbytes))

    # Host reads from C (A and B read as 0), READ_LATENCY = 2.
    c_host = mem_c.read_port()
    lane = Signal(range(word_bytes[2]))
    is_c = Signal()
    m.d.comb += [c_host.addr.eq(link.mem_addr // word_bytes[2]), c_host.en.eq(link.mem_re)]
    with m.If(link.mem_re):
        m.d.sync += [lane.eq(link.mem_addr % word_bytes[2]), is_c.eq(link.mem_sel == 2)]
    rdata = Signal(8)
    m.d.sync += rdata.eq(c_host.data.word_select(lane, 8) & is_c.replicate(8))
    m.d.comb += link.mem_rdata.eq(rdata)
    return mems


class RunSequencer:
    """The RUN handshake of a board top: ``start`` (a ``RUN`` with good
    arguments while idle; ``bad_args`` answers ``BAD_ARGUMENT``), ``busy``
    until ``result_rows`` (a value taken at ``start``) rows of the block's
    result stream are written to C (:meth:`write_results`), and the cycles
    from ``start`` to the last row for the reply. ``leds``: busy, done at
    least once, a bad frame seen."""

    def __init__(self, m, link, bad_args, result_rows):
        self.link = link
        self.busy = busy = Signal()
        self.cycles = cycles = Signal(32)
        self.rows_left = rows_left = Signal(17)
        self.start = start = Signal()
        m.d.comb += start.eq(link.run_start & ~busy & ~bad_args)
        m.d.sync += link.run_error.eq(link.run_start & bad_args)
        with m.If(start):
            m.d.sync += [busy.eq(1), cycles.eq(0), rows_left.eq(result_rows)]
        with m.Elif(busy):
            m.d.sync += cycles.eq(cycles + 1)

    def write_results(self, m, mem_c, results):
        """Rows of the ``results`` stream (always ready) into C from word 0;
        the last one ends the run."""
        link, busy, rows_left = self.link, self.busy, self.rows_left
        c_write = mem_c.write_port()
        row = Signal(range(max(mem_c.depth, 2)))
        m.d.comb += [results.ready.eq(1), c_write.addr.eq(row),
                     c_write.data.eq(results.payload.data.as_value())]
        with m.If(self.start):
            m.d.sync += row.eq(0)
        with m.Elif(results.valid & busy):
            m.d.comb += c_write.en.eq(1)
            m.d.sync += [row.eq(row + 1), rows_left.eq(rows_left - 1)]
            with m.If(rows_left == 1):
                m.d.sync += busy.eq(0)
                m.d.comb += link.run_done.eq(1)
        m.d.comb += link.run_cycles.eq(self.cycles + 1)
        self.leds = status_leds(m, link, busy)


class BoardTop(wiring.Component):
    """Base of the board top-levels: a config of class :attr:`Config`, the
    :data:`BOARD_TOP_PORTS`, the host link (:func:`uart_host_link`); a
    subclass defines ``build(m, link, cfg)``, which adds the block and its
    memories and sequencer around ``link`` to ``m`` and returns the value of
    the LEDs."""

    Config = BoardTopConfig

    def __init__(self, config):
        self.config = check_instance("config", config, self.Config)
        super().__init__(BOARD_TOP_PORTS)

    def elaborate(self, platform):
        m = Module()
        link = uart_host_link(m, self, self.config.divisor, self.config.design_id)
        m.d.comb += self.leds.eq(self.build(m, link, self.config))
        return m


class SystolicBoardTop(BoardTop):
    """Host link + memories + sequencer around one systolic array."""

    Config = SystolicTopConfig

    def build(self, m, link, cfg):
        array_cfg = cfg.array
        m.submodules.array = array = SystolicArray(array_cfg)
        mem_a, mem_b, mem_c = link_memories(m, link, cfg.word_bytes(), cfg.depths())

        count = link.run_args[:16]
        bad_k = (count == 0) | (count > cfg.k_max)
        run = RunSequencer(m, link, bad_k,
                           array_cfg.rows if array_cfg.dataflow == "os" else count)
        a_reader = _MemoryToStream(m, mem_a.read_port(), array.a, count, run.start, "a_rd")
        b_count = count if array_cfg.dataflow == "os" else array_cfg.rows
        b_reader = _MemoryToStream(m, mem_b.read_port(), array.b, b_count, run.start, "b_rd")
        m.d.comb += [array.a.payload.data.as_value().eq(a_reader.data),
                     array.a.payload.last.eq(a_reader.last),
                     array.b.payload.as_value().eq(b_reader.data)]
        run.write_results(m, mem_c, array.c)
        return run.leds
