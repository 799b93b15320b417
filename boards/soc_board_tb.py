"""cocotb testbench of the whole SoC in Verilator (:func:`bertforge.boards.soc_sim.sim_soc`):
the host drives UARTBone's UART pins bit by bit as the board's FT231X
would (:class:`~bertforge.boards.uart_model.UartModel`), carrying the
frames of :mod:`bertforge.boards.uartbone`, from a blocking session in a
thread (``bridge``) that runs the same host code as a board's host:
:func:`~bertforge.boards.soc_host.sdram_init` and the
:class:`~bertforge.boards.driver.Driver` over
:class:`~bertforge.boards.soc_host.SocRegisters`.

Spec keys: ``map`` (the SoC's map), ``divisor`` (clocks a bit),
``period_ns`` (of the simulated clock), and ``checks``, run in order,
each a dict with ``kind``:

- ``registers``: the CSR ``ctrl_scratch`` (its reset value, then a write
  read back), ``bertforge_status``, the accelerator's ID/version/config
  registers (``Driver.config``);
- ``sdram_init``: LiteDRAM's init sequence (the DFII control read back);
- ``probes``: UARTBone reads of ``[addr, length]`` ranges (the back-door
  image, as read back);
- ``block``: a block written (``addr``, ``data`` hex) and read back;
- ``corrupt``: a frame with an unknown command byte, then a truncated frame
  followed at once by a read (which it swallows: ``target``, an SDRAM
  word, gets the read's bytes); with ``resync``, a truncated frame, 100 ms
  of idle line (UARTBone drops it) and a read (which is answered);
- ``upload``: :func:`~bertforge.boards.soc_host.upload` of ``data`` (hex)
  at ``addr`` (``force``), as ``bertforge soc run`` uploads to a board;
- ``run_image``: :func:`~bertforge.boards.soc_host.run_image` (what
  ``bertforge soc run`` does on a board) of ``blob`` (hex), ``writes``
  (``[offset, hex]``), ``program``, ``records``, ``outputs``, polling
  every ``poll_cycles``;
- ``program``: ``base``, ``program`` (hex), ``upload`` (write it over
  UARTBone, else it is in the SDRAM already), ``outputs`` (``[addr,
  length]`` ranges read back after), ``poll_cycles``, ``max_polls``,
  optional ``segments`` (see :func:`_program`). Its result has the
  accelerator's ``counters`` and, on the simulation SoC, ``perf``: the
  SoC's performance counters over the run
  (:data:`~bertforge.boards.soc_sim.PERF_COUNTERS`).

Results (``result_path``): one dict per check under ``checks``; ``cycles``
(simulated clocks of the whole run) and ``bytes_sent``/``bytes_received``.
"""

import json

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer
from cocotb.utils import get_sim_time

from bertforge.boards.driver import Driver
from bertforge.boards.soc_host import SocRegisters, csr_read, csr_write, run_image, \
    run_program, sdram_init, upload
from bertforge.boards.uart_model import SimTransport, UartModel, bridge, resume
from bertforge.boards.uartbone import RESYNC_SECONDS, UartBone, UartBoneError, read_frame, \
    write_frame
from bertforge.sim.stream_tb import read_spec


class Transport(SimTransport):
    """A read waits twice as long as its bytes take (the SoC's UART sends
    about 11 bit times a byte, and each word is a bus read), plus ``slack``
    byte times."""

    def __init__(self, uart, slack=64):
        super().__init__(uart, timeout_cycles=0)
        self.slack = slack

    def read(self, count):
        return resume(self.uart.read)(count, (2 * count + self.slack) * 10 * self.uart.divisor)


def _registers(bus, soc_map, driver):
    out = {"scratch_reset": csr_read(bus, soc_map, "ctrl_scratch")}
    csr_write(bus, soc_map, "ctrl_scratch", 0xCAFEF00D)
    out["scratch_written"] = csr_read(bus, soc_map, "ctrl_scratch")
    out["status"] = csr_read(bus, soc_map, "bertforge_status")
    out["config"] = driver.config()
    return out


def _corrupt(bus, soc_map, sleep, check):
    """See the module doc; ``check["target"]``: where the swallowed read's
    bytes are written (an SDRAM word), set to all ones first;
    ``check["resync"]``: also a truncated frame, 100 ms of idle line and a
    read (3 million clocks of simulation)."""
    scratch = soc_map["csr"]["ctrl_scratch"]["addr"]
    out = {}
    csr_write(bus, soc_map, "ctrl_scratch", 0x5A5A0001)
    # An unknown command byte: length and address are read, nothing done.
    bus.transport.write(bytes([0x00, 0x01]) + (scratch >> 2).to_bytes(4, "big"))
    out["after_unknown"] = bus.read32(scratch)
    # A truncated write (its first two address bytes: the SDRAM's), then a
    # read at once: the read's 6 bytes complete the write's address and data.
    target = check["target"]
    bus.write32(target, 0xFFFFFFFF)
    truncated = write_frame(target, [0])[:4]
    bus.transport.write(truncated)
    try:
        out["swallowed_reply"] = bus.read32(scratch)
    except UartBoneError as error:
        out["swallowed_reply"] = None
        out["swallowed_error"] = str(error)
    out["swallowed_frame"] = (truncated + read_frame(scratch, 1)).hex()
    out["target_after"] = bus.read32(target)
    out["after_swallow"] = bus.read32(scratch)
    if check.get("resync"):
        # A truncated frame, then the host waits 100 ms: the next frame is answered.
        bus.transport.write(truncated)
        sleep(RESYNC_SECONDS)
        out["after_resync"] = bus.read32(scratch)
        out["target_after_resync"] = bus.read32(target)
    return out


def _run_program(bus, soc_map, driver, sleep, cycles, check):
    start = cycles()
    out = run_program(bus, soc_map, driver, polls=check["max_polls"],
                      interval=check["poll_cycles"] / soc_map["sys_clk_hz"], sleep=sleep)
    out["wall_cycles"] = cycles() - start
    return out


def _program(bus, soc_map, driver, sleep, cycles, check):
    """The ``program`` check; with ``segments`` (``[first, count]`` record
    ranges, in order) each range runs as its own program, one after
    another, each with its counters (under ``segments``)."""
    program = bytes.fromhex(check["program"])
    records = len(program) // driver.record_bytes
    if check["upload"]:
        driver.load(check["base"], program)
    segments = check.get("segments") or [[0, records]]
    runs = []
    for first, count in segments:
        driver.point(check["base"] + first * driver.record_bytes, count)
        runs.append(_run_program(bus, soc_map, driver, sleep, cycles, check))
    out = dict(runs[-1]) if len(runs) == 1 else {"segments": runs}
    if len(runs) > 1:
        out["pc"] = sum(run["pc"] for run in runs)
        out["polls"] = sum(run["polls"] for run in runs)
        out["counters"] = {name: sum(run["counters"][name] for run in runs)
                           for name in runs[0]["counters"]}
        out["perf"] = {name: sum(run["perf"][name] for run in runs) for name in runs[0]["perf"]}
    out["outputs"] = [bus.read_block(addr, length).hex() for addr, length in check["outputs"]]
    return out


@cocotb.test()
async def soc(dut):
    spec = read_spec()
    soc_map, divisor, period = spec["map"], spec["divisor"], spec["period_ns"]
    Clock(dut.sys_clk, period, unit="ns").start()
    dut.sim_trace.value = 0
    dut.sys_rst.value = 1
    await ClockCycles(dut.sys_clk, 10)
    dut.sys_rst.value = 0
    await ClockCycles(dut.sys_clk, 10)
    uart = UartModel(dut.sys_clk, dut.serial_rx, dut.serial_tx, divisor, period_ns=period)
    await ClockCycles(dut.sys_clk, 20 * divisor)    # the line idles high before the first start bit
    bus = UartBone(Transport(uart))
    clock = soc_map["sys_clk_hz"]

    async def wait(seconds):
        await Timer(max(1, round(seconds * clock)) * period, unit="ns")

    def sleep(seconds):
        resume(wait)(seconds)

    def cycles():
        return round(get_sim_time("ns") / period)

    driver = Driver(SocRegisters(bus, soc_map), record_bytes=soc_map["accelerator"]["record_bytes"])
    report = {"checks": []}

    def session():
        for check in spec["checks"]:
            kind = check["kind"]
            if kind == "registers":
                out = _registers(bus, soc_map, driver)
            elif kind == "sdram_init":
                out = {"control": sdram_init(bus, soc_map, sleep)}
            elif kind == "probes":
                out = {"data": [bus.read_block(addr, length).hex()
                                for addr, length in check["ranges"]]}
            elif kind == "block":
                data = bytes.fromhex(check["data"])
                bus.write_block(check["addr"], data)
                out = {"data": bus.read_block(check["addr"], len(data)).hex()}
            elif kind == "corrupt":
                out = _corrupt(bus, soc_map, sleep, check)
            elif kind == "upload":
                out = upload(bus, soc_map, check["addr"], bytes.fromhex(check["data"]),
                             force=check.get("force", False))
            elif kind == "run_image":
                out = run_image(bus, soc_map, bytes.fromhex(check["blob"]),
                                program=check["program"], records=check["records"],
                                outputs=check["outputs"], sleep=sleep,
                                writes=[(at, bytes.fromhex(data)) for at, data in check["writes"]],
                                poll_seconds=check["poll_cycles"] / soc_map["sys_clk_hz"])
                out["outputs"] = [data.hex() for data in out["outputs"]]
            elif kind == "program":
                out = _program(bus, soc_map, driver, sleep, cycles, check)
            else:
                raise ValueError(f"unknown check {kind!r}")
            report["checks"].append({"kind": kind, **out})

    try:
        await bridge(session)()
    finally:
        report["cycles"] = cycles()
        report["bytes_sent"], report["bytes_received"] = bus.sent, bus.received
        with open(spec["result_path"], "w") as f:
            json.dump(report, f)
