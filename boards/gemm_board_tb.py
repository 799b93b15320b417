"""cocotb testbench of the GEMM board top-level
(:class:`~bertforge.boards.gemm_top.GemmBoardTop`, around the dense GEMM
engine or the N:M sparse one) in Verilator, driven bit by bit through its
UART pins by the same host code that ``bertforge run gemm`` and ``run
sparse_engine`` use (:func:`bertforge.boards.gemm_host.run_gemm`).

Spec: ``config`` (a GemmTopConfig as a dict), ``data`` (an ``.npz`` with
``a_0, b_0, ...``; on the sparse engine ``b_i`` is W, N:M sparse along K),
``flags`` (per problem: ``int8``, ``multiplier``, ``shift``, and on the
sparse engine ``pattern`` ``[n, m]``), ``corrupt`` (a frame with a bad CRC
before each problem), ``bad`` (changes to the first problem's command:
each changed command must be rejected, ``BAD_ARGUMENT``, and the link go
on), ``cycles`` (each reply's cycles must equal :func:`board_cycles`
where that model is exact: compute bound), ``edges`` (after the bad
commands, the host link's :data:`~bertforge.boards.uart_model.LINK_EDGES`).

Each result must equal the golden model bit for bit:
:func:`~bertforge.sim.gemm_golden.gemm_golden`, on the sparse engine its
own model (:func:`~bertforge.sim.sparse_engine_golden.run_sparse_commands`)
run on the memory image the host wrote. After the bad commands the first
problem, run again, must still be right.
"""

import cocotb
import numpy as np

from bertforge.boards.gemm_top import GemmTopConfig, model_read_latency
from bertforge.boards.gemm_host import (gemm_board_layout, gemm_command_bytes,
                                        gemm_result_from_bytes, run_gemm)
from bertforge.sim.gemm_cycles import gemm_cycles
from bertforge.sim.gemm_golden import gemm_golden
from bertforge.sim.sparse_engine_cycles import sparse_engine_cycles
from bertforge.sim.sparse_engine_golden import run_sparse_commands
from bertforge.boards.uart_model import (bad_argument_rejected, bridge, link_edges, open_board,
                                         run_each, save_report)


def board_cycles(config, command):
    """The cycle model's dict (``cycles``, ``exact``) of one command on a
    GEMM board top: the engine's model (first command handshake to
    completion handshake, both counted) at the top's read latency
    (:func:`~bertforge.boards.gemm_top.model_read_latency`), one beat a
    cycle. The top offers the command the cycle after ``RUN`` starts and
    counts from there to the completion, so the reply's cycles are the
    model's."""
    model = sparse_engine_cycles if config.sparse else gemm_cycles
    return model(config.engine, [command], lat=model_read_latency(config.engine))


def expected_result(config, a, b, flags):
    """C as the golden model computes it (module doc)."""
    if not config.sparse:
        return gemm_golden(config.engine, a, b, **flags)
    image, command = gemm_board_layout(config, a, b, **flags)
    memory = np.zeros(1 << config.engine.addr_width, dtype=np.uint8)
    memory[:len(image)] = np.frombuffer(image, dtype=np.uint8)
    run_sparse_commands(config.engine, memory, [command])
    c_addr, size = command["c_addr"], command["m"] * command["c_stride"]
    return gemm_result_from_bytes(command, memory[c_addr:c_addr + size].tobytes())


@cocotb.test()
async def board_gemms(dut):
    spec, config, data, link = await open_board(dut, GemmTopConfig, timeout_bytes=4000)
    problems = []
    for i, flags in enumerate(spec["flags"]):
        if "pattern" in flags:
            flags = dict(flags, pattern=tuple(flags["pattern"]))
        problems.append((data[f"a_{i}"], data[f"b_{i}"], flags))
    report = {"bad_rejected": []}

    def rejected(command):
        link.write(1, 0, gemm_command_bytes(config, command))
        return bad_argument_rejected(link)

    def one(problem):
        a, b, flags = problem
        result, cycles = run_gemm(link, config, a, b, **flags)
        model = board_cycles(config, gemm_board_layout(config, a, b, **flags)[1])
        return {"shape": [int(s) for s in (*a.shape, b.shape[1])], "cycles": cycles,
                "model_cycles": model["cycles"], "model_exact": model["exact"],
                "match": bool(np.array_equal(result, expected_result(config, a, b, flags)))}

    def session():
        run_each(link, spec, report, "problems", problems, one)
        a, b, flags = problems[0]
        _, command = gemm_board_layout(config, a, b, **flags)
        for change in spec["bad"]:
            report["bad_rejected"].append(rejected(dict(command, **change)))
        if spec.get("edges"):
            report["edges"] = link_edges(link)
        report["works_after_errors"] = one(problems[0])["match"]

    await bridge(session)()
    # LEDs: 0 busy (idle now), 1 a run done, 2 a bad frame seen (the link's bad_frames)
    report["leds"] = int(dut.leds.value)
    save_report(spec, report, link, config, "problems", len(problems))
    assert report["leds"] == 2 | 4 * bool(spec.get("corrupt")), report
    assert report["bad_rejected"] == [True] * len(spec["bad"]), report
    assert report["works_after_errors"], report
    assert all(report.get("edges", {}).values()), report
    if spec.get("cycles"):
        assert all(p["cycles"] == p["model_cycles"] for p in report["problems"]
                   if p["model_exact"]), report
