"""Simulate emitted Verilog against the golden models: the Python API behind
``bertforge sim``, ``bench`` and ``demo``."""

import functools
import sys
import tempfile
from pathlib import Path

import numpy as np

from bertforge.sim import runner
from .emit import emit_verilog

__all__ = ["build_design", "cached_verilog", "random_systolic_tiles", "systolic_operand_shapes", "simulate_systolic"]


@functools.lru_cache(maxsize=32)
def cached_verilog(config):
    """:func:`emit_verilog`, once per config per process."""
    return emit_verilog(config)


def systolic_operand_shapes(config, k):
    """Shapes of one tile's ``(a, b)``: OS ``(R, K), (K, C)``; WS ``(K, R), (R, C)``."""
    if config.dataflow == "os":
        return (config.rows, k), (k, config.cols)
    return (k, config.rows), (config.rows, config.cols)


def random_systolic_tiles(config, k, tiles, rng):
    """``tiles`` random tiles of streaming length ``k`` (full operand range)."""
    lo, hi = -(1 << (config.width - 1)), 1 << (config.width - 1)
    shape_a, shape_b = systolic_operand_shapes(config, k)
    return [(rng.integers(lo, hi, shape_a), rng.integers(lo, hi, shape_b)) for _ in range(tiles)]


def _progress(message, quiet):
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def build_design(config, waves=False, quiet=True):
    """Emit (cached) and Verilator-build ``config``'s design; returns the Verilog text."""
    verilog = cached_verilog(config)
    if not runner.is_built(verilog, config.name, waves=waves):
        _progress(f"building the Verilator model of {config.name} "
                  "(once per design; cached after)...", quiet)
    runner.build(verilog, config.name, waves=waves)
    return verilog


def simulate_systolic(config, tiles, *, seed=0, a_gap=0.0, b_gap=0.0, c_stall=0.0,
                      waves=False, workdir=None, quiet=True):
    """Run ``tiles`` (a list of ``(a, b)``) back to back through the emitted
    Verilog of ``config`` in Verilator.

    Returns the testbench's result dict (``cycles``, ``model_cycles``,
    ``ideal_cycles``, ``utilization``, ``match``, ...) with ``outputs``, the
    list of result matrices read from the hardware.
    """
    verilog = build_design(config, waves, quiet)
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"bertforge-{config.name}-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "tiles.npz"
    np.savez(data, **{f"{name}_{t}": np.asarray(m, dtype=np.int64)
                      for t, (a, b) in enumerate(tiles) for name, m in (("a", a), ("b", b))})
    spec = {"config": config.to_dict(), "data": str(data), "seed": seed,
            "a_gap": a_gap, "b_gap": b_gap, "c_stall": c_stall}
    result = runner.run(verilog, config.name, "bertforge.sim.systolic_tb", spec,
                        waves=waves, workdir=work)
    with np.load(result["outputs"]) as saved:
        result["outputs"] = [saved[f"arr_{t}"] for t in range(len(saved.files))]
    return result

