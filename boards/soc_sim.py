"""The SoC for simulation: the same LiteDRAM controller, UARTBone and
accelerator as on the board (:mod:`bertforge.boards.soc`), with LiteDRAM's
SDRAM PHY model (``litedram.phy.model``, its DFI timing checker on: a
violation is a ``$display`` line) in place of the SDR PHY and the pins.
Its Verilog top ``soc_sim`` has ``sys_clk``, ``sys_rst``, ``serial_rx``
and ``serial_tx`` (UARTBone's UART, driven bit by bit by a testbench)."""

from pathlib import Path

from .soc import (DEFAULT_BAUD, SDRAM_MODULES, _quiet, add_accelerator, check_soc, soc_info)

__all__ = ["make_sim_soc", "write_sim_verilog", "SIM_TOP"]

SIM_TOP = "soc_sim"


def make_sim_soc(config, verilog_path, module, *, bus=None, sdram_module=SDRAM_MODULES[0],
                 baudrate=DEFAULT_BAUD, sys_clk_mhz=50.0, init=(), quiet=True):
    """The simulation SoC of ``config`` (as :func:`~bertforge.boards.soc.make_soc`);
    ``init``: the SDRAM's first 32-bit words (a backdoor load)."""
    from migen import ClockDomain, Module
    from litedram import modules as litedram_modules
    from litedram.phy.model import SDRAM_VERBOSE_STD, SDRAMPHYModel, get_sdram_phy_settings
    from litex.build.generic_platform import Pins, Subsignal
    from litex.build.sim import SimPlatform
    from litex.soc.integration.soc_core import SoCMini
    bus = dict(bus or {})
    check_soc(config, sdram_module=sdram_module, baudrate=baudrate, sys_clk_mhz=sys_clk_mhz,
              bus=bus)
    io = [("sys_clk", 0, Pins(1)), ("sys_rst", 0, Pins(1)),
          ("serial", 0, Subsignal("tx", Pins(1)), Subsignal("rx", Pins(1)))]
    clk = sys_clk_mhz * 1e6

    class _CRG(Module):
        def __init__(self, platform):
            self.clock_domains.cd_sys = ClockDomain()
            self.comb += [self.cd_sys.clk.eq(platform.request("sys_clk")),
                          self.cd_sys.rst.eq(platform.request("sys_rst"))]

    class SimSoC(SoCMini):
        def __init__(self):
            platform = SimPlatform("SIM", io, name=SIM_TOP)
            super().__init__(platform, clk_freq=clk)
            self.crg = _CRG(platform)
            chip = getattr(litedram_modules, sdram_module)(clk, "1:1")
            settings = get_sdram_phy_settings(memtype="SDR", data_width=16, clk_freq=clk)
            self.sdrphy = SDRAMPHYModel(chip, settings, clk_freq=clk, init=list(init),
                                        verbosity=SDRAM_VERBOSE_STD)
            self.add_sdram("sdram", phy=self.sdrphy, module=chip, l2_cache_size=0)
            self.add_uartbone(name="uartbone", uart_name="serial", baudrate=baudrate)
            self.accelerator_top = add_accelerator(self, config, verilog_path, module, bus)

    with _quiet(quiet):
        soc = SimSoC()
    soc.bertforge_info = soc_info(soc, "sim", "verilator", module, sdram_module, baudrate,
                                  sys_clk_mhz)
    return soc


def write_sim_verilog(soc, directory):
    """Write the simulation SoC's Verilog (``soc_sim.v``, its memory init
    files beside it) into ``directory``; returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with _quiet(True):
        output = soc.platform.get_verilog(soc, name=SIM_TOP)
    path = directory / f"{SIM_TOP}.v"
    path.write_text(output.main_source)
    for name, content in output.data_files.items():     # the SDRAM banks' $readmemh files
        (directory / name).write_text(content)
    return path
