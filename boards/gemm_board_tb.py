"""cocotb testbench of the GEMM board top-level
(:class:`~bertforge.boards.gemm_top.GemmBoardTop`) in Verilator, driven bit by
bit through its UART pins by the same host code that ``bertforge run gemm``
uses (:func:`bertforge.boards.host.run_gemm`).

Spec: ``config`` (a GemmTopConfig as a dict), ``data`` (an ``.npz`` with
``a_0, b_0, ...``), ``flags`` (per problem: ``int8``, ``multiplier``,
``shift``), ``corrupt`` (a frame with a bad CRC before each problem).
After the problems it runs a command with M = 0 and one whose C leaves
memory: both must be rejected (``BAD_ARGUMENT``) and the link must go on.
"""

import cocotb
import numpy as np

from bertforge.boards.gemm_top import GemmTopConfig
from bertforge.boards.host import gemm_board_layout, gemm_command_bytes, run_gemm
from bertforge.sim.gemm_golden import gemm_golden
from bertforge.boards.uart_model import (bad_argument_rejected, board_link, bridge,
                                         corrupt_frame_rejected, read_spec, save_report)


@cocotb.test()
async def board_gemms(dut):
    spec = read_spec()
    config = GemmTopConfig.from_dict(spec["config"])
    data = np.load(spec["data"])
    problems = [(data[f"a_{i}"], data[f"b_{i}"], flags) for i, flags in enumerate(spec["flags"])]
    link = await board_link(dut, config.divisor, timeout_bytes=4000)
    report = {"problems": [], "corrupt_rejected": 0, "bad_rejected": 0}

    def rejected(command):
        link.write(1, 0, gemm_command_bytes(config, command))
        return bad_argument_rejected(link)

    def session():
        report["design_id"], report["version"] = link.ping()
        for a, b, flags in problems:
            if spec.get("corrupt"):
                report["corrupt_rejected"] += corrupt_frame_rejected(link)
            result, cycles = run_gemm(link, config, a, b, **flags)
            expected = gemm_golden(config.engine, a, b, **flags)
            report["problems"].append({"shape": [int(s) for s in (*a.shape, b.shape[1])],
                                       "cycles": cycles,
                                       "match": bool(np.array_equal(result, expected))})
        _, command = gemm_board_layout(config, problems[0][0], problems[0][1])
        report["bad_rejected"] += rejected(dict(command, m=0))
        report["bad_rejected"] += rejected(dict(command, c_addr=(1 << config.engine.addr_width) - 4))
        a, b, flags = problems[0]
        result, _ = run_gemm(link, config, a, b, **flags)
        report["works_after_errors"] = bool(np.array_equal(result, gemm_golden(config.engine, a, b, **flags)))

    await bridge(session)()
    report["match"] = (len(report["problems"]) == len(problems)
                       and all(p["match"] for p in report["problems"]))
    save_report(spec, report, link, config, len(problems))
    assert report["bad_rejected"] == 2, report
    assert report["works_after_errors"], report
