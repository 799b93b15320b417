"""The host link protocol: framed commands over a UART, with a CRC-8.

Host -> board: ``0xA5, cmd, len_lo, len_hi, payload[len], crc``
Board -> host: ``0x5A, status, len_lo, len_hi, payload[len], crc``

``crc`` is CRC-8 (polynomial 0x07, initial 0) over every byte after the sync
byte. Commands:

- ``PING`` (0): reply payload ``b"BF"`` + design id + protocol version.
- ``WRITE`` (1): ``mem, addr_lo, addr_hi, data...``: bytes into memory
  ``mem`` from byte address ``addr``.
- ``READ`` (2): ``mem, addr_lo, addr_hi, count_lo, count_hi``: reply payload
  is ``count`` bytes from memory ``mem``.
- ``RUN`` (3): design arguments (the systolic top takes ``K`` as 2 bytes,
  the sparse top groups and compressed beats, 2 bytes each, the butterfly
  top mode, n and groups in one 4-byte word);
  the reply comes when the run is done, payload = its cycles (4 bytes).

Status: ``OK`` (0), ``BAD_CRC`` (1: the frame is dropped, the link keeps
working), ``BAD_COMMAND`` (2), ``BAD_ARGUMENT`` (3).
The same code drives the simulated board (cocotb) and a real one (pyserial).
"""

import struct
from bertforge.rtl.errors import BertforgeError, ParameterError

__all__ = ["SYNC_HOST", "SYNC_BOARD", "PING", "WRITE", "READ", "RUN", "OK", "BAD_CRC",
           "BAD_COMMAND", "BAD_ARGUMENT", "STATUS_NAMES", "crc8", "encode_frame", "FrameParser",
           "LinkError", "HostLink"]

SYNC_HOST = 0xA5
SYNC_BOARD = 0x5A
PING, WRITE, READ, RUN = 0, 1, 2, 3
OK, BAD_CRC, BAD_COMMAND, BAD_ARGUMENT = 0, 1, 2, 3
STATUS_NAMES = {OK: "ok", BAD_CRC: "bad checksum", BAD_COMMAND: "bad command",
                BAD_ARGUMENT: "bad argument"}
PROTOCOL_VERSION = 1
MAX_PAYLOAD = 0xFFFF


def crc8(data, crc=0):
    """CRC-8, polynomial x^8 + x^2 + x + 1 (0x07), MSB first."""
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def encode_frame(sync, code, payload=b""):
    """One frame: sync, code (command or status), length, payload, CRC."""
    payload = bytes(payload)
    if len(payload) > MAX_PAYLOAD:
        raise ParameterError(f"payload of {len(payload)} bytes is longer than {MAX_PAYLOAD}")
    body = bytes([code]) + struct.pack("<H", len(payload)) + payload
    return bytes([sync]) + body + bytes([crc8(body)])


class FrameParser:
    """Feeds bytes, yields ``(code, payload, crc_ok)`` for each whole frame
    that starts with ``sync``; bytes outside frames are skipped."""

    def __init__(self, sync):
        self.sync = sync
        self.buffer = bytearray()

    def feed(self, data):
        self.buffer += data
        frames = []
        while True:
            start = self.buffer.find(bytes([self.sync]))
            if start < 0:
                self.buffer.clear()
                return frames
            del self.buffer[:start]
            if len(self.buffer) < 4:
                return frames
            length = self.buffer[2] | (self.buffer[3] << 8)
            if len(self.buffer) < 5 + length:
                return frames
            body = bytes(self.buffer[1:4 + length])
            crc = self.buffer[4 + length]
            frames.append((body[0], body[3:], crc8(body) == crc))
            del self.buffer[:5 + length]


class LinkError(BertforgeError, RuntimeError):
    """The board answered with an error status, a bad CRC, or not at all."""


class HostLink:
    """Commands over any byte transport with ``write(bytes)`` and
    ``read(n) -> bytes`` (a pyserial ``Serial``, or the simulated UART)."""

    def __init__(self, transport):
        self.transport = transport
        self.parser = FrameParser(SYNC_BOARD)

    def request(self, command, payload=b""):
        self.transport.write(encode_frame(SYNC_HOST, command, payload))
        return self.reply()

    def reply(self):
        """The next reply's payload; raises :class:`LinkError` on an error
        status, a corrupted reply or silence."""
        frames = []
        while not frames:
            data = self.transport.read(1)
            if not data:
                raise LinkError("no reply from the board (check the port, the baud rate and "
                                "that the bitstream is loaded)")
            frames = self.parser.feed(data)
        status, payload, crc_ok = frames[0]
        if not crc_ok:
            raise LinkError("the board's reply has a bad checksum")
        if status != OK:
            raise LinkError(f"the board answered: {STATUS_NAMES.get(status, status)}")
        return payload

    def ping(self):
        payload = self.request(PING)
        if payload[:2] != b"BF":
            raise LinkError(f"unexpected ping reply {payload!r}: not a bertforge bitstream")
        return payload[2], payload[3]

    def write(self, mem, addr, data, chunk=1024):
        for offset in range(0, len(data), chunk):
            part = bytes(data[offset:offset + chunk])
            self.request(WRITE, bytes([mem]) + struct.pack("<H", addr + offset) + part)

    def read(self, mem, addr, count, chunk=1024):
        out = bytearray()
        for offset in range(0, count, chunk):
            n = min(chunk, count - offset)
            out += self.request(READ, bytes([mem]) + struct.pack("<HH", addr + offset, n))
        return bytes(out)

    def run(self, args=b""):
        """Start the design; returns its cycle count."""
        payload = self.request(RUN, args)
        return struct.unpack("<I", payload[:4])[0]
