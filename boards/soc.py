"""A LiteX SoC around a bertforge accelerator (ULX3S 85F first).

No CPU: the host reaches the SoC's bus through UARTBone (LiteX's
``litex_server`` / ``RemoteClient`` speak its protocol). LiteDRAM's SDR
controller drives the board's SDRAM (``MT48LC16M16`` by default,
``AS4C32M16`` on newer boards) with no L2 cache, so what the host writes
through the bus is in the SDRAM when the accelerator reads it.

The accelerator is the Verilog that ``with_bus(config, bus="axi4")`` emits
(:class:`~bertforge.rtl.axi_top.AxiGemmTop`), instantiated by its port
names: its AXI4 master on its own LiteDRAM crossbar port
(``LiteDRAMAXI2Native``, the port up-converted to the AXI data width), its
AXI4-Lite registers on the SoC bus at :data:`ACCEL_BASE` (LiteX bridges
Wishbone to AXI-Lite), its ``irq`` in the CSR ``bertforge_status``.

The accelerator sees the SDRAM where the host does: from ``main_ram``'s
origin (``0x40000000``) on, so a program's addresses are bus addresses.

Migen and LiteX are imported only here and in the other ``boards/soc*``
modules (a test keeps them out of rtl, sim and generators).
"""

import contextlib
import io
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from bertforge.rtl.axi_top import AxiGemmTop, gemm_config
from bertforge.rtl.errors import ParameterError

__all__ = ["SocBoard", "SOC_BOARDS", "soc_board", "SDRAM_MODULES", "DEFAULT_BAUD", "MAX_BAUD",
           "DEFAULT_CLOCK_MHZ", "ACCEL_BASE", "ACCEL_SIZE", "MAIN_RAM_BASE", "check_soc", "REFRESH_POSTPONING",
           "controller_settings", "down_converter",
           "add_accelerator", "make_soc",
           "soc_info", "generate_soc"]

#: SDRAM modules LiteDRAM knows that ULX3S boards carry (the first: the default).
SDRAM_MODULES = ("MT48LC16M16", "AS4C32M16")
#: UARTBone's baud rate by default: 1 Mbaud (30 system clocks a bit at the
#: default 30 MHz); the FT231X on the ULX3S is rated to 3 Mbaud (:data:`MAX_BAUD`).
DEFAULT_BAUD = 1_000_000
MAX_BAUD = 3_000_000
#: Where the accelerator's AXI4-Lite registers sit on the SoC bus.
ACCEL_BASE = 0x8000_0000
#: The system clock by default (MHz): the default SoC closes 31 MHz on the
#: ULX3S 85F, not 50 (its layernorm unit's path; docs/soc.md).
DEFAULT_CLOCK_MHZ = 30.0
ACCEL_SIZE = 0x100
#: Where LiteX puts the SDRAM (``main_ram``) on the bus.
MAIN_RAM_BASE = 0x4000_0000


@dataclass(frozen=True)
class SocBoard:
    """A board the SoC builds for: the bertforge board name, its
    litex-boards target module and FPGA device."""

    name: str
    target: str          # litex_boards.targets.<target>
    device: str
    description: str


SOC_BOARDS = {b.name: b for b in [
    SocBoard("ulx3s-85f", "radiona_ulx3s", "LFE5U-85F", "Radiona ULX3S 85F (ECP5 LFE5U-85F)"),
]}


def soc_board(name):
    try:
        return SOC_BOARDS[name]
    except KeyError:
        raise ParameterError(f"no SoC for board {name!r}; SoC boards: "
                             f"{', '.join(SOC_BOARDS)}") from None


def check_soc(config, *, sdram_module, baudrate, sys_clk_mhz, bus):
    """``ParameterError`` if the SoC cannot be made of these (before any work)."""
    if sdram_module not in SDRAM_MODULES:
        raise ParameterError(f"sdram_module must be one of {', '.join(SDRAM_MODULES)}, "
                             f"not {sdram_module!r}")
    if not isinstance(baudrate, int) or not 9600 <= baudrate <= MAX_BAUD:
        raise ParameterError(f"baudrate must be an integer from 9600 to {MAX_BAUD} "
                             f"(the FT231X's limit), not {baudrate!r}")
    if not 10 <= sys_clk_mhz <= 100:
        raise ParameterError(f"sys_clk_mhz must be between 10 and 100, not {sys_clk_mhz!r}")
    if bus.get("addr_width", 32) != 32:
        raise ParameterError(f"the SoC's AXI bus is 32-bit, not {bus['addr_width']}-bit")
    if gemm_config(config).addr_width < 31:
        raise ParameterError(f"the engine's addr_width must reach the SDRAM at "
                             f"{MAIN_RAM_BASE:#x} (31 bits or more), not "
                             f"{gemm_config(config).addr_width}")


def _accelerator(platform, module, verilog_path, data_width, id_width):
    """The LiteX module that instantiates the accelerator's Verilog: ``axi``
    (its AXI4 master), ``axil`` (its AXI4-Lite slave), ``irq``, and the CSR
    ``status`` (field ``irq``)."""
    from migen import ClockSignal, Instance, ResetSignal, Signal
    from litex.gen import LiteXModule
    from litex.soc.interconnect import axi
    from litex.soc.interconnect.csr import CSRField, CSRStatus

    class Accelerator(LiteXModule):
        def __init__(self):
            self.axi = axi.AXIInterface(data_width=data_width, address_width=32,
                                        id_width=id_width)
            self.axil = axi.AXILiteInterface(data_width=32, address_width=32)
            self.irq = Signal()
            self.status = CSRStatus(fields=[CSRField(
                "irq", size=1, description="The accelerator's irq (an enabled IRQ_STATUS bit "
                                           "is set).")])
            ports = {"i_clk": ClockSignal("sys"), "i_rst": ResetSignal("sys"), "o_irq": self.irq}
            for ch in ("aw", "ar"):
                channel = getattr(self.axi, ch)
                for field in ("id", "addr", "len", "size", "burst", "lock", "cache", "prot",
                              "qos", "valid"):
                    ports[f"o_m_axi_{ch}{field}"] = getattr(channel, field)
                ports[f"i_m_axi_{ch}ready"] = channel.ready
            for field in ("data", "strb", "last", "valid"):
                ports[f"o_m_axi_w{field}"] = getattr(self.axi.w, field)
            ports["i_m_axi_wready"] = self.axi.w.ready
            for field in ("id", "resp", "valid"):
                ports[f"i_m_axi_b{field}"] = getattr(self.axi.b, field)
            ports["o_m_axi_bready"] = self.axi.b.ready
            for field in ("id", "data", "resp", "last", "valid"):
                ports[f"i_m_axi_r{field}"] = getattr(self.axi.r, field)
            ports["o_m_axi_rready"] = self.axi.r.ready
            lite = self.axil
            ports.update({
                "i_s_axi_awaddr": lite.aw.addr[:8], "i_s_axi_awprot": lite.aw.prot,
                "i_s_axi_awvalid": lite.aw.valid, "o_s_axi_awready": lite.aw.ready,
                "i_s_axi_wdata": lite.w.data, "i_s_axi_wstrb": lite.w.strb,
                "i_s_axi_wvalid": lite.w.valid, "o_s_axi_wready": lite.w.ready,
                "o_s_axi_bresp": lite.b.resp, "o_s_axi_bvalid": lite.b.valid,
                "i_s_axi_bready": lite.b.ready,
                "i_s_axi_araddr": lite.ar.addr[:8], "i_s_axi_arprot": lite.ar.prot,
                "i_s_axi_arvalid": lite.ar.valid, "o_s_axi_arready": lite.ar.ready,
                "o_s_axi_rdata": lite.r.data, "o_s_axi_rresp": lite.r.resp,
                "o_s_axi_rvalid": lite.r.valid, "i_s_axi_rready": lite.r.ready,
            })
            self.specials += Instance(module, **ports)
            self.comb += self.status.fields.irq.eq(self.irq)
            platform.add_source(str(verilog_path))

    return Accelerator()


#: LiteDRAM's refresher may postpone up to 8 refreshes and issue them
#: together (an SDR SDRAM takes its 8192 refreshes a 64 ms in bursts or
#: spread): each refresh precharges every bank, so fewer, bunched
#: refreshes reopen fewer rows (the tiny layer: 1,781 -> 1,317 activates,
#: 96,122 -> 94,411 cycles in simulation).
REFRESH_POSTPONING = 8


def controller_settings():
    """LiteDRAM's controller settings of the SoC (board and simulation)."""
    from litedram.core.controller import ControllerSettings
    return ControllerSettings(refresh_postponing=REFRESH_POSTPONING)


def down_converter(wide, native):
    """A LiteDRAM native port ``wide`` on the narrower ``native`` port, in
    place of LiteDRAM's ``LiteDRAMNativePortDownConverter``, which idles a
    cycle between wide commands (``ratio`` words in ``ratio + 1`` cycles)
    and writes every native word of a wide one, strobes or not. Here:

    - a wide read is ``ratio`` native reads at consecutive addresses, its
      words gathered in order;
    - a wide write is taken together with its data (LiteDRAM's AXI
      frontend issues a write command only once its data is buffered) and
      is a native write for each native word with a byte enabled (a
      narrow write, such as a transposed store's single byte, costs one
      SDRAM write, not ``ratio``); its data waits in a small FIFO until the
      controller takes it;
    - the next wide command is taken with the last native command of the
      current one: a stream of wide words keeps the controller busy every
      cycle.
    """
    from migen import Array, Cat, If, Module, Mux, Signal
    from litex.soc.interconnect import stream
    ratio = wide.data_width // native.data_width
    width, strobes = native.data_width, native.data_width // 8

    def enabled(we):       # per native word: any byte enabled
        return Cat(*[we[i * strobes:(i + 1) * strobes] != 0 for i in range(ratio)])

    def lowest(mask, index):   # index: the lowest set bit of mask
        return [If(mask[i], index.eq(i)) for i in reversed(range(ratio))]

    class DownConverter(Module):
        def __init__(self):
            # Commands: the native words left of the current wide command.
            addr = Signal(len(wide.cmd.addr))
            we = Signal()
            left = Signal(ratio)
            index = Signal(max=ratio)
            fifo = stream.SyncFIFO([("data", wide.data_width), ("we", wide.data_width // 8)], 4)
            self.submodules += fifo
            rest = left & ~(1 << index)
            done = ~(left != 0) | (native.cmd.ready & (rest == 0))
            take = wide.cmd.valid & wide.cmd.ready
            self.comb += lowest(left, index) + [
                native.cmd.valid.eq(left != 0), native.cmd.we.eq(we),
                native.cmd.addr.eq(addr * ratio + index),
                wide.cmd.ready.eq(done & (~wide.cmd.we | (wide.wdata.valid & fifo.sink.ready))),
                fifo.sink.valid.eq(take & wide.cmd.we), fifo.sink.data.eq(wide.wdata.data),
                fifo.sink.we.eq(wide.wdata.we), wide.wdata.ready.eq(take & wide.cmd.we),
            ]
            self.sync += If(take,
                            addr.eq(wide.cmd.addr), we.eq(wide.cmd.we),
                            left.eq(Mux(wide.cmd.we, enabled(wide.wdata.we), 2 ** ratio - 1))
                            ).Elif(native.cmd.valid & native.cmd.ready, left.eq(rest))
            # Write data: the enabled native words of the FIFO's head, in order.
            head = fifo.source
            fresh = Signal(reset=1)
            data_left = Signal(ratio)
            mask = Signal(ratio)
            chunk = Signal(max=ratio)
            self.comb += [mask.eq(enabled(head.we)), If(~fresh, mask.eq(data_left))]
            self.comb += lowest(mask, chunk)
            words = Array(head.data[i * width:(i + 1) * width] for i in range(ratio))
            enables = Array(head.we[i * strobes:(i + 1) * strobes] for i in range(ratio))
            data_rest = mask & ~(1 << chunk)
            self.comb += [
                native.wdata.valid.eq(head.valid & (mask != 0)),
                native.wdata.data.eq(words[chunk]), native.wdata.we.eq(enables[chunk]),
                head.ready.eq(head.valid & ((mask == 0) | (native.wdata.ready & (data_rest == 0)))),
            ]
            self.sync += If(head.valid & head.ready, fresh.eq(1)
                            ).Elif(native.wdata.valid & native.wdata.ready,
                                   fresh.eq(0), data_left.eq(data_rest))
            # Read data: ``ratio`` native words make a wide one.
            rdata = stream.StrideConverter(native.rdata.description, wide.rdata.description)
            self.submodules += rdata
            self.submodules += stream.Pipeline(native.rdata, rdata, wide.rdata)

    return DownConverter()


def add_accelerator(soc, config, verilog_path, module, bus):
    """Put the accelerator into the LiteX ``soc`` (which has its ``sdram``):
    its AXI4 master on a new LiteDRAM crossbar port, its registers on the
    bus at :data:`ACCEL_BASE`, the CSR ``bertforge_status``. Returns the
    :class:`~bertforge.rtl.axi_top.AxiGemmTop` it is (for its parameters)."""
    from litedram.common import LiteDRAMNativePort
    from litedram.frontend.axi import LiteDRAMAXI2Native
    from migen.fhdl.bitcontainer import log2_int
    from litex.soc.integration.soc import SoCRegion
    top = AxiGemmTop(config, **bus)           # checks the bus parameters
    top._MustUse__silence = True
    data_width = gemm_config(config).mem_width
    soc.bertforge = accel = _accelerator(soc.platform, module, verilog_path, data_width,
                                         top.master_args["id_width"])
    # The crossbar's port at the controller's width and a pipelined
    # converter to the AXI data width (:func:`down_converter`; the
    # simulation counts both sides).
    soc.accel_native = native = soc.sdram.crossbar.get_port()
    port = native
    if data_width > native.data_width:
        port = LiteDRAMNativePort("both", native.address_width
                                  - log2_int(data_width // native.data_width), data_width,
                                  id=native.id)
        soc.accel_converter = down_converter(port, native)
    elif data_width < native.data_width:
        raise ParameterError(f"the engine's {data_width}-bit words are narrower than the "
                             f"SDRAM controller's {native.data_width} bits")
    soc.accel_port = port
    soc.accel_axi2native = LiteDRAMAXI2Native(accel.axi, port, base_address=MAIN_RAM_BASE)
    soc.bus.add_slave("bertforge", accel.axil,
                      region=SoCRegion(origin=ACCEL_BASE, size=ACCEL_SIZE, cached=False))
    return top


def make_soc(board_name, config, verilog_path, module, *, bus=None,
             sdram_module=SDRAM_MODULES[0], baudrate=DEFAULT_BAUD, sys_clk_mhz=DEFAULT_CLOCK_MHZ,
             quiet=True):
    """The LiteX SoC (not yet built) for ``board_name`` around the
    accelerator of ``config``, whose Verilog (module ``module``, AXI
    parameters ``bus`` as ``with_bus`` took them) is at ``verilog_path``.
    ``ParameterError`` for a bad parameter. ``quiet``: without LiteX's log."""
    import importlib
    board = soc_board(board_name)
    bus = dict(bus or {})
    check_soc(config, sdram_module=sdram_module, baudrate=baudrate, sys_clk_mhz=sys_clk_mhz, bus=bus)
    target = importlib.import_module(f"litex_boards.targets.{board.target}")

    class BertforgeSoC(target.BaseSoC):
        def __init__(self):
            super().__init__(device=board.device, sys_clk_freq=sys_clk_mhz * 1e6,
                             sdram_module_cls=sdram_module, with_led_chaser=False,
                             cpu_type=None, integrated_sram_size=0, with_uart=False,
                             with_timer=False, l2_size=0)
            self.add_uartbone(name="uartbone", uart_name="serial", baudrate=baudrate)
            self.accelerator_top = add_accelerator(self, config, verilog_path, module, bus)

        def add_sdram(self, *args, **kwargs):      # the target's call, with our controller
            kwargs.setdefault("controller_settings", controller_settings())
            super().add_sdram(*args, **kwargs)

    with _quiet(quiet):
        soc = BertforgeSoC()
    if soc.bus.regions["main_ram"].origin != MAIN_RAM_BASE:
        raise ParameterError(f"LiteX put the SDRAM at {soc.bus.regions['main_ram'].origin:#x}, "
                             f"not {MAIN_RAM_BASE:#x}")
    soc.bertforge_info = soc_info(soc, board.name, board.device, module, sdram_module,
                                  baudrate, sys_clk_mhz)
    return soc


def soc_info(soc, board, device, module, sdram_module, baudrate, sys_clk_mhz):
    """What the map and the report say of a SoC made here."""
    top = soc.accelerator_top
    return {"board": board, "device": device, "module": module, "sdram_module": sdram_module,
            "baudrate": baudrate, "sys_clk_mhz": sys_clk_mhz,
            "data_width": gemm_config(top.config).mem_width, "record_bytes": top.record_bytes,
            "bus": top.master_args}


@contextlib.contextmanager
def _quiet(quiet):
    """Without LiteX's log lines and prints (``quiet``)."""
    if not quiet:
        yield
        return
    logging.disable(logging.INFO)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def generate_soc(soc, out_dir, *, quiet=True):
    """Write the SoC's gateware into ``out_dir/gateware`` (LiteX's Builder,
    no tool run) with the accelerator's Verilog copied beside it and every
    source of the yosys script named by its path relative to that
    directory (YoWASP's tools see only their working directory), and the
    YoWASP shims; LiteX's ``csr.json`` in ``out_dir``. Returns the
    gateware directory."""
    from litex.soc.integration.builder import Builder
    from .soc_shims import relative_sources
    out = Path(out_dir).resolve()
    gateware = out / "gateware"
    gateware.mkdir(parents=True, exist_ok=True)
    # The accelerator's Verilog goes beside the SoC's, where the tools see it.
    sources = soc.platform.sources
    for index, (path, language, library) in enumerate(list(sources)):
        path = Path(path)
        if path.parent != gateware:
            shutil.copyfile(path, gateware / path.name)
            sources[index] = (str(gateware / path.name), language, library)
    builder = Builder(soc, output_dir=str(out), gateware_dir=str(gateware),
                      compile_software=False, compile_gateware=False,
                      csr_json=str(out / "csr.json"))
    with _quiet(quiet):
        builder.build(run=False)
    relative_sources(gateware / f"{soc.platform.name}.ys", gateware)
    return gateware
