"""The registry of blocks: one :class:`~bertforge.generators.block.Block` per
block, the only list of what exists. ``generate``, ``sim``, ``bench`` and
``presets`` are built from it; adding a block is one entry here (see the
README, "Adding a block")."""

import dataclasses

from bertforge.rtl.butterfly import ButterflyConfig, ButterflyEngine
from bertforge.rtl.encoder import EncoderConfig, EncoderTop
from bertforge.rtl.gelu import Gelu, GeluConfig
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.rtl.sparse import SparseArray, SparseConfig
from bertforge.rtl.sparse_engine import SparseEngine, SparseEngineConfig
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from bertforge.sim import (butterfly_cycles, butterfly_golden, encoder_cycles, encoder_golden, gelu_cycles,
                           gelu_golden, gemm_cycles, gemm_golden, layernorm_cycles, layernorm_golden,
                           softmax_cycles, softmax_golden, sparse_cycles, sparse_engine_cycles,
                           sparse_engine_golden, sparse_golden, systolic_cycles, systolic_golden)
from bertforge.sim.encoder_harness import encoder_harness_verilog
from bertforge.sim.gemm_harness import harness_verilog
from bertforge.sim.sparse_engine_harness import sparse_harness_verilog
from . import (bench, boards_bench, butterfly_sim, encoder_sim, gelu_sim, gemm_bench, gemm_sim,
               layernorm_sim, norm_bench, softmax_sim, sparse_bench, sparse_sim, systolic_sim)
from .block import Block
from . import board_design

__all__ = ["BLOCKS", "PRESETS"]

_systolic = SystolicConfig()
_CYCLES = ("cycles", "model_cycles", "ideal_cycles")
_RUN = _CYCLES + ("utilization", "match", "mismatches", "stalls")
_STREAM = _RUN + ("elements_per_cycle", "max_abs_err", "mean_abs_err")
_ERRORS = _CYCLES + ("max_abs_err", "mean_abs_err")
_DENSE = ("dense_cycles", "dense_model_cycles", "dense_match", "speedup_vs_dense")

BLOCKS = {block.name: block for block in [
    Block(
        name="systolic", help="tiles back to back through a systolic array",
        config=SystolicConfig, component=SystolicArray,
        presets={
            "default": _systolic,
            "tiny": dataclasses.replace(_systolic, rows=2, cols=2),
            "os-8x8": dataclasses.replace(_systolic, rows=8, cols=8),
            "ws-8x8": dataclasses.replace(_systolic, rows=8, cols=8, dataflow="ws"),
            "os-16x16": dataclasses.replace(_systolic, rows=16, cols=16),
            "ws-16x16": dataclasses.replace(_systolic, rows=16, cols=16, dataflow="ws"),
            "int16-4x4": dataclasses.replace(_systolic, width=16),
        },
        golden=systolic_golden.systolic_golden, cycles=systolic_cycles.systolic_cycles,
        testbench="bertforge.sim.systolic_tb",
        add_sim_args=systolic_sim.add_sim_args, user_files=("a", "b", "out"),
        random_stimulus=systolic_sim.random_stimulus, user_stimulus=systolic_sim.user_stimulus,
        run=systolic_sim.run, summary_keys=_RUN,
        bench_help="4x4, 8x8, 16x16, both dataflows, K = 64 and 768",
        add_bench_args=bench.add_bench_args, bench=bench.bench,
        board=board_design.SYSTOLIC,
    ),
    Block(
        name="gemm", help="one GEMM command through the engine (harness memory in HDL)",
        config=GemmConfig, component=GemmEngine, harness=harness_verilog,
        presets={
            "default": GemmConfig(),
            "tiny": GemmConfig(rows=2, cols=2, mem_width=64, k_chunk=32, m_tile=16),
            "os-8x8": GemmConfig(rows=8, cols=8),
            "ws-8x8": GemmConfig(rows=8, cols=8, dataflow="ws"),
            "os-16x16": GemmConfig(rows=16, cols=16),
            "ws-16x16": GemmConfig(rows=16, cols=16, dataflow="ws"),
        },
        golden=gemm_golden.gemm_golden, cycles=gemm_cycles.gemm_cycles,
        testbench="bertforge.sim.gemm_tb",
        add_sim_args=gemm_sim.add_sim_args,
        user_files=("a", "b", "out"), random_stimulus=gemm_sim.random_stimulus,
        user_stimulus=gemm_sim.user_stimulus, run=gemm_sim.run,
        summary_keys=_RUN + ("bound", "model_exact", "sim_cycles_per_second"),
        bench_help="BERT-base GEMMs (seq 128) on 8x8 and 16x16, both dataflows",
        add_bench_args=gemm_bench.add_bench_args, bench=gemm_bench.bench,
        board=board_design.GEMM,
    ),
    Block(
        name="sparse", help="an N:M sparse GEMM as tiles on the N:M sparse array, "
                            "and the same GEMM in dense mode",
        config=SparseConfig, component=SparseArray,
        presets={
            "default": SparseConfig(),
            "tiny": SparseConfig(rows=2, cols=2, m_max=4),
            "8x8-m8": SparseConfig(rows=8, cols=8, m_max=8),
            "8x8-m16": SparseConfig(rows=8, cols=8, m_max=16),
            "16x16-m8": SparseConfig(rows=16, cols=16, m_max=8),
        },
        golden=sparse_golden.nm_tile_golden, cycles=sparse_cycles.nm_gemm_cycles,
        testbench="bertforge.sim.sparse_tb",
        add_sim_args=sparse_sim.add_sim_args, user_files=("a", "b", "out"),
        random_stimulus=sparse_sim.random_stimulus, user_stimulus=sparse_sim.user_stimulus,
        run=sparse_sim.run,
        summary_keys=_RUN + ("bound", "model_exact", "sim_cycles_per_second") + _DENSE,
        report_keys=_CYCLES + ("dense_cycles", "speedup_vs_dense"),
        bench_help="1:4, 2:4, 2:8, 4:8, 1:8 and dense on 8x8 (m_max 8): speedups, and LUTs "
                   "against the dense array",
        add_bench_args=sparse_bench.add_bench_args, bench=sparse_bench.bench,
        board=board_design.SPARSE,
    ),
    Block(
        name="sparse_engine", help="the sparse GEMM engine (simulated by: sim sparse --engine)",
        config=SparseEngineConfig, component=SparseEngine, harness=sparse_harness_verilog,
        presets={"default": SparseEngineConfig()},
        golden=sparse_engine_golden.run_sparse_commands, cycles=sparse_engine_cycles.sparse_engine_cycles,
        testbench="bertforge.sim.sparse_engine_tb",
        board=None,
    ),
    Block(
        name="butterfly", help="butterfly linear layers or FFTs on a batch of vectors",
        config=ButterflyConfig, component=ButterflyEngine,
        presets={
            "default": ButterflyConfig(),
            "n256-l2": ButterflyConfig(n_max=256, lanes=2),
            "n256-l8": ButterflyConfig(n_max=256, lanes=8),
            "n1024-l16": ButterflyConfig(n_max=1024, lanes=16),
            "int8": ButterflyConfig(width=8, weight_width=8),
        },
        golden=butterfly_golden.butterfly_fft, cycles=butterfly_cycles.butterfly_cycles,
        testbench="bertforge.sim.butterfly_tb",
        add_sim_args=butterfly_sim.add_sim_args, user_files=("x", "out", "weights", "x_im"),
        random_stimulus=butterfly_sim.random_stimulus, user_stimulus=butterfly_sim.user_stimulus,
        run=butterfly_sim.run, summary_keys=_RUN + ("sqnr_db",),
        report_keys=_CYCLES + ("sqnr_db",),
        bench_help="n = 64, 256, 1024 on n_max = 1024, lanes 1, 4, 16, linear and fft, batch 128",
        add_bench_args=butterfly_sim.add_bench_args, bench=butterfly_sim.bench,
        board=board_design.BUTTERFLY,
    ),
    Block(
        name="softmax", help="softmax rows back to back through the softmax unit",
        config=SoftmaxConfig, component=Softmax,
        presets={
            "default": SoftmaxConfig(),
            "lanes1": SoftmaxConfig(lanes=1),
            "lanes16": SoftmaxConfig(lanes=16),
            "int16": SoftmaxConfig(in_width=16, out_width=16),
            "seq512": SoftmaxConfig(lanes=16, l_max=512),
        },
        golden=softmax_golden.softmax_golden, cycles=softmax_cycles.softmax_cycles,
        testbench="bertforge.sim.softmax_tb",
        add_sim_args=softmax_sim.add_sim_args, user_files=("x", "out", "x_mask", "scale"),
        random_stimulus=softmax_sim.random_stimulus, user_stimulus=softmax_sim.user_stimulus,
        run=softmax_sim.run, summary_keys=_STREAM, report_keys=_ERRORS,
        bench_help="BERT-base softmax rows (128) at 1, 4 and 16 lanes",
        add_bench_args=softmax_sim.add_bench_args, bench=softmax_sim.bench,
        board=board_design.SOFTMAX,
    ),
    Block(
        name="layernorm", help="LayerNorm(x + r) over vectors back to back",
        config=LayerNormConfig, component=LayerNorm,
        presets={
            "default": LayerNormConfig(),
            "lanes4": LayerNormConfig(lanes=4),
            "lanes16": LayerNormConfig(lanes=16),
            "int32": LayerNormConfig(lanes=16, in_width=32, h_max=1024),
            "no-residual": LayerNormConfig(add_residual=False),
        },
        golden=layernorm_golden.layernorm_golden, cycles=layernorm_cycles.layernorm_cycles,
        testbench="bertforge.sim.layernorm_tb",
        make_config=layernorm_sim.make_config, add_sim_args=layernorm_sim.add_sim_args,
        user_files=("x", "out", "residual_file", "gamma", "beta"),
        random_stimulus=layernorm_sim.random_stimulus, user_stimulus=layernorm_sim.user_stimulus,
        run=layernorm_sim.run, summary_keys=_STREAM + ("max_abs_err_real",), report_keys=_ERRORS,
        bench_help="LayerNorm over BERT-base 128 x 768, lanes 1, 4, 16",
        add_bench_args=layernorm_sim.add_bench_args, bench=layernorm_sim.bench,
        board=board_design.LAYERNORM,
    ),
    Block(
        name="gelu", help="elementwise GELU over rows back to back",
        config=GeluConfig, component=Gelu,
        presets={
            "default": GeluConfig(),
            "lanes4": GeluConfig(lanes=4),
            "lanes16": GeluConfig(lanes=16),
            "int16": GeluConfig(in_width=16, out_width=16, in_mult=1, out_shift=3),
        },
        golden=gelu_golden.gelu_golden, cycles=gelu_cycles.gelu_cycles,
        testbench="bertforge.sim.gelu_tb",
        make_config=gelu_sim.make_config, add_sim_args=gelu_sim.add_sim_args,
        user_files=("x", "out"), random_stimulus=gelu_sim.random_stimulus,
        user_stimulus=gelu_sim.user_stimulus, run=gelu_sim.run,
        summary_keys=_STREAM, report_keys=_ERRORS,
        bench_help="GELU over BERT-base 128 x 3072, lanes 1, 4, 16",
        add_bench_args=gelu_sim.add_bench_args, bench=gelu_sim.bench,
        board=board_design.GELU,
    ),
    Block(
        name="encoder", help="one BERT encoder layer on GEMM + softmax + layernorm + GELU",
        config=EncoderConfig, component=EncoderTop, harness=encoder_harness_verilog,
        golden=encoder_golden.encoder_golden, cycles=encoder_cycles.operation_gap,
        testbench="bertforge.sim.encoder_tb",
        make_config=encoder_sim.make_config, add_config_args=encoder_sim.add_config_args,
        add_sim_args=encoder_sim.add_sim_args, random_stimulus=encoder_sim.random_stimulus,
        run=encoder_sim.run, summary_keys=encoder_sim.SUMMARY_KEYS,
        report=encoder_sim.report, check=encoder_sim.check,
        bench_help="the tiny encoder layer at several sequence lengths",
        add_bench_args=encoder_sim.add_bench_args, bench=encoder_sim.bench,
        board=None,
    ),
    Block(
        name="norm", help="softmax, layernorm and GELU at BERT-base sizes, lanes 1, 4, 16",
        bench_help="softmax, layernorm and GELU at BERT-base sizes, lanes 1, 4, 16",
        add_bench_args=norm_bench.add_bench_args, bench=norm_bench.bench,
    ),
    Block(
        name="boards", help="largest systolic array per board; sizes 2x2..16x16 on ULX3S",
        bench_help="largest systolic array per board; sizes 2x2..16x16 on ULX3S",
        add_bench_args=boards_bench.add_bench_args, bench=boards_bench.run_bench,
    ),
]}

#: Block name -> preset name -> config ("default" first): a view of :data:`BLOCKS`.
PRESETS = {name: block.presets for name, block in BLOCKS.items() if block.presets}
