"""The registry of blocks: one :class:`~bertforge.generators.block.Block` per
block, the only list of what exists. ``generate``, ``sim``, ``bench`` and
``presets`` are built from it; adding a block is one entry here (see the
manual, generators/docs/adding-a-block.md).

A block's models, testbench and command-line functions are named by
``"module:function"`` and imported when first called (:func:`_sim`,
:func:`_gen`), so that ``bertforge presets`` or ``--help`` loads none of
them; the config classes, components and presets are the entries' own."""

from bertforge.rtl.butterfly import ButterflyConfig, ButterflyEngine
from bertforge.rtl.encoder import EncoderConfig, EncoderTop
from bertforge.rtl.errors import ParameterTypeError
from bertforge.rtl.gelu import Gelu, GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.serial_engine import gemm_engine
from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig
from bertforge.rtl.softmax import Softmax, SoftmaxConfig
from bertforge.rtl.sparse import SparseArray, SparseConfig
from bertforge.rtl.sparse_engine import SparseEngine, SparseEngineConfig
from bertforge.rtl.systolic import SystolicArray, SystolicConfig
from .block import Block, lazy
from .butterfly_board import BUTTERFLY
from .gemm_board import GEMM, SPARSE_ENGINE
from .norm_board import GELU, LAYERNORM, SOFTMAX
from .sparse_board import SPARSE
from .systolic_board import SYSTOLIC

__all__ = ["BLOCKS", "PRESETS", "block_of", "component_for"]


def _sim(path):
    """``"module:function"`` of :mod:`bertforge.sim`, imported when called."""
    return lazy(f"bertforge.sim.{path}")


def _gen(path):
    """``"module:function"`` of :mod:`bertforge.generators`, imported when called."""
    return lazy(f"bertforge.generators.{path}")


def _presets(config, presets):
    """Preset name -> config: "default" first, then ``presets`` (name ->
    the fields that differ from the default); none without ``presets``."""
    if presets is None:
        return {}
    return {"default": config(), **{name: config(**fields) for name, fields in presets.items()}}


def _simulated(name, *, config, presets=None, golden=None, cycles=None, bench=None, functions=(),
               **fields):
    """A block with the usual files: its golden and cycle models
    (``sim/<name>_golden.py``, ``sim/<name>_cycles.py``; functions
    ``<name>_golden`` and ``<name>_cycles`` unless named), its testbench
    ``sim/<name>_tb.py``, and ``generators/<name>_sim.py`` with
    ``add_sim_args``, ``random_stimulus``, ``user_stimulus`` (when it takes
    ``user_files``), ``run`` and the other ``functions``; ``bench`` names
    the module of its ``add_bench_args`` and ``bench`` (default
    ``<name>_sim``); ``presets`` as :func:`_presets` takes them."""
    module, bench = f"{name}_sim", bench or f"{name}_sim"
    own = ("add_sim_args", "random_stimulus", "run", *functions)
    own += ("user_stimulus",) if fields.get("user_files") else ()
    return Block(
        name=name, config=config, testbench=f"bertforge.sim.{name}_tb",
        presets=_presets(config, presets),
        golden=_sim(f"{name}_golden:{golden or f'{name}_golden'}"),
        cycles=_sim(f"{name}_cycles:{cycles or f'{name}_cycles'}"),
        **{function: _gen(f"{module}:{function}") for function in own},
        add_bench_args=_gen(f"{bench}:add_bench_args"), bench=_gen(f"{bench}:bench"), **fields)


#: The array presets of the systolic array and the GEMM engine.
_ARRAYS = {"os-8x8": dict(rows=8, cols=8), "ws-8x8": dict(rows=8, cols=8, dataflow="ws"),
           "os-16x16": dict(rows=16, cols=16), "ws-16x16": dict(rows=16, cols=16, dataflow="ws")}
_CYCLES = ("cycles", "model_cycles", "ideal_cycles")
_RUN = _CYCLES + ("utilization", "match", "mismatches", "stalls")
_STREAM = _RUN + ("elements_per_cycle", "max_abs_err", "mean_abs_err")
_ERRORS = _CYCLES + ("max_abs_err", "mean_abs_err")
_DENSE = ("dense_cycles", "dense_model_cycles", "dense_match", "speedup_vs_dense")
_ENGINE = ("bound", "model_exact", "sim_cycles_per_second")
#: Result keys of ``sim encoder`` besides the block, design, config, model, seq and seed.
_ENCODER = ("hardware", "batch", "stalls", "commands", "cycles", "predicted_cycles",
            "difference", "classes", "operations", "match", "mismatches", "passed", "max_error",
            "output_lsb", "cosine", "sim_seconds", "sim_cycles_per_second", "waves", "notes")

BLOCKS = {block.name: block for block in [
    _simulated(
        "systolic", help="tiles back to back through a systolic array",
        config=SystolicConfig, component=SystolicArray,
        presets={"tiny": dict(rows=2, cols=2), **_ARRAYS, "int16-4x4": dict(width=16),
                 "bf16-4x4": dict(arith="bf16"), "bf16-8x8": dict(rows=8, cols=8, arith="bf16")},
        user_files=("a", "b", "out"),
        summary_keys=_RUN + ("max_abs_err_vs_float64", "max_err_to_bound"),
        bench="bench", bench_help="4x4, 8x8, 16x16, both dataflows, K = 64 and 768",
        board=SYSTOLIC, proofs=_sim("systolic_formal:systolic_proofs"),
    ),
    _simulated(
        "gemm", help="one GEMM command through the engine (harness memory in HDL)",
        config=GemmConfig, component=gemm_engine, harness=_sim("gemm_harness:harness_verilog"),
        presets={"tiny": dict(rows=2, cols=2, mem_width=64, k_chunk=32, m_tile=16), **_ARRAYS},
        user_files=("a", "b", "out"),
        summary_keys=_RUN + _ENGINE + ("max_lsb_error_vs_float", "max_abs_error_vs_float64",
                                       "max_rel_error_vs_float64", "error_bound_vs_float64"),
        bench="gemm_bench", bench_help="BERT-base GEMMs (seq 128) on 8x8 and 16x16, both "
                                       "dataflows (--serial: the iCEBreaker's engine)",
        board=GEMM, proofs=_sim("gemm_formal:gemm_proofs"),
    ),
    _simulated(
        "sparse", help="an N:M sparse GEMM as tiles on the N:M sparse array, "
                       "and the same GEMM in dense mode",
        config=SparseConfig, component=SparseArray,
        presets={"tiny": dict(rows=2, cols=2, m_max=4), "8x8-m8": dict(rows=8, cols=8, m_max=8),
                 "8x8-m16": dict(rows=8, cols=8, m_max=16), "16x16-m8": dict(rows=16, cols=16, m_max=8)},
        golden="nm_tile_golden", cycles="nm_gemm_cycles",
        user_files=("a", "b", "out"), summary_keys=_RUN + _ENGINE + _DENSE,
        report_keys=_CYCLES + ("dense_cycles", "speedup_vs_dense"),
        bench="sparse_bench", bench_help="1:4, 2:4, 2:8, 4:8, 1:8 and dense on 8x8 (m_max 8): "
                                         "speedups, and LUTs against the dense array",
        board=SPARSE, proofs=_sim("sparse_formal:sparse_proofs"),
    ),
    Block(
        name="sparse_engine", help="the sparse GEMM engine (simulated by: sim sparse --engine)",
        config=SparseEngineConfig, component=SparseEngine,
        harness=_sim("sparse_engine_harness:sparse_harness_verilog"),
        presets={"default": SparseEngineConfig()},
        golden=_sim("sparse_engine_golden:run_sparse_commands"),
        cycles=_sim("sparse_engine_cycles:sparse_engine_cycles"),
        testbench="bertforge.sim.sparse_engine_tb", board=SPARSE_ENGINE,
    ),
    _simulated(
        "butterfly", help="butterfly linear layers or FFTs on a batch of vectors",
        config=ButterflyConfig, component=ButterflyEngine,
        presets={"n256-l2": dict(n_max=256, lanes=2), "n256-l8": dict(n_max=256, lanes=8),
                 "n1024-l16": dict(n_max=1024, lanes=16), "int8": dict(width=8, weight_width=8)},
        golden="butterfly_fft",
        user_files=("x", "out", "weights", "x_im"), summary_keys=_RUN + ("sqnr_db",),
        report_keys=_CYCLES + ("sqnr_db",),
        bench_help="n = 64, 256, 1024 on n_max = 1024, lanes 1, 4, 16, linear and fft, batch 128",
        board=BUTTERFLY, proofs=_sim("butterfly_formal:butterfly_proofs"),
    ),
    _simulated(
        "softmax", help="softmax rows back to back through the softmax unit",
        config=SoftmaxConfig, component=Softmax,
        presets={"lanes1": dict(lanes=1), "lanes16": dict(lanes=16),
                 "int16": dict(in_width=16, out_width=16), "seq512": dict(lanes=16, l_max=512)},
        user_files=("x", "out", "x_mask", "scale"), summary_keys=_STREAM, report_keys=_ERRORS,
        bench_help="BERT-base softmax rows (128) at 1, 4 and 16 lanes",
        board=SOFTMAX, proofs=_sim("softmax_formal:softmax_proofs"),
    ),
    _simulated(
        "layernorm", help="LayerNorm(x + r) over vectors back to back",
        config=LayerNormConfig, component=LayerNorm,
        presets={"lanes4": dict(lanes=4), "lanes16": dict(lanes=16),
                 "int32": dict(lanes=16, in_width=32, h_max=1024),
                 "no-residual": dict(add_residual=False)},
        functions=("make_config",), user_files=("x", "out", "residual_file", "gamma", "beta"),
        summary_keys=_STREAM + ("max_abs_err_real",), report_keys=_ERRORS,
        bench_help="LayerNorm over BERT-base 128 x 768, lanes 1, 4, 16",
        board=LAYERNORM, proofs=_sim("layernorm_formal:layernorm_proofs"),
    ),
    _simulated(
        "gelu", help="elementwise GELU over rows back to back",
        config=GeluConfig, component=Gelu,
        presets={"lanes4": dict(lanes=4), "lanes16": dict(lanes=16),
                 "int16": dict(in_width=16, out_width=16, in_mult=1, out_shift=3)},
        functions=("make_config",), user_files=("x", "out"),
        summary_keys=_STREAM, report_keys=_ERRORS,
        bench_help="GELU over BERT-base 128 x 3072, lanes 1, 4, 16",
        board=GELU, proofs=_sim("gelu_formal:gelu_proofs"),
    ),
    _simulated(
        "encoder", help="one BERT encoder layer on GEMM + softmax + layernorm + GELU",
        config=EncoderConfig, component=EncoderTop,
        harness=_sim("encoder_harness:encoder_harness_verilog"), cycles="operation_gap",
        functions=("make_config", "add_config_args", "report", "check"), summary_keys=_ENCODER,
        bench_help="the tiny encoder layer at several sequence lengths",
    ),
    Block(
        name="norm", help="softmax, layernorm and GELU at BERT-base sizes, lanes 1, 4, 16",
        bench_help="softmax, layernorm and GELU at BERT-base sizes, lanes 1, 4, 16",
        add_bench_args=_gen("norm_bench:add_bench_args"), bench=_gen("norm_bench:bench"),
    ),
    Block(
        name="queue", help="the stream queue every block uses (rtl/stream.py), for prove",
        proofs=_sim("queue_formal:queue_proofs"),
    ),
    Block(
        name="host_link", help="the boards' UART host link (rtl/host_link.py), for prove",
        proofs=_sim("host_link_formal:host_link_proofs"),
    ),
    Block(
        name="axi_regs", help="the AXI4-Lite register file (rtl/axi_regs.py), for prove",
        proofs=_sim("axi_regs_formal:axi_regs_proofs"),
    ),
    Block(
        name="boards", help="largest systolic array per board; sizes 2x2..16x16 on ULX3S",
        bench_help="largest systolic array per board; sizes 2x2..16x16 on ULX3S",
        add_bench_args=_gen("board_bench:add_bench_args"), bench=_gen("board_bench:run_bench"),
    ),
    Block(
        name="axi", help="the AXI tops on the ULX3S 85F out of context, against the stream engines",
        bench_help="the AXI tops (GEMM 4x4, 8x8, encoder 8x8) on the ULX3S 85F out of context at "
                   "100 MHz, against the stream engines",
        add_bench_args=_gen("axi_bench:add_bench_args"), bench=_gen("axi_bench:run_bench"),
    ),
    Block(
        name="sweep", help="bertforge sweep on Ray: synthesis points per hour on 1 and 2 CPUs, "
                           "Ray's overhead on 1,000 model-only points",
        bench_help="bertforge sweep on Ray: synthesis points per hour on 1 and 2 CPUs, Ray's "
                   "overhead on 1,000 model-only points",
        add_bench_args=_gen("sweep_bench:add_bench_args"), bench=_gen("sweep_bench:bench"),
    ),
]}

#: Block name -> preset name -> config ("default" first): a view of :data:`BLOCKS`.
PRESETS = {name: block.presets for name, block in BLOCKS.items() if block.presets}


def block_of(config):
    """The block whose config class ``config`` is (its own class first, then
    a base class: a ``SparseEngineConfig`` is also a ``GemmConfig``)."""
    blocks = [b for b in BLOCKS.values() if b.component and isinstance(config, b.config)]
    for block in sorted(blocks, key=lambda b: type(config) is not b.config):
        return block
    raise ParameterTypeError(f"no block takes a config of type {type(config).__name__}")


def component_for(config):
    """The component of the block whose config class ``config`` is."""
    return block_of(config).component(config)
