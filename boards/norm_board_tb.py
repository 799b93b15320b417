"""cocotb testbench of the streaming-unit board top-level
(:class:`~bertforge.boards.norm_top.NormBoardTop`: softmax, layernorm or
gelu behind the UART host link) in Verilator, driven bit by bit through its
UART pins by the same host code that ``bertforge run`` uses
(:func:`bertforge.boards.norm_host.run_softmax` and friends).

Spec: ``config`` (a NormTopConfig as a dict), ``data`` (an ``.npz``),
``problems`` (per run: names of its arrays in ``data``: ``x`` and, per
design, ``mask``, ``r``, ``gamma``, ``beta``; a ``scale`` for softmax),
``corrupt`` (a frame with a bad CRC before each run). After the runs it
sends a RUN with no beats and one with more beats than memory: both must be
rejected (``BAD_ARGUMENT``), and the first run must still work after them.
"""

import cocotb
import numpy as np

from bertforge.boards.norm_host import run_gelu, run_layernorm, run_softmax
from bertforge.boards.norm_top import NormTopConfig
from bertforge.sim.norm_golden import norm_golden
from bertforge.boards.uart_model import (bad_argument_rejected, bridge, open_board, run_each,
                                         save_report)


@cocotb.test()
async def board_stream(dut):
    spec, config, arrays, link = await open_board(dut, NormTopConfig, timeout_bytes=4000)
    design = config.design
    report = {"bad_rejected": 0}
    held = {}   # LayerNorm: the gamma/beta the unit holds

    def get(problem, key):
        name = problem.get(key)
        return None if name is None else arrays[name]

    def one(problem):
        x = get(problem, "x")
        if design == "softmax":
            mask, scale = get(problem, "mask"), problem.get("scale", 1.0)
            y, cycles = run_softmax(link, config, x, mask, scale)
            expected = norm_golden(design, config.unit, x, mask=mask, scale=scale)
        elif design == "layernorm":
            r, gamma, beta = get(problem, "r"), get(problem, "gamma"), get(problem, "beta")
            y, cycles = run_layernorm(link, config, x, r, gamma, beta)
            if gamma is not None:
                held.update(gamma=gamma, beta=beta)
            expected = norm_golden(design, config.unit, x, r=r, **held)
        else:
            y, cycles = run_gelu(link, config, x)
            expected = norm_golden(design, config.unit, x)
        return {"shape": list(x.shape), "cycles": cycles, "match": bool(np.array_equal(y, expected)),
                "mismatches": int(np.sum(y != expected))}

    def rejected(counts):
        return bad_argument_rejected(link, b"".join(c.to_bytes(2, "little") for c in counts))

    def session():
        run_each(link, spec, report, "runs", spec["problems"], one)
        phases = len(config.phases())
        report["bad_rejected"] += rejected([0] * phases)
        report["bad_rejected"] += rejected([0] * (phases - 1) + [config.depth + 1])
        report["works_after_errors"] = one(spec["problems"][0])["match"]

    await bridge(session)()
    save_report(spec, report, link, config, "runs", len(spec["problems"]))
    assert report["bad_rejected"] == 2, report
    assert report["works_after_errors"], report
