"""The harness memory with the ULX3S SDRAM's timing (MT48LC16M16 at 100
MHz) in Verilator: a GEMM stays bit-exact and takes the cycles analyze
predicts for that memory (the GEMM model at the SDRAM's sustained
bandwidth, read latency mem_latency + CL) within 2%."""

import dataclasses

import numpy as np

from bertforge.generators.analyze import hardware_from_table
from bertforge.generators.blocks import PRESETS
from bertforge.generators.gemm_sim import layout_problems, simulate_gemm
from bertforge.sim.gemm_cycles import gemm_cycles

TINY = dataclasses.replace(PRESETS["gemm"]["tiny"], addr_width=15)   # 2x2 OS, 64-bit port


def test_gemm_on_the_sdram_takes_the_predicted_cycles(tmp_path):
    hw = hardware_from_table({"hardware": {"clock_mhz": 100, "mem_latency": 1},
                              "gemm": {"rows": 2, "cols": 2, "mem_width": 64, "k_chunk": 32},
                              "memory": {"board": "ulx3s"}}, "x.toml", "x")
    assert hw.mem_latency == 4 and 1.9 < hw.mem_bytes_per_cycle < 2    # a quarter of a beat a cycle
    image, commands = layout_problems(TINY, [dict(m=16, k=96, n=16), dict(m=8, k=64, n=32)],
                                      np.random.default_rng(9))
    result = simulate_gemm(TINY, image, commands, seed=9, lat_min=hw.mem_latency, memory=hw.memory,
                           clock_mhz=hw.clock_mhz, workdir=tmp_path / "sdram")
    assert result["match"] and result["passed"]
    predicted = gemm_cycles(TINY, commands, lat=hw.mem_latency, bw=hw.mem_bytes_per_cycle)["cycles"]
    ideal = gemm_cycles(TINY, commands, lat=hw.mem_latency)["cycles"]
    assert result["cycles"] > 1.2 * ideal                # the SDRAM, not the array, sets the pace
    assert result["model_cycles"] == predicted and not result["model_exact"]
    assert abs(result["cycles"] - predicted) <= 0.02 * predicted, (result["cycles"], predicted)
