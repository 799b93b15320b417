"""LiteX's UARTBone protocol, host side: the frames LiteX's
``Stream2Wishbone`` (``litex/soc/cores/uart.py``) takes and
``litex_server --uart`` / ``RemoteClient`` (``litex/tools/remote/comm_uart.py``)
send, and a bus over any byte transport. The SoC's testbench
(:mod:`bertforge.boards.soc_board_tb`) drives it over a bit-level UART in
Verilator; on a board the transport is a serial port (pyserial's
``Serial``). No cocotb here.

A frame is ``cmd`` (``0x01`` write, ``0x02`` read: address incrementing),
``length`` (32-bit words, 1 to 255), the word address (byte address / 4;
4 bytes, big-endian), then for a write ``length`` data words, each
big-endian. A read is answered with ``length`` big-endian words; a write
is not answered. The bus is little-endian: byte ``a`` of a block is bits
``8 (a % 4)`` up of the word at ``a - a % 4``.

There is no checksum and no reply to a bad frame. What the SoC does with
one (``Stream2Wishbone``):

- an unknown command byte: the frame's length and 4 address bytes are
  read and dropped; the next frame is taken as usual;
- a truncated frame: the next bytes are taken as its rest, so the next
  frame is swallowed (a read gets no reply); unless the line stays idle
  for 100 ms (``WaitTimer(100e-3 * clk_freq)``), after which the frame is
  dropped and the next one is taken as usual. A host that got no reply
  waits :data:`RESYNC_SECONDS` before its next frame.
"""

from bertforge.rtl.errors import BertforgeError

__all__ = ["CMD_WRITE", "CMD_READ", "MAX_BURST", "RESYNC_SECONDS", "UartBoneError",
           "write_frame", "read_frame", "decode_words", "block_words", "words_block",
           "WordBus", "UartBone"]

CMD_WRITE = 0x01
CMD_READ = 0x02
#: Words in one frame at most (the length is one byte).
MAX_BURST = 255
#: Idle time after which UARTBone drops a partly received frame (its
#: ``WaitTimer`` is 100 ms).
RESYNC_SECONDS = 0.1


class UartBoneError(BertforgeError):
    """No reply, a short one, or a request UARTBone cannot carry."""


def _check(addr, count):
    if addr % 4:
        raise UartBoneError(f"UARTBone addresses are 32-bit words: {addr:#x} is not a multiple of 4")
    if not 1 <= count <= MAX_BURST:
        raise UartBoneError(f"a UARTBone frame carries 1 to {MAX_BURST} words, not {count}")
    if not 0 <= addr >> 2 < 1 << 32:
        raise UartBoneError(f"address {addr:#x} is outside the 32-bit word address space")


def write_frame(addr, words):
    """The frame that writes the 32-bit ``words`` from byte address ``addr`` on."""
    words = list(words)
    _check(addr, len(words))
    return (bytes([CMD_WRITE, len(words)]) + (addr >> 2).to_bytes(4, "big")
            + b"".join(int(w).to_bytes(4, "big") for w in words))


def read_frame(addr, count):
    """The frame that reads ``count`` 32-bit words from byte address ``addr`` on."""
    _check(addr, count)
    return bytes([CMD_READ, count]) + (addr >> 2).to_bytes(4, "big")


def decode_words(data):
    """The 32-bit words of a read's reply (``len(data)`` a multiple of 4)."""
    if len(data) % 4:
        raise UartBoneError(f"a UARTBone reply is whole words, not {len(data)} bytes")
    return [int.from_bytes(data[i:i + 4], "big") for i in range(0, len(data), 4)]


def block_words(data):
    """The little-endian 32-bit words of the bytes ``data`` (whole words)."""
    data = bytes(data)
    if len(data) % 4:
        raise UartBoneError(f"a UARTBone block is whole words, not {len(data)} bytes")
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def words_block(words):
    """The bytes of 32-bit ``words``, little-endian (the bus's order)."""
    return b"".join(int(w).to_bytes(4, "little") for w in words)


class WordBus:
    """A SoC bus of 32-bit words at byte addresses: a subclass gives
    ``read_words(addr, count)`` and ``write_words(addr, words)``; this
    gives ``read32``/``write32`` of one word and ``read_block``/
    ``write_block`` of bytes (the driver's memory backend calls)."""

    def read32(self, addr):
        return self.read_words(addr, 1)[0]

    def write32(self, addr, value):
        self.write_words(addr, [value])

    def write_block(self, addr, data):
        self.write_words(addr, block_words(data))

    def read_block(self, addr, length):
        if length % 4:
            raise UartBoneError(f"a UARTBone block is whole words, not {length} bytes")
        return words_block(self.read_words(addr, length // 4))


class UartBone(WordBus):
    """The SoC's bus over UARTBone (:class:`WordBus`), at bus byte addresses.

    ``transport``: ``write(bytes)`` and ``read(n)``, which returns fewer
    than ``n`` bytes when none came in time (pyserial's ``Serial`` with a
    ``timeout``). ``sent``/``received`` count the bytes.
    """

    def __init__(self, transport):
        self.transport = transport
        self.sent = self.received = 0

    def _send(self, frame):
        self.transport.write(frame)
        self.sent += len(frame)

    def write_words(self, addr, words):
        words = list(words)
        for at in range(0, len(words), MAX_BURST):
            self._send(write_frame(addr + 4 * at, words[at:at + MAX_BURST]))

    def read_words(self, addr, count):
        out = []
        for at in range(0, count, MAX_BURST):
            n = min(MAX_BURST, count - at)
            self._send(read_frame(addr + 4 * at, n))
            reply = self.transport.read(4 * n)
            self.received += len(reply)
            if len(reply) != 4 * n:
                raise UartBoneError(f"UARTBone read of {n} words at {addr + 4 * at:#x}: "
                                    f"{len(reply)} of {4 * n} bytes came back")
            out += decode_words(reply)
        return out
