"""cocotb testbench of a whole board top-level (UART host link + block) in
Verilator, driven bit by bit through its UART pins by the same
:class:`~bertforge.boards.protocol.HostLink` code that ``bertforge run`` uses.

Spec: ``config`` (a SystolicTopConfig as a dict), ``data`` (an ``.npz`` with
``a_0, b_0, ...`` tiles as :func:`bertforge.sim.systolic_golden.systolic_golden`
takes them), ``corrupt`` (send a frame with a bad CRC before each tile).
"""

import json
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from bertforge.boards import protocol
from bertforge.boards.host import systolic_tile_bytes, systolic_result_from_bytes
from bertforge.boards.systolic_top import SystolicTopConfig
from bertforge.rtl.systolic import SystolicConfig
from bertforge.sim.systolic_golden import systolic_golden
from bertforge.sim.systolic_tb import load_tiles
from bertforge.sim.uart_model import SimTransport, UartModel, bridge


@cocotb.test()
async def board_tiles(dut):
    spec = json.loads(open(os.environ["BERTFORGE_SPEC"]).read())
    raw = dict(spec["config"])
    config = SystolicTopConfig(array=SystolicConfig(**raw.pop("array")), **raw)
    tiles = load_tiles(spec["data"])
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    uart = UartModel(dut.clk, dut.uart_rx, dut.uart_tx, config.divisor)
    transport = SimTransport(uart, timeout_cycles=200 * config.divisor * 10)
    link = protocol.HostLink(transport)
    report = {"tiles": [], "corrupt_rejected": 0}

    def session():
        design, version = link.ping()
        report["design_id"], report["version"] = design, version
        for a, b in tiles:
            if spec.get("corrupt"):
                frame = bytearray(protocol.encode_frame(protocol.SYNC_HOST, protocol.WRITE,
                                                        b"\x00\x00\x00\x01\x02"))
                frame[-1] ^= 0x5A
                transport.write(bytes(frame))
                try:
                    link.reply()
                except protocol.LinkError as error:
                    assert "bad checksum" in str(error), error
                    report["corrupt_rejected"] += 1
            mem_a, mem_b, k = systolic_tile_bytes(config, a, b)
            link.write(0, 0, mem_a)
            link.write(1, 0, mem_b)
            cycles = link.run(k.to_bytes(2, "little"))
            rows = a.shape[0] if config.array.dataflow == "os" else k
            nbytes = config.word_bytes()[2] * rows
            result = systolic_result_from_bytes(config, link.read(2, 0, nbytes), rows)
            report["tiles"].append({"k": k, "cycles": cycles,
                                    "match": bool(np.array_equal(result, systolic_golden(config.array, a, b)))})
        try:
            link.run((0).to_bytes(2, "little"))
        except protocol.LinkError as error:
            report["k0_rejected"] = "bad argument" in str(error)

    await bridge(session)()
    report["match"] = all(t["match"] for t in report["tiles"]) and len(report["tiles"]) == len(tiles)
    report["bytes_sent"] = transport.sent
    with open(spec["result_path"], "w") as f:
        json.dump(report, f)
    assert report["match"], report
    assert report.get("k0_rejected"), report
    if spec.get("corrupt"):
        assert report["corrupt_rejected"] == len(tiles)
