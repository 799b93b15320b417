"""Host link: the board side of :mod:`bertforge.boards.protocol`.

Frames arrive as bytes on ``rx`` and replies leave on ``tx`` (connect both
to a :class:`~bertforge.rtl.uart.Uart`). A frame is buffered whole and
executed only if its CRC-8 is right; a bad frame gets a ``BAD_CRC`` reply
and the link goes on with the next one.

The design behind the link is reached through a byte-wide memory bus
(``mem_*``: a write takes effect at once; read data is valid at most
``READ_LATENCY`` cycles after ``mem_re`` (the link takes it then) and must
stay until the next ``mem_re``) and a run handshake (``run_start`` pulse with ``run_args``;
``run_done`` pulse with ``run_cycles``, or a ``run_error`` pulse the cycle
after ``run_start`` for bad arguments).
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["HostLink", "crc8_step", "READ_LATENCY", "MAX_WRITE"]

#: Cycles from ``mem_re`` to the cycle the link takes ``mem_rdata``.
READ_LATENCY = 3
#: Longest payload the frame buffer holds (WRITE: 3 header bytes + data).
MAX_WRITE = 1024 + 3

SYNC_HOST, SYNC_BOARD = 0xA5, 0x5A
PING, WRITE, READ, RUN = 0, 1, 2, 3
OK, BAD_CRC, BAD_COMMAND, BAD_ARGUMENT = 0, 1, 2, 3
VERSION = 1


def crc8_step(crc, byte):
    """CRC-8 (poly 0x07) of ``crc`` after one more ``byte``: an XOR network."""
    bits = [crc[i] ^ byte[i] for i in range(8)]
    for _ in range(8):
        msb = bits[7]
        shifted = [Const(0, 1)] + bits[:7]
        bits = [shifted[i] ^ msb if i in (0, 1, 2) else shifted[i] for i in range(8)]
    return Cat(*bits)


class HostLink(wiring.Component):
    """Parses host frames, runs commands, sends replies.

    Parameters
    ----------
    design_id : int
        Byte returned by ``PING`` (which top-level is loaded).
    """

    def __init__(self, *, design_id):
        self.design_id = design_id
        super().__init__({
            "rx": In(stream.Signature(8)),
            "tx": Out(stream.Signature(8)),
            "mem_sel": Out(8),
            "mem_addr": Out(16),
            "mem_wdata": Out(8),
            "mem_we": Out(1),
            "mem_re": Out(1),
            "mem_rdata": In(8),
            "run_start": Out(1),
            "run_args": Out(32),
            "run_done": In(1),
            "run_error": In(1),
            "run_cycles": In(32),
            "bad_frames": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        buffer = m.submodules.buffer = Memory(shape=8, depth=MAX_WRITE, init=[])
        buf_w = buffer.write_port()
        buf_r = buffer.read_port(transparent_for=())

        command = Signal(8)
        length = Signal(16)
        count = Signal(16)
        addr = Signal(16)            # mem_addr, a register: no adder before the memories
        crc = Signal(8)
        status = Signal(8)
        reply_len = Signal(16)
        args = Signal(40)            # first 5 payload bytes, kept in registers
        cycles = Signal(32)
        small = Signal(range(8))     # index into a short reply payload
        tx_crc = Signal(8)
        pending = Signal(range(READ_LATENCY + 1))

        rx, tx = self.rx, self.tx
        m.d.comb += [rx.ready.eq(0), tx.valid.eq(0), self.mem_we.eq(0), self.mem_re.eq(0),
                     self.mem_addr.eq(addr), self.run_start.eq(0), self.run_args.eq(args[:32])]

        def send(byte, next_state, *, update_crc=True):
            m.d.comb += [tx.payload.eq(byte), tx.valid.eq(1)]
            with m.If(tx.ready):
                if update_crc:
                    m.d.sync += tx_crc.eq(crc8_step(tx_crc, byte))
                m.next = next_state

        with m.FSM():
            with m.State("sync"):
                m.d.comb += rx.ready.eq(1)
                with m.If(rx.valid & (rx.payload == SYNC_HOST)):
                    m.d.sync += [crc.eq(0), count.eq(0), args.eq(0)]
                    m.next = "command"
            for name, target, nxt in (("command", command, "len_lo"),
                                      ("len_lo", length[:8], "len_hi"),
                                      ("len_hi", length[8:], "payload")):
                with m.State(name):
                    m.d.comb += rx.ready.eq(1)
                    with m.If(rx.valid):
                        m.d.sync += [target.eq(rx.payload), crc.eq(crc8_step(crc, rx.payload))]
                        if name == "len_hi":
                            with m.If(Cat(length[:8], rx.payload) == 0):
                                m.next = "crc"
                            with m.Else():
                                m.next = nxt
                        else:
                            m.next = nxt
            with m.State("payload"):
                m.d.comb += rx.ready.eq(1)
                with m.If(rx.valid):
                    m.d.sync += [crc.eq(crc8_step(crc, rx.payload)), count.eq(count + 1)]
                    m.d.comb += [buf_w.addr.eq(count), buf_w.data.eq(rx.payload),
                                 buf_w.en.eq(count < MAX_WRITE)]
                    for i in range(5):
                        with m.If(count == i):
                            m.d.sync += args[8 * i:8 * i + 8].eq(rx.payload)
                    with m.If(count + 1 == length):
                        m.next = "crc"
            with m.State("crc"):
                m.d.comb += rx.ready.eq(1)
                with m.If(rx.valid):
                    m.d.sync += [count.eq(0), small.eq(0), tx_crc.eq(0), addr.eq(args[8:24])]
                    with m.If(rx.payload != crc):
                        m.d.sync += [status.eq(BAD_CRC), reply_len.eq(0),
                                     self.bad_frames.eq(self.bad_frames + 1)]
                        m.next = "reply_sync"
                    with m.Elif(command == PING):
                        m.d.sync += [status.eq(OK), reply_len.eq(4)]
                        m.next = "reply_sync"
                    with m.Elif((command == WRITE) & (length >= 3) & (length <= MAX_WRITE)):
                        m.d.sync += count.eq(3)
                        m.next = "write_read"
                    with m.Elif((command == READ) & (length == 5)):
                        m.d.sync += [status.eq(OK), reply_len.eq(args[24:40])]
                        m.next = "reply_sync"
                    with m.Elif(command == RUN):
                        m.d.comb += self.run_start.eq(1)
                        m.next = "run_wait"
                    with m.Elif((command == WRITE) | (command == READ)):
                        m.d.sync += [status.eq(BAD_ARGUMENT), reply_len.eq(0)]
                        m.next = "reply_sync"
                    with m.Else():
                        m.d.sync += [status.eq(BAD_COMMAND), reply_len.eq(0)]
                        m.next = "reply_sync"

            # WRITE: copy buffer[3:length] to memory args[0] from args[8:24].
            m.d.comb += [self.mem_sel.eq(args[:8]), self.mem_wdata.eq(buf_r.data)]
            with m.State("write_read"):
                m.d.comb += buf_r.addr.eq(count)
                with m.If(count == length):
                    m.d.sync += [status.eq(OK), reply_len.eq(0)]
                    m.next = "reply_sync"
                with m.Else():
                    m.next = "write_mem"
            with m.State("write_mem"):
                m.d.comb += self.mem_we.eq(1)
                m.d.sync += [count.eq(count + 1), addr.eq(addr + 1)]
                m.next = "write_read"

            with m.State("run_wait"):
                with m.If(self.run_error):
                    m.d.sync += [status.eq(BAD_ARGUMENT), reply_len.eq(0)]
                    m.next = "reply_sync"
                with m.Elif(self.run_done):
                    m.d.sync += [cycles.eq(self.run_cycles), status.eq(OK), reply_len.eq(4)]
                    m.next = "reply_sync"

            with m.State("reply_sync"):
                send(SYNC_BOARD, "reply_status", update_crc=False)
            with m.State("reply_status"):
                send(status, "reply_len_lo")
            with m.State("reply_len_lo"):
                send(reply_len[:8], "reply_len_hi")
            with m.State("reply_len_hi"):
                with m.If(reply_len == 0):
                    send(reply_len[8:], "reply_crc")
                with m.Elif((command == READ) & (status == OK)):
                    send(reply_len[8:], "read_issue")
                with m.Else():
                    send(reply_len[8:], "reply_small")
            with m.State("reply_small"):
                ping = Cat(Const(ord("B"), 8), Const(ord("F"), 8), Const(self.design_id, 8),
                           Const(VERSION, 8))
                byte = Signal(8)
                with m.If(command == PING):
                    m.d.comb += byte.eq(ping.word_select(small[:2], 8))
                with m.Else():
                    m.d.comb += byte.eq(cycles.word_select(small[:2], 8))
                m.d.comb += [tx.payload.eq(byte), tx.valid.eq(1)]
                with m.If(tx.ready):
                    m.d.sync += [tx_crc.eq(crc8_step(tx_crc, byte)), small.eq(small + 1)]
                    with m.If(small == 3):
                        m.next = "reply_crc"

            # READ: one byte at a time, READ_LATENCY cycles per memory read.
            with m.State("read_issue"):
                m.d.comb += self.mem_re.eq(1)
                m.d.sync += pending.eq(READ_LATENCY - 1)
                m.next = "read_wait"
            with m.State("read_wait"):
                with m.If(pending == 1):
                    m.next = "read_send"
                m.d.sync += pending.eq(pending - 1)
            with m.State("read_send"):
                m.d.comb += [tx.payload.eq(self.mem_rdata), tx.valid.eq(1)]
                with m.If(tx.ready):
                    m.d.sync += [tx_crc.eq(crc8_step(tx_crc, self.mem_rdata)), count.eq(count + 1),
                                 addr.eq(addr + 1)]
                    with m.If(count + 1 == reply_len):
                        m.next = "reply_crc"
                    with m.Else():
                        m.next = "read_issue"
            with m.State("reply_crc"):
                send(tx_crc, "sync", update_crc=False)
        return m
