"""cocotb testbench of the emitted
:class:`~bertforge.sim.sparse_engine_harness.SparseEngineHarness`.

As :mod:`bertforge.sim.gemm_tb` (same spec keys; ``config`` is a
SparseEngineConfig dict and commands carry ``pat_n``, ``pat_m``, ``idx_addr``,
``idx_stride``): Python loads memory and commands, waits on a timer and
reads memory back; the whole image is compared with
:func:`~bertforge.sim.sparse_engine_golden.run_sparse_commands`, and the
error flags and tags with the expected ones; with a fixed latency and no
stalls the measured cycles must equal
:func:`~bertforge.sim.sparse_engine_cycles.sparse_engine_cycles` where it is exact.
Its functional coverage is :func:`~bertforge.sim.gemm_tb.engine_coverage`'s
(points ``sparse_engine.*``).
"""

import cocotb

from bertforge.rtl.sparse_engine import SparseEngineConfig, pack_sparse_command
from bertforge.sim.gemm_tb import run_engine
from bertforge.sim.sparse_engine_cycles import sparse_engine_cycles, sparse_ideal_cycles
from bertforge.sim.gemm_golden import command_fields
from bertforge.sim.sparse_engine_golden import SPARSE_FIELDS, run_sparse_commands, sparse_command_error
from bertforge.sim.stream_tb import read_spec


@cocotb.test()
async def sparse_engine_commands(dut):
    spec = read_spec()
    await run_engine(dut, spec, SparseEngineConfig(**spec["config"]), pack=pack_sparse_command,
                     golden=run_sparse_commands, cycle_model=sparse_engine_cycles,
                     ideal=sparse_ideal_cycles, block="sparse_engine",
                     reject=lambda config, cmd: sparse_command_error(
                         config, command_fields(cmd, SPARSE_FIELDS)))
