"""Bit-level UART model for cocotb (8N1), and a byte transport on top of it
that the blocking :class:`~bertforge.boards.protocol.HostLink` can use from
a ``bridge``-d thread."""

import json

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer

from bertforge.boards import protocol
from bertforge.sim.funcov_tb import Coverage
from bertforge.sim.stream_tb import read_spec

try:  # cocotb 2.x exports these when a simulation runs
    from cocotb import bridge, resume
except ImportError:  # pragma: no cover - older 2.x layouts
    from cocotb._bridge import bridge, resume

__all__ = ["UartModel", "SimTransport", "board_link", "corrupt_frame_rejected",
           "bad_argument_rejected", "FRAME_KINDS", "LINK_EDGES", "link_edges", "open_board",
           "run_each", "save_report", "bridge", "resume"]


class UartModel:
    """Drives ``rx_pin`` (host -> design) and samples ``tx_pin`` (design ->
    host) with ``divisor`` clock cycles per bit. With ``period_ns`` (the
    clock's period) it waits by simulated time, one wake-up per bit,
    instead of counting clock edges in Python (ten times fewer wake-ups
    at ten clocks a bit)."""

    def __init__(self, clk, rx_pin, tx_pin, divisor, period_ns=None):
        self.clk = clk
        self.rx_pin = rx_pin
        self.tx_pin = tx_pin
        self.divisor = divisor
        self.period_ns = period_ns
        self.received = bytearray()
        self.rx_pin.value = 1
        cocotb.start_soon(self._receive())

    def _cycles(self, count):
        if self.period_ns is None:
            return ClockCycles(self.clk, count)
        return Timer(count * self.period_ns, unit="ns")

    async def send(self, data):
        for byte in data:
            for bit in [0] + [(byte >> i) & 1 for i in range(8)] + [1]:
                self.rx_pin.value = bit
                await self._cycles(self.divisor)

    async def send_raw_bits(self, bits):
        """Arbitrary line levels, one per bit time (for corrupted frames)."""
        for bit in bits:
            self.rx_pin.value = bit
            await self._cycles(self.divisor)
        self.rx_pin.value = 1

    async def _receive(self):
        while True:
            await FallingEdge(self.tx_pin)
            await self._cycles(self.divisor // 2)
            if int(self.tx_pin.value):
                continue
            byte = 0
            for i in range(8):
                await self._cycles(self.divisor)
                byte |= int(self.tx_pin.value) << i
            await self._cycles(self.divisor)
            if int(self.tx_pin.value):
                self.received += bytes([byte])

    async def read(self, count, timeout_cycles):
        waited = 0
        step = 1 if self.period_ns is None else self.divisor
        while len(self.received) < count and waited < timeout_cycles:
            if step == 1:
                await RisingEdge(self.clk)
            else:
                await self._cycles(step)
            waited += step
        data = bytes(self.received[:count])
        del self.received[:count]
        return data


#: The host link's frame kinds, by command code (``unknown`` for any
#: other code, ``bad_crc`` for a frame whose CRC is wrong).
FRAME_KINDS = {protocol.PING: "PING", protocol.WRITE: "WRITE", protocol.READ: "READ",
               protocol.RUN: "RUN"}


class SimTransport:
    """``write``/``read`` for :class:`HostLink`, run from a bridged thread.
    It parses what goes each way: :meth:`coverage` gives the host link's
    functional coverage of a session."""

    def __init__(self, uart, timeout_cycles):
        self.uart = uart
        self.timeout_cycles = timeout_cycles
        self.sent = 0
        self.frames = protocol.FrameParser(protocol.SYNC_HOST)
        self.replies = protocol.FrameParser(protocol.SYNC_BOARD)
        self.kinds, self.statuses = [], []

    def write(self, data):
        resume(self.uart.send)(data)
        self.sent += len(data)
        for code, _, crc_ok in self.frames.feed(data):
            self.kinds.append(FRAME_KINDS.get(code, "unknown") if crc_ok else "bad_crc")

    def read(self, count):
        data = resume(self.uart.read)(count, self.timeout_cycles)
        self.statuses += [protocol.STATUS_NAMES.get(code, hex(code))
                          for code, _, _ in self.replies.feed(data)]
        return data

    def coverage(self):
        """Cover points ``host_link.frame`` (every frame kind sent: each
        command, an unknown one, a bad CRC) and ``host_link.status`` (every
        status the board answered), as ``{point: {bin: hits}}``."""
        cover = Coverage("host_link")
        cover.kinds("frame", self.kinds, [*FRAME_KINDS.values(), "unknown", "bad_crc"])
        cover.kinds("status", self.statuses, list(protocol.STATUS_NAMES.values()))
        return cover.report()


async def board_link(dut, divisor, timeout_bytes=200):
    """Start the clock of a board top-level (ports ``clk``, ``rst``,
    ``uart_rx``, ``uart_tx``), reset it and return a
    :class:`~bertforge.boards.protocol.HostLink` over its UART pins (for a
    ``bridge``-d session; a read gives up after ``timeout_bytes`` byte times)."""
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    uart = UartModel(dut.clk, dut.uart_rx, dut.uart_tx, divisor)
    return protocol.HostLink(SimTransport(uart, timeout_cycles=timeout_bytes * divisor * 10))


async def open_board(dut, config_class, timeout_bytes=200):
    """``(spec, config, data, link)``: the run's spec
    (:func:`~bertforge.sim.stream_tb.read_spec`), its board top config (a
    ``config_class`` from the spec's dict), the arrays of the spec's
    ``data`` (an ``.npz``; a dict name -> array) and a :func:`board_link`
    to the top."""
    spec = read_spec()
    config = config_class.from_dict(spec["config"])
    with np.load(spec["data"]) as saved:
        data = dict(saved)
    return spec, config, data, await board_link(dut, config.divisor, timeout_bytes)


def corrupt_frame_rejected(link):
    """Send a WRITE frame whose CRC is wrong (from a bridged session); True
    if the board answers ``BAD_CRC``, False if it answers anything else."""
    frame = bytearray(protocol.encode_frame(protocol.SYNC_HOST, protocol.WRITE,
                                            b"\x00\x00\x00\x01\x02"))
    frame[-1] ^= 0x5A
    link.transport.write(bytes(frame))
    try:
        link.reply()
    except protocol.LinkError as error:
        return "bad checksum" in str(error)
    return False


def bad_argument_rejected(link, args=b""):
    """Send ``RUN`` with ``args`` (from a bridged session); True if the board
    answers ``BAD_ARGUMENT``, False if it runs or answers anything else."""
    try:
        link.run(args)
    except protocol.LinkError as error:
        return "bad argument" in str(error)
    return False


#: The host link's frames no block run sends (issue 40): ``(name, command,
#: payload, answer)``, the answer the board's error or the reply's length.
#: The unknown command sets every bit of the command byte, of the five
#: argument bytes and of the memory address; a READ of 4 argument bytes,
#: a WRITE of 2 and one of 2,047 bytes (longer than the link's buffer: it
#: counts past it) are bad arguments; a READ of 0 bytes is an empty reply,
#: one of 511 bytes sets the reply length's low 9 bits.
LINK_EDGES = [
    ("unknown_command", 0xFF, b"\xff" * 5, "the board answered: bad command"),
    ("short_read", protocol.READ, bytes(4), "the board answered: bad argument"),
    ("short_write", protocol.WRITE, bytes(2), "the board answered: bad argument"),
    ("long_write", protocol.WRITE, bytes(3) + bytes(range(256)) * 7 + bytes(252),
     "the board answered: bad argument"),
    ("empty_read", protocol.READ, bytes(5), 0),
    ("long_read", protocol.READ, bytes(3) + (511).to_bytes(2, "little"), 511),
]


def link_edges(link):
    """From a bridged session: each of :data:`LINK_EDGES` (True when the
    board answers as listed), then a PING (``"ping_after"``, True when it
    answers with the design id and version it gave before)."""
    before = link.ping()
    report = {}
    for name, command, payload, answer in LINK_EDGES:
        link.transport.write(protocol.encode_frame(protocol.SYNC_HOST, command, payload))
        try:
            report[name] = len(link.reply()) == answer
        except protocol.LinkError as error:
            report[name] = str(error) == answer
    report["ping_after"] = link.ping() == before
    return report


def run_each(link, spec, report, key, items, one):
    """From a bridged session: PING the board (its ``design_id`` and
    ``version`` into ``report``), then ``one(item)`` for each of ``items``,
    its result (a dict with ``match``) appended to the list ``report[key]``,
    each after a frame with a bad CRC when the spec corrupts frames
    (``report["corrupt_rejected"]`` counts those the board refused)."""
    report["design_id"], report["version"] = link.ping()
    report[key], report["corrupt_rejected"] = [], 0
    for item in items:
        if spec.get("corrupt"):
            report["corrupt_rejected"] += corrupt_frame_rejected(link)
        report[key].append(one(item))


def save_report(spec, report, link, config, key, runs):
    """Set ``report["match"]`` (``runs`` results under ``key``, as
    :func:`run_each` lists them, all matching the golden model), add the
    bytes the host sent over ``link`` and its functional coverage
    (:meth:`SimTransport.coverage`), write ``report`` to the spec's
    ``result_path``, then assert what every board top must do: answer PING
    with ``config.design_id``, match the golden model on every run and, when
    the spec corrupts frames, reject one per run."""
    results = report[key]
    report["match"] = len(results) == runs and all(r["match"] for r in results)
    report["bytes_sent"] = link.transport.sent
    report["functional_coverage"] = link.transport.coverage()
    with open(spec["result_path"], "w") as f:
        json.dump(report, f)
    assert report["design_id"] == config.design_id, report
    assert report["match"], report
    if spec.get("corrupt"):
        assert report["corrupt_rejected"] == runs, report
