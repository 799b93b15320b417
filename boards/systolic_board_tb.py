"""cocotb testbench of a whole board top-level (UART host link + block) in
Verilator, driven bit by bit through its UART pins by the same
:class:`~bertforge.boards.protocol.HostLink` code that ``bertforge run`` uses.

Spec: ``config`` (a SystolicTopConfig as a dict), ``data`` (an ``.npz`` with
``a_0, b_0, ...`` tiles as :func:`bertforge.sim.systolic_golden.systolic_golden`
takes them), ``corrupt`` (send a frame with a bad CRC before each tile),
``edges`` (first the host link's :data:`~bertforge.boards.uart_model.LINK_EDGES`).
"""

import cocotb
import numpy as np

from bertforge.boards.systolic_host import systolic_tile_bytes, systolic_result_from_bytes
from bertforge.boards.systolic_top import SystolicTopConfig
from bertforge.sim.systolic_golden import systolic_golden
from bertforge.sim.systolic_tb import load_tiles
from bertforge.boards.uart_model import (bad_argument_rejected, bridge, link_edges, open_board,
                                         run_each, save_report)


@cocotb.test()
async def board_tiles(dut):
    spec, config, data, link = await open_board(dut, SystolicTopConfig)
    tiles = load_tiles(data)
    report = {}

    def one_tile(tile):
        a, b = tile
        mem_a, mem_b, k = systolic_tile_bytes(config, a, b)
        link.write(0, 0, mem_a)
        link.write(1, 0, mem_b)
        cycles = link.run(k.to_bytes(2, "little"))
        rows = a.shape[0] if config.array.dataflow == "os" else k
        nbytes = config.word_bytes()[2] * rows
        result = systolic_result_from_bytes(config, link.read(2, 0, nbytes), rows)
        return {"k": k, "cycles": cycles,
                "match": bool(np.array_equal(result, systolic_golden(config.array, a, b)))}

    def session():
        if spec.get("edges"):
            report["edges"] = link_edges(link)
        run_each(link, spec, report, "tiles", tiles, one_tile)
        report["k0_rejected"] = bad_argument_rejected(link, (0).to_bytes(2, "little"))

    await bridge(session)()
    # LEDs: 0 busy (idle now), 1 a run done, 2 a bad frame seen (the link's bad_frames)
    report["leds"] = int(dut.leds.value)
    save_report(spec, report, link, config, "tiles", len(tiles))
    assert report["leds"] == 2 | 4 * bool(spec.get("corrupt")), report
    assert report.get("k0_rejected"), report
    assert all(report.get("edges", {}).values()), report
