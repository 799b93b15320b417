"""The host's side of the SoC (:mod:`bertforge.boards.soc`), over any bus
with ``read32(addr)`` / ``write32(addr, value)`` at bus byte addresses
(:class:`~bertforge.boards.uartbone.UartBone` on a board's serial port or
in the SoC's testbench; LiteX's ``RemoteClient`` through
:class:`RemoteClientBus`), driven by the SoC's map
(:func:`~bertforge.boards.soc_map.soc_map`, or its ``soc_map.json``):

- :func:`sdram_init`: LiteDRAM's SDRAM initialization, which LiteX's BIOS
  (``sdram_init`` in ``liblitedram/sdram.c``) runs on a SoC with a CPU:
  the DFII to software control, the map's init sequence through the DFII
  injector of phase 0, then back to hardware control;
- :class:`SocRegisters`: the accelerator's registers at their bus
  addresses, as the backend :class:`~bertforge.boards.driver.Driver` takes;
- :func:`wait_irq`: poll the CSR ``bertforge_status`` until the
  accelerator's ``irq`` is high.
"""

import time

from bertforge.rtl.errors import BertforgeError

__all__ = ["DFII_CONTROL_SOFTWARE", "DFII_CONTROL_HARDWARE", "csr_write", "csr_read",
           "sdram_init", "SocRegisters", "RemoteClientBus", "wait_irq"]

#: ``sdram_dfii_control`` values of liblitedram's ``sdram_software_control_on``
#: (CKE, ODT, RESET_N; SEL 0) and ``_off`` (SEL: the controller drives the SDRAM).
DFII_CONTROL_SOFTWARE = 0x0E
DFII_CONTROL_HARDWARE = 0x01


def csr_write(bus, soc_map, name, value):
    """Write the CSR ``name`` of the map (a CSR of several words: most
    significant word first, as LiteX lays them out)."""
    reg = soc_map["csr"][name]
    for index in range(reg["size"]):
        shift = 32 * (reg["size"] - 1 - index)
        bus.write32(reg["addr"] + 4 * index, (value >> shift) & 0xFFFFFFFF)


def csr_read(bus, soc_map, name):
    reg = soc_map["csr"][name]
    value = 0
    for index in range(reg["size"]):
        value = (value << 32) | bus.read32(reg["addr"] + 4 * index)
    return value


def sdram_init(bus, soc_map, sleep=time.sleep):
    """Initialize the SDRAM (LiteDRAM's sequence for its chip, from the
    map): each step's delay (in system clocks) is slept, in seconds
    through ``sleep``. Returns the DFII control value read back
    (:data:`DFII_CONTROL_HARDWARE` when the controller has the SDRAM)."""
    clock = soc_map["sys_clk_hz"]
    csr_write(bus, soc_map, "sdram_dfii_control", DFII_CONTROL_SOFTWARE)
    for step in soc_map["sdram"]["init"]:
        csr_write(bus, soc_map, "sdram_dfii_pi0_address", step["address"])
        csr_write(bus, soc_map, "sdram_dfii_pi0_baddress", step["bank"])
        if step["kind"] == "control":
            csr_write(bus, soc_map, "sdram_dfii_control", step["value"])
        else:
            csr_write(bus, soc_map, "sdram_dfii_pi0_command", step["value"])
            csr_write(bus, soc_map, "sdram_dfii_pi0_command_issue", 1)
        if step["delay_cycles"]:
            sleep(step["delay_cycles"] / clock)
    csr_write(bus, soc_map, "sdram_dfii_control", DFII_CONTROL_HARDWARE)
    return csr_read(bus, soc_map, "sdram_dfii_control")


class SocRegisters:
    """The driver's backend on the SoC: register offsets at the
    accelerator's base on ``bus``, blocks at bus addresses (the SDRAM from
    ``main_ram``'s base on: the accelerator's addresses)."""

    def __init__(self, bus, soc_map):
        self.bus = bus
        self.base = soc_map["accelerator"]["base"]

    def read32(self, offset):
        return self.bus.read32(self.base + offset)

    def write32(self, offset, value):
        self.bus.write32(self.base + offset, value)

    def read_block(self, addr, length):
        return self.bus.read_block(addr, length)

    def write_block(self, addr, data):
        self.bus.write_block(addr, data)


class RemoteClientBus:
    """LiteX's ``RemoteClient`` (``litex_server`` in between) as a bus:
    ``read32``/``write32`` and ``read_block``/``write_block`` (reads of at
    most 255 words, UARTBone's frame)."""

    def __init__(self, client):
        self.client = client

    def read32(self, addr):
        return self.client.read(addr)

    def write32(self, addr, value):
        self.client.write(addr, value)

    def write_block(self, addr, data):
        data = bytes(data)
        self.client.write(addr, [int.from_bytes(data[i:i + 4], "little")
                                 for i in range(0, len(data), 4)])

    def read_block(self, addr, length):
        words = []
        for at in range(0, length // 4, 255):
            words += self.client.read(addr + 4 * at, min(255, length // 4 - at))
        return b"".join(w.to_bytes(4, "little") for w in words)


def wait_irq(bus, soc_map, *, polls, interval, sleep=time.sleep):
    """Poll ``bertforge_status`` (``interval`` seconds apart, at most
    ``polls`` times) until the accelerator's irq is high; returns the polls
    it took, or raises :class:`~bertforge.rtl.errors.BertforgeError`."""
    for index in range(1, polls + 1):
        if csr_read(bus, soc_map, soc_map["accelerator"]["irq_csr"]) & 1:
            return index
        sleep(interval)
    raise BertforgeError(f"the accelerator's irq did not rise in {polls} polls "
                         f"{interval * 1e3:g} ms apart")
