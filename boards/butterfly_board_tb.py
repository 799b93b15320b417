"""cocotb testbench of the butterfly engine's board top-level
(:mod:`bertforge.boards.butterfly_top`) in Verilator, driven bit by bit
through its UART pins by the same :class:`~bertforge.boards.protocol.HostLink`
and :func:`~bertforge.boards.butterfly_host.run_butterfly` code that
``bertforge run butterfly`` uses.

Spec: ``config`` (a ButterflyTopConfig as a dict), ``runs`` (``{"mode",
"mult", "shift"}`` per run, one after the other without a reset), ``data``
(an ``.npz`` with ``x_re_<t>``, ``x_im_<t>`` (batch x n) and, for a linear
run, ``w_<t>`` (log2 n x n/2 x 4) per run t), ``corrupt`` (send a frame with
a bad CRC before each run).

Each run's result must equal
:func:`~bertforge.sim.butterfly_golden.board_golden` bit for bit and its
reported cycles :func:`board_cycles`. Then RUNs the top must refuse
(:func:`bad_runs`) must be answered ``BAD_ARGUMENT``, the first run, run
again, must still be right, and the LEDs must say idle, done, bad frame seen.
"""

import cocotb
import numpy as np

from bertforge.boards.butterfly_top import ButterflyTopConfig, run_is_valid
from bertforge.boards.butterfly_host import butterfly_run_args, run_butterfly
from bertforge.sim.butterfly_cycles import butterfly_cycles, butterfly_groups
from bertforge.sim.butterfly_golden import board_golden
from bertforge.boards.uart_model import (bad_argument_rejected, bridge, open_board, run_each,
                                         save_report)

__all__ = ["board_cycles", "bad_runs"]


def board_cycles(engine, mode, n, groups):
    """Cycles a butterfly top reports for a run of ``groups`` groups of
    length ``n``: ``butterfly_cycles(engine, n, groups * lanes) + 1``, plus
    ``(n/2) log2 n + 1`` in linear mode.

    The engine takes the first command the cycle after ``start`` (cycle 0 of
    :func:`~bertforge.sim.butterfly_cycles.butterfly_timeline`) and the reply
    counts from ``start`` to the last result's write, so it is the
    timeline's last ``y`` cycle + 1. An FFT's first ``x`` beat is at cycle
    1, so its last ``y`` beat at ``butterfly_cycles``; in linear mode the
    weight load (``(n/2) log2 n`` beats from cycle 1, then one cycle for the
    loader to take the data command) comes first."""
    cycles = butterfly_cycles(engine, n, groups * engine.lanes) + 1
    if mode == "linear":
        cycles += (n // 2) * (n.bit_length() - 1) + 1
    return cycles


def bad_runs(config):
    """``(mode, n, groups)`` RUN words the top must refuse: the weights mode,
    ``n`` 0, 1, 3, ``2 n_max``, no groups, and one group more than ``depth``
    holds at ``n_max``."""
    n_max = config.engine.n_max
    return [(3, n_max, 1), (1, 0, 1), (1, 1, 1), (2, 3, 1), (1, 2 * n_max, 1), (0, 4, 0),
            (1, n_max, config.depth // n_max + 1)]


@cocotb.test()
async def butterfly_board_runs(dut):
    spec, config, data, link = await open_board(dut, ButterflyTopConfig)
    engine = config.engine
    runs = [(run["mode"], data[f"x_re_{t}"], data[f"x_im_{t}"],
             data[f"w_{t}"] if run["mode"] == "linear" else None,
             run.get("mult", 1), run.get("shift", 0)) for t, run in enumerate(spec["runs"])]
    report = {"bad_runs_rejected": []}

    def one_run(run):
        mode, re, im, weights, mult, shift = run
        (out_re, out_im), cycles = run_butterfly(
            link, config, mode, re, None if mode == "linear" else im, weights, mult, shift)
        want_re, want_im = board_golden(engine, mode, re, im, weights, mult, shift)
        batch, n = re.shape
        return {"mode": mode, "n": n, "batch": batch, "cycles": cycles,
                "model_cycles": board_cycles(engine, mode, n, butterfly_groups(engine, batch)),
                "match": bool(np.array_equal(out_re, want_re) and np.array_equal(out_im, want_im))}

    def session():
        run_each(link, spec, report, "runs", runs, one_run)
        for mode, n, groups in bad_runs(config):
            assert not run_is_valid(config, mode, n, groups), (mode, n, groups)
            report["bad_runs_rejected"].append(
                bad_argument_rejected(link, butterfly_run_args(mode, n, groups)))
        report["works_after_errors"] = one_run(runs[0])["match"]

    await bridge(session)()
    report["leds"] = int(dut.leds.value)
    report["cycles_match"] = all(r["cycles"] == r["model_cycles"] for r in report["runs"])
    save_report(spec, report, link, config, "runs", len(runs))
    assert report["cycles_match"], report
    assert report["bad_runs_rejected"] == [True] * len(bad_runs(config)), report
    assert report["works_after_errors"], report
    if spec.get("corrupt"):
        assert report["leds"] == 0b110, report
