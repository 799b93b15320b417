"""Simulation-only wrapper of the sparse GEMM engine: as
:class:`~bertforge.sim.gemm_harness.GemmHarness` (command queue, HDL
testbench memory with seeded random latency and stalls, cycle counter),
around a :class:`~bertforge.rtl.sparse_engine.SparseEngine`."""

from bertforge.rtl.sparse_engine import SparseEngineConfig, SparseEngine, sparse_command_layout
from .gemm_harness import GemmHarness, harness_name, harness_verilog

__all__ = ["SparseEngineHarness", "sparse_harness_name", "sparse_harness_verilog"]


def sparse_harness_name(config):
    return harness_name(config)


def sparse_harness_verilog(config, memory=None, clock_mhz=100.0):
    """Verilog of the harness around ``config``'s sparse engine, with the
    memory module appended (deterministic; ``memory``: an SDRAM whose timing
    the memory follows, as :func:`harness_verilog` takes it)."""
    return harness_verilog(config, SparseEngineHarness, memory, clock_mhz)


class SparseEngineHarness(GemmHarness):
    """:class:`SparseEngine` + command queue + random-latency memory;
    ports and behaviour as :class:`~bertforge.sim.gemm_harness.GemmHarness`."""

    config_class = SparseEngineConfig
    engine_class = SparseEngine
    command_layout = staticmethod(sparse_command_layout)
