"""cocotb testbench of the N:M sparse board top-level
(:mod:`bertforge.boards.sparse_top`) in Verilator, driven bit by bit through
its UART pins by the same :class:`~bertforge.boards.protocol.HostLink` and
:func:`~bertforge.boards.sparse_host.run_sparse` code that ``bertforge run sparse``
uses.

Spec: ``config`` (a SparseTopConfig as a dict), ``data`` (an ``.npz`` with
``a_t`` (R x K activations) and ``w_t`` (K x C weights, N:M sparse) per
tile t), ``patterns`` (``[n, m]`` per tile), ``corrupt`` (send a frame with a
bad CRC before each tile).

Each tile's result must equal :func:`~bertforge.sim.sparse_golden.nm_tile_golden`
bit for bit and its reported cycles ``sparse_cycles(array, [beats]) + 1``.
Then RUNs with 0 groups, 0 beats and ``k_max + 1`` beats or groups must be
rejected (``BAD_ARGUMENT``), two RUNs whose counts disagree with B's
``group_end`` bits must finish (the first, one beat, in the model's cycles),
and the first tile, run again, must still be right.
"""

import cocotb
import numpy as np

from bertforge.boards.sparse_host import run_sparse, sparse_run_args
from bertforge.boards.sparse_top import SparseTopConfig
from bertforge.sim.sparse_cycles import sparse_cycles, nm_tile_beats
from bertforge.sim.sparse_golden import compress_nm, nm_tile_golden
from bertforge.boards.uart_model import (bad_argument_rejected, bridge, open_board, run_each,
                                         save_report)


def board_cycles(array, beats):
    """Cycles a sparse top reports for a tile of ``beats`` compressed beats:
    the array's model (first input handshake to last result row, both
    counted) plus the cycle of ``start`` (the memory readers' first read
    is issued the cycle after it and its data are on the streams a cycle
    later; the reply counts from ``start``'s cycle to the last row's)."""
    return sparse_cycles(array, [beats]) + 1


@cocotb.test()
async def sparse_board_tiles(dut):
    spec, config, data, link = await open_board(dut, SparseTopConfig)
    array = config.array
    tiles = [(data[f"a_{t}"], data[f"w_{t}"], int(n), int(m))
             for t, (n, m) in enumerate(spec["patterns"])]
    report = {"bad_runs_rejected": []}

    def one_tile(tile):
        a, w, n, m = tile
        result, cycles = run_sparse(link, config, a, w, n, m)
        beats = nm_tile_beats(a.shape[1], n, m)
        values, indices = compress_nm(w, n, m)
        expected = nm_tile_golden(array, a, values, indices, n, m)
        return {"pattern": f"{n}:{m}", "k": int(a.shape[1]), "beats": beats, "cycles": cycles,
                "model_cycles": board_cycles(array, beats),
                "match": bool(np.array_equal(result, expected))}

    def session():
        run_each(link, spec, report, "tiles", tiles, one_tile)
        for groups, beats in ((0, 1), (1, 0), (1, config.k_max + 1), (config.k_max + 1, 1)):
            report["bad_runs_rejected"].append(
                bad_argument_rejected(link, sparse_run_args(groups, beats)))
        # Counts that disagree with B's group_end bits (valid arguments): the
        # tile ends at B's last beat or A's last group, so the run finishes.
        report["short_b_cycles"] = link.run(sparse_run_args(config.k_max, 1))
        report["long_b_cycles"] = link.run(sparse_run_args(1, config.k_max))
        report["works_after_errors"] = one_tile(tiles[0])["match"]

    await bridge(session)()
    report["cycles_match"] = all(t["cycles"] == t["model_cycles"] for t in report["tiles"])
    save_report(spec, report, link, config, "tiles", len(tiles))
    assert report["cycles_match"], report
    assert report["bad_runs_rejected"] == [True] * 4, report
    assert report["short_b_cycles"] == board_cycles(array, 1), report
    assert report["works_after_errors"], report
