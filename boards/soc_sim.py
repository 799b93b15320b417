"""The SoC for simulation: the same LiteDRAM controller, UARTBone and
accelerator as on the board (:mod:`bertforge.boards.soc`), with LiteDRAM's
SDRAM PHY model (``litedram.phy.model``, its DFI timing checker on: a
violation is a ``$display`` line) in place of the SDR PHY and the pins.
Its Verilog top ``soc_sim`` has ``sys_clk``, ``sys_rst``, ``serial_rx``
and ``serial_tx`` (UARTBone's UART, driven bit by bit by a testbench).

:func:`sim_soc` is what the Verilator runner builds: the SoC's and the
accelerator's Verilog as one text, the SoC's map
(:func:`~bertforge.boards.soc_map.soc_map`) and the SDRAM model's bank
files. Each bank of the model reads its ``$readmemh`` file from the
simulation's working directory when the simulation starts, so one build
serves every SDRAM content: :func:`write_sdram_banks` writes a memory image
into those files (the back door).
"""

import re
import tempfile
from pathlib import Path

import numpy as np

from .soc import (DEFAULT_BAUD, DEFAULT_CLOCK_MHZ, MAX_BAUD, SDRAM_MODULES, _quiet,
                  add_accelerator, check_soc, controller_settings, soc_info)

__all__ = ["PERF_COUNTERS", "make_sim_soc", "write_sim_verilog", "SIM_TOP", "SIM_CLOCK_MHZ", "SIM_BAUD", "sim_soc",
           "write_sdram_banks"]

SIM_TOP = "soc_sim"
#: The simulated system clock: the board's default (SDRAM timings in
#: cycles as on the board).
SIM_CLOCK_MHZ = DEFAULT_CLOCK_MHZ
#: UARTBone's baud rate in simulation: the FT231X's fastest, 10 clocks a bit.
SIM_BAUD = MAX_BAUD


#: The simulation SoC's performance counters (CSRs ``perf_<name>``): they
#: count while the CSR ``perf_enable`` is 1 and the accelerator's irq is low
#: (a run's figure is the difference of two reads around it):
#: DFI commands at the PHY model (``activate``, ``read``, ``write``,
#: ``precharge``, ``refresh``), the accelerator's LiteDRAM port at the
#: controller's width (``native_cmd``: commands taken, ``native_stall``:
#: cycles a command waited), its port at the AXI width (``wide_cmd``,
#: ``wide_stall``), its AXI channels (``ar``, ``r``: beats taken, ``r_stall``:
#: read data the engine did not take, ``aw``, ``w``) and the clock (``cycles``).
PERF_COUNTERS = ("cycles", "activate", "read", "write", "precharge", "refresh", "native_cmd",
                 "native_stall", "wide_cmd", "wide_stall", "ar", "r", "r_stall", "aw", "w")


def _perf(soc):
    """The performance counters (:data:`PERF_COUNTERS`) of the simulation SoC."""
    from migen import Signal
    from litex.gen import LiteXModule
    from litex.soc.interconnect.csr import CSRStatus, CSRStorage

    phase = soc.sdrphy.dfi.phases[0]
    native, wide, axi = soc.accel_native, soc.accel_port, soc.bertforge.axi

    def command(ras, cas, we):     # a DFI command (active low, chip selected)
        return ~phase.cs_n & (phase.ras_n == (not ras)) & (phase.cas_n == (not cas)) & \
            (phase.we_n == (not we))

    events = {
        "cycles": 1, "activate": command(1, 0, 0), "read": command(0, 1, 0),
        "write": command(0, 1, 1), "precharge": command(1, 0, 1), "refresh": command(1, 1, 0),
        "native_cmd": native.cmd.valid & native.cmd.ready,
        "native_stall": native.cmd.valid & ~native.cmd.ready,
        "wide_cmd": wide.cmd.valid & wide.cmd.ready, "wide_stall": wide.cmd.valid & ~wide.cmd.ready,
        "ar": axi.ar.valid & axi.ar.ready, "r": axi.r.valid & axi.r.ready,
        "r_stall": axi.r.valid & ~axi.r.ready, "aw": axi.aw.valid & axi.aw.ready,
        "w": axi.w.valid & axi.w.ready,
    }

    class Perf(LiteXModule):
        def __init__(self):
            self.enable = CSRStorage(1, name="enable")
            counting = self.enable.storage & ~soc.bertforge.irq
            for name in PERF_COUNTERS:
                count = Signal(32)
                self.sync += count.eq(count + (counting & events[name]))
                csr = CSRStatus(32, name=name)
                setattr(self, name, csr)
                self.comb += csr.status.eq(count)

    return Perf()


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
            self.add_sdram("sdram", phy=self.sdrphy, module=chip, l2_cache_size=0,
                           controller_settings=controller_settings())
            self.add_uartbone(name="uartbone", uart_name="serial", baudrate=baudrate)
            self.accelerator_top = add_accelerator(self, config, verilog_path, module, bus)
            self.perf = _perf(self)

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
    # Without LiteX's time stamps: the same SoC is the same text (one cached build).
    text = re.sub(r"^// Date .*\n", "", output.main_source, flags=re.MULTILINE)
    path.write_text(re.sub(r"(Auto-Generated by LiteX) on [-0-9: ]+\.", r"\1.", text))
    for name, content in output.data_files.items():     # the SDRAM banks' $readmemh files
        (directory / name).write_text(content)
    return path


def sim_soc(config, verilog, module, *, bus=None, sdram_module=SDRAM_MODULES[0],
            baudrate=SIM_BAUD, sys_clk_mhz=SIM_CLOCK_MHZ):
    """The simulation SoC around the accelerator ``module`` (its Verilog
    text ``verilog``) as ``{"verilog"`` (the SoC, then the accelerator: one
    text, top :data:`SIM_TOP`), ``"map"`` (its
    :func:`~bertforge.boards.soc_map.soc_map`), ``"banks"`` (the SDRAM
    model's ``$readmemh`` file of each bank, bank 0 first), ``"geometry"``
    (``banks``, ``cols``: words of a row in a bank, ``word_bytes``)}."""
    from litex.soc.integration.export import get_csr_json
    from .soc_map import soc_map
    with tempfile.TemporaryDirectory(prefix="bertforge-socsim-") as tmp:
        tmp = Path(tmp)
        (tmp / f"{module}.v").write_text(verilog)
        # A non-empty init makes every bank read a file at start (the back door).
        soc = make_sim_soc(config, tmp / f"{module}.v", module, bus=bus,
                           sdram_module=sdram_module, baudrate=baudrate,
                           sys_clk_mhz=sys_clk_mhz, init=[0])
        top = write_sim_verilog(soc, tmp).read_text()
        (tmp / "csr.json").write_text(get_csr_json(soc.csr_regions, soc.constants,
                                                   soc.mem_regions))
        the_map = soc_map(soc, tmp / "csr.json")
    geom = soc.sdram.controller.settings.geom
    phy = soc.sdram.controller.settings.phy
    banks = re.findall(r'\$readmemh\("([^"]+)"', top)
    if len(banks) != 2 ** geom.bankbits:
        raise RuntimeError(f"expected {2 ** geom.bankbits} SDRAM bank files, found {banks}")
    if (phy.memtype, phy.nphases) != ("SDR", 1):     # one word a column (burst length 1)
        raise RuntimeError(f"the back door lays out SDR SDRAM, not {phy.memtype}")
    geometry = {"banks": 2 ** geom.bankbits, "cols": 2 ** geom.colbits,
                "word_bytes": phy.dfi_databits // 8}
    return {"verilog": top + "\n" + verilog, "map": the_map, "banks": banks,
            "geometry": geometry}


def write_sdram_banks(image, sim, directory):
    """Write the bank files of ``sim`` (:func:`sim_soc`) into ``directory``
    (where the simulation runs) so that the SDRAM holds ``image`` (bytes,
    from ``main_ram``'s first byte on) when the simulation starts. The
    controller maps addresses row, bank, column (LiteDRAM's
    ``ROW_BANK_COL``): each row of ``cols`` words goes to the next bank."""
    geometry = sim["geometry"]
    banks, cols, width = geometry["banks"], geometry["cols"], geometry["word_bytes"]
    data = np.asarray(image, dtype=np.uint8).ravel()
    stride = banks * cols * width
    data = np.concatenate([data, np.zeros(-data.size % stride, dtype=np.uint8)])
    words = data.view(f"<u{width}").reshape(-1, banks, cols)
    digits = 2 * width
    for bank, name in enumerate(sim["banks"]):
        values = words[:, bank, :].ravel()
        Path(directory, name).write_text("".join(f"{v:0{digits}x}\n" for v in values.tolist()))
