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
  accelerator's ``irq`` is high;
- :func:`upload`: a memory image into the SDRAM, read back and compared,
  with a marker (its length and CRC-32) in the SDRAM's last words, so that
  a board that already holds it is not loaded again;
- :func:`run_program`: start the program the registers point at, wait for
  the irq, read the counters;
- :func:`run_image`: all of it for a memory image holding a program
  (``bertforge soc run`` on a board, a test on the simulated SoC).
"""

import time
import zlib

from bertforge.rtl.errors import BertforgeError
from .uartbone import MAX_BURST, WordBus, words_block

__all__ = ["DFII_CONTROL_SOFTWARE", "DFII_CONTROL_HARDWARE", "csr_write", "csr_read",
           "sdram_init", "SocRegisters", "RemoteClientBus", "wait_irq", "UPLOAD_MAGIC",
           "marker_address", "upload", "perf_counters", "run_program", "run_image"]

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


class RemoteClientBus(WordBus):
    """LiteX's ``RemoteClient`` (``litex_server`` in between) as a
    :class:`~bertforge.boards.uartbone.WordBus` (reads of at most 255
    words, UARTBone's frame)."""

    def __init__(self, client):
        self.client = client

    def write_words(self, addr, words):
        self.client.write(addr, list(words))

    def read_words(self, addr, count):
        words = []
        for at in range(0, count, MAX_BURST):
            words += self.client.read(addr + 4 * at, min(MAX_BURST, count - at))
        return words


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


#: The first word of :func:`upload`'s marker ("BFIM").
UPLOAD_MAGIC = 0x4246494D


def marker_address(soc_map):
    """Where :func:`upload` keeps its marker: the SDRAM's last 16 bytes."""
    sdram = soc_map["sdram"]
    return sdram["base"] + sdram["size"] - 16


def upload(bus, soc_map, addr, data, *, force=False):
    """Write ``data`` (whole words) at bus address ``addr`` in the SDRAM,
    read it back and compare, then write the marker (magic, address,
    length, CRC-32) at :func:`marker_address`. If the marker already names
    this address, length and CRC-32 (a board that holds the image since
    the last upload; ``force``: upload anyway), nothing is written.
    Returns ``{"uploaded", "crc32", "bytes"}``; a readback that differs
    raises :class:`~bertforge.rtl.errors.BertforgeError`."""
    data = bytes(data)
    crc = zlib.crc32(data)
    marker = marker_address(soc_map)
    sdram = soc_map["sdram"]
    if not (sdram["base"] <= addr and addr + len(data) <= marker):
        raise BertforgeError(f"{len(data):,} bytes at {addr:#x} do not fit the SDRAM below its "
                             f"marker at {marker:#x}")
    expected = [UPLOAD_MAGIC, addr, len(data), crc]
    if not force and bus.read_block(marker, 16) == words_block(expected):
        return {"uploaded": False, "crc32": crc, "bytes": len(data)}
    bus.write32(marker, 0)                       # no valid marker while the image changes
    bus.write_block(addr, data)
    back = bus.read_block(addr, len(data))
    if back != data:
        at = next(i for i in range(len(data)) if back[i] != data[i])
        raise BertforgeError(f"the SDRAM read back differs from the upload at {addr + at:#x} "
                             f"(wrote {data[at]:#04x}, read {back[at]:#04x})")
    bus.write_block(marker, words_block(expected))
    return {"uploaded": True, "crc32": crc, "bytes": len(data)}


def perf_counters(bus, soc_map):
    """The simulation SoC's performance counters (CSRs ``perf_*``; ``{}`` on
    a SoC without them, as a board's)."""
    return {name[len("perf_"):]: csr_read(bus, soc_map, name) for name in soc_map["csr"]
            if name.startswith("perf_") and name != "perf_enable"}


def run_program(bus, soc_map, driver, *, polls, interval, sleep=time.sleep):
    """Start the program the accelerator's registers point at (``driver``:
    a :class:`~bertforge.boards.driver.Driver` over :class:`SocRegisters`),
    wait for its irq (:func:`wait_irq`), and return ``polls``,
    ``irq_status``, ``pc`` (commands done), ``counters`` (the accelerator's)
    and ``perf`` (the SoC's, over the run: :func:`perf_counters`)."""
    before = perf_counters(bus, soc_map)
    if before:            # counting from here until the irq rises
        csr_write(bus, soc_map, "perf_enable", 1)
    driver.run(irq=True)                     # the start: one CTRL write
    out = {"polls": wait_irq(bus, soc_map, polls=polls, interval=interval, sleep=sleep)}
    out["irq_status"] = csr_read(bus, soc_map, soc_map["accelerator"]["irq_csr"])
    out["pc"] = driver.wait(polls=1)
    out["counters"] = driver.counters()
    if before:
        csr_write(bus, soc_map, "perf_enable", 0)
    out["perf"] = {name: (value - before[name]) % 2 ** 32
                   for name, value in perf_counters(bus, soc_map).items()}
    return out


def run_image(bus, soc_map, blob, *, program, records, outputs, writes=(), force_upload=False,
              sleep=time.sleep, poll_seconds=0.01, timeout_seconds=600):
    """On the SoC behind ``bus``: LiteDRAM's init, :func:`upload` of
    ``blob`` (bytes from the SDRAM's base on: what stays, the weights)
    unless the board holds it, ``writes`` (``(offset, bytes)``: what
    changes from run to run, the input and the program) written and read
    back, the registers pointed at the program of ``records`` records at
    byte offset ``program``, :func:`run_program`, and the ``outputs``
    ranges (``(offset, bytes)``) read back. Returns ``{"upload", "run",
    "outputs"`` (bytes each), ``"seconds"`` (upload and run, wall clock)}."""
    from .driver import Driver
    base = soc_map["sdram"]["base"]
    driver = Driver(SocRegisters(bus, soc_map), record_bytes=soc_map["accelerator"]["record_bytes"])
    seconds = {}
    mark = time.perf_counter()
    sdram_init(bus, soc_map, sleep)
    uploaded = upload(bus, soc_map, base, blob, force=force_upload)
    for offset, data in writes:
        bus.write_block(base + offset, data)
        if bus.read_block(base + offset, len(data)) != bytes(data):
            raise BertforgeError(f"the SDRAM read back differs from the {len(data):,} bytes "
                                 f"written at {base + offset:#x}")
    seconds["upload"] = time.perf_counter() - mark
    driver.point(base + program, records)
    mark = time.perf_counter()
    run = run_program(bus, soc_map, driver, polls=max(1, round(timeout_seconds / poll_seconds)),
                      interval=poll_seconds, sleep=sleep)
    seconds["run"] = time.perf_counter() - mark
    return {"upload": uploaded, "run": run,
            "outputs": [bus.read_block(base + offset, size) for offset, size in outputs],
            "seconds": seconds}
