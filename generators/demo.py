"""``bertforge demo``: generate, simulate and report a default design."""

import numpy as np

from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from .emit import write_design
from .systolic_sim import random_systolic_tiles, simulate_systolic

__all__ = ["run_demo"]


def run_demo(out_dir):
    """A 4x4 output-stationary int8 array: emit it, run 4 random tiles of
    K = 64 back to back (then again with random stalls), and report."""
    config = SystolicConfig()
    verilog_path, sidecar_path = write_design(config, SystolicArray, out_dir)
    print(f"1. generated {verilog_path} (+ {sidecar_path.name})")
    tiles = random_systolic_tiles(config, 64, 4, np.random.default_rng(0))
    clean = simulate_systolic(config, tiles, seed=0, quiet=False)
    print(f"2. simulated 4 tiles of 4x64 @ 64x4 in Verilator: {clean['cycles']} cycles "
          f"(cycle model {clean['model_cycles']}, ideal {clean['ideal_cycles']}, "
          f"utilization {clean['utilization']:.1%}); output "
          f"{'matches' if clean['match'] else 'DIFFERS FROM'} the numpy golden model")
    stalled = simulate_systolic(config, tiles, seed=1, a_gap=0.3, b_gap=0.3, c_stall=0.3)
    print(f"3. again with 30% random input gaps and output stalls: {stalled['cycles']} cycles; "
          f"output {'matches' if stalled['match'] else 'DIFFERS FROM'} the golden model")
    ok = clean["match"] and stalled["match"] and clean["cycles"] == clean["model_cycles"]
    print("demo passed" if ok else "demo FAILED")
    print("next: bertforge generate systolic --rows 8 --cols 8 --dataflow ws -o out; "
          "bertforge sim systolic --rows 8 --cols 8 --dataflow ws --k 64 --tiles 4; "
          "bertforge bench systolic")
    return 0 if ok else 1
