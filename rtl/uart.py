"""UART (8 data bits, no parity, 1 stop bit) with stream ports."""

from dataclasses import dataclass

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .params import Config, check_instance, check_int

__all__ = ["UartConfig", "Uart"]


@dataclass(frozen=True, kw_only=True)
class UartConfig(Config):
    """``divisor`` = clock cycles per bit (clock frequency / baud rate), >= 4."""

    divisor: int = 104

    def __post_init__(self):
        check_int("divisor", self.divisor, minimum=4, maximum=1 << 20)

    @property
    def name(self):
        return f"uart_div{self.divisor}"


class Uart(wiring.Component):
    """8N1 UART: bytes from ``tx`` go out on ``tx_pin``, bytes seen on
    ``rx_pin`` come out of ``rx``.

    The receiver samples each bit in its middle (start bit confirmed at half a
    bit); a byte whose stop bit is low is dropped and counted in
    ``framing_errors``. ``rx`` has no backpressure: a byte not taken before
    the next one ends is replaced (``overruns`` counts it). One byte takes
    ``10 * divisor`` cycles either way.
    """

    def __init__(self, config):
        self.config = check_instance("config", config, UartConfig)
        super().__init__({
            "tx": In(stream.Signature(8)),
            "rx": Out(stream.Signature(8)),
            "tx_pin": Out(1, init=1),
            "rx_pin": In(1, init=1),
            "framing_errors": Out(16),
            "overruns": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        divisor = self.config.divisor

        # Transmitter: start bit, 8 data bits LSB first, stop bit.
        tx_shift = Signal(10, init=0x3FF)
        tx_bits = Signal(range(11))
        tx_timer = Signal(range(divisor))
        m.d.comb += [self.tx_pin.eq(tx_shift[0]), self.tx.ready.eq(tx_bits == 0)]
        with m.If(self.tx.valid & self.tx.ready):
            m.d.sync += [tx_shift.eq((self.tx.payload << 1) | (1 << 9)), tx_bits.eq(10),
                         tx_timer.eq(divisor - 1)]
        with m.Elif(tx_bits != 0):
            with m.If(tx_timer == 0):
                m.d.sync += [tx_shift.eq((tx_shift >> 1) | (1 << 9)), tx_bits.eq(tx_bits - 1),
                             tx_timer.eq(divisor - 1)]
            with m.Else():
                m.d.sync += tx_timer.eq(tx_timer - 1)

        # Receiver: two flops against metastability, then mid-bit sampling.
        rx_sync = Signal(2, init=0b11)
        m.d.sync += rx_sync.eq((rx_sync << 1) | self.rx_pin)
        rx_level = rx_sync[1]
        rx_timer = Signal(range(divisor))
        rx_bits = Signal(range(10))
        rx_shift = Signal(8)
        with m.If(self.rx.valid & self.rx.ready):
            m.d.sync += self.rx.valid.eq(0)
        with m.FSM():
            with m.State("idle"):
                with m.If(~rx_level):
                    m.d.sync += rx_timer.eq(divisor // 2 - 1)
                    m.next = "start"
            with m.State("start"):
                with m.If(rx_timer == 0):
                    with m.If(rx_level):
                        m.next = "idle"  # a glitch, not a start bit
                    with m.Else():
                        m.d.sync += [rx_timer.eq(divisor - 1), rx_bits.eq(8)]
                        m.next = "data"
                with m.Else():
                    m.d.sync += rx_timer.eq(rx_timer - 1)
            with m.State("data"):
                with m.If(rx_timer == 0):
                    m.d.sync += [rx_shift.eq((rx_shift >> 1) | (rx_level << 7)),
                                 rx_bits.eq(rx_bits - 1), rx_timer.eq(divisor - 1)]
                    with m.If(rx_bits == 1):
                        m.next = "stop"
                with m.Else():
                    m.d.sync += rx_timer.eq(rx_timer - 1)
            with m.State("stop"):
                with m.If(rx_timer == 0):
                    with m.If(rx_level):
                        m.d.sync += [self.rx.payload.eq(rx_shift), self.rx.valid.eq(1)]
                        with m.If(self.rx.valid & ~self.rx.ready):
                            m.d.sync += self.overruns.eq(self.overruns + 1)
                    with m.Else():
                        m.d.sync += self.framing_errors.eq(self.framing_errors + 1)
                    m.next = "idle"
                with m.Else():
                    m.d.sync += rx_timer.eq(rx_timer - 1)
        return m
