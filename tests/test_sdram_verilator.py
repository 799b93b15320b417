"""The harness memory with the ULX3S SDRAM's timing (MT48LC16M16 at 100
MHz) in Verilator: a GEMM (slow) and the tiny encoder layer stay bit-exact
and take the cycles analyze predicts for that memory within 2% (per
operation class for the layer)."""

import dataclasses

import numpy as np
import pytest

from bertforge.generators.analyze import analyze, hardware_from_table, load_hardware
from bertforge.generators.blocks import PRESETS
from bertforge.generators.gemm_sim import layout_problems, simulate_gemm
from bertforge.sim.gemm_cycles import gemm_cycles

TINY = dataclasses.replace(PRESETS["gemm"]["tiny"], addr_width=15)   # 2x2 OS, 64-bit port


@pytest.mark.slow     # its own Verilator build; the encoder test below covers the GEMM class
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


def test_encoder_layer_on_the_sdram_matches_analyze_per_class(tmp_path):
    """The tiny layer (tiny.toml with the ULX3S SDRAM) in Verilator:
    bit-exact, and every operation class within 2% of analyze (the program
    puts each layernorm's two sources in different SDRAM banks, as analyze
    assumes; sequence 16, where the plain layout put layernorm 1's in one)."""
    from bertforge.generators.encoder_sim import TINY_HW, run_encoder
    text = TINY_HW.read_text().replace("mem_bytes_per_cycle = 16\n", "")
    config = tmp_path / "tiny_ulx3s.toml"
    config.write_text(text + '\n[memory]\nboard = "ulx3s"\n')
    result = run_encoder(config, seq=16)
    assert result["passed"] and result["match"], result["mismatches"]
    assert {c["class"] for c in result["classes"]} == {"gemm", "softmax", "layernorm", "gelu"}
    for c in result["classes"]:
        assert abs(c["difference"]) <= 0.02, c
    ideal = analyze("tiny", 16, load_hardware(TINY_HW), bias=False, transpose=True)["total_cycles"]
    assert result["cycles"] > 2 * ideal             # two bytes a cycle instead of sixteen
