"""The GEMM engines' board designs (:mod:`bertforge.boards.gemm_top`, one top
for either engine: the gemm and the sparse_engine blocks): the family's
default engine, the ``build`` top config and ``run`` on the board."""

import argparse
import dataclasses

import numpy as np

from .block import lazy
from .board_design import BoardDesign, add_ab, add_int8, checked, compare, on_board, uart_divisor
from .cli_common import (CliError, config_from_args, config_overrides, load_int_matrix,
                         save_npy_atomic)
from .sparse_board import sparse_run_args

__all__ = ["GEMM", "SPARSE_ENGINE", "GEMM_BOARD_DEFAULTS", "gemm_top_config", "engine_design",
           "engine_top_config", "gemm_run_args", "sparse_engine_run_args", "run_gemm"]


#: Default GEMM engine per FPGA family: size, data memory (``mem_kib``) and
#: engine fields (:func:`bertforge.boards.gemm_top.board_engine_config`);
#: ``None``: the other families. iCE40: the smallest engine, the serial one
#: (:class:`~bertforge.rtl.serial_engine.SerialGemmEngine`; 2 KiB, 8-bit
#: sizes, chunks of 16 elements or a memory word, 24-bit accumulators, no
#: command queue: the top holds the command, the compact scheduler); the
#: N:M sparse engine drops ``serial`` and keeps its command queue, and
#: takes the other area knobs of a small FPGA without distributed RAM:
#: stage queues of 3, the compact bias/scale buffers and requantizer.
GEMM_BOARD_DEFAULTS = {"ice40": {"rows": 2, "cols": 2, "mem_kib": 2, "dim_width": 8,
                                 "min_chunk": 16, "acc_width": 24, "command_queue": 0,
                                 "stage_queue": 3, "compact": True, "serial": True},
                       "ecp5": {"rows": 4, "cols": 4, "mem_kib": 32},
                       None: {"rows": 4, "cols": 4, "mem_kib": 16}}


def gemm_top_config(target, clock_mhz, *, max_dsp=None, engine=None, sparse=False, **given):
    """The GEMM board top config of ``build`` (and ``bench boards``, ``sweep
    --pnr``) for ``target``: ``engine``, or the family's
    :data:`GEMM_BOARD_DEFAULTS` with the ``given`` engine fields and
    ``mem_kib`` over them (``sparse``: the N:M sparse engine, ``m_max``
    among the fields; a given ``engine``'s type decides); the UART divisor of
    ``clock_mhz``; the design id of :func:`engine_design`. Without
    ``engine``, either engine gets the family's
    :data:`~bertforge.boards.targets.ARRAY_MULTIPLY` unless ``given`` sets
    the multiply fields (a given ``engine`` is used as it is); the dense
    engine also gets ``max_dsp`` (default: the board's DSP count; the sparse
    array has no DSP limit)."""
    from bertforge.boards.gemm_top import GemmTopConfig, board_engine_config
    from bertforge.boards.targets import array_multiply
    from bertforge.rtl.sparse_engine import SparseEngineConfig
    if engine is not None:
        sparse = isinstance(engine, SparseEngineConfig)
    fields = {**GEMM_BOARD_DEFAULTS.get(target.family, GEMM_BOARD_DEFAULTS[None]), **given}
    if sparse:      # the sparse engine keeps its command queue and is not serial
        if "command_queue" not in given:
            fields.pop("command_queue", None)
        if "serial" not in given:
            fields.pop("serial", None)
    kib = fields.pop("mem_kib")
    if not 1 <= kib <= 64:
        raise CliError(f"--mem-kib must be between 1 and 64, not {kib}")
    if not sparse and max_dsp is None:
        max_dsp = target.dsp_count
    if engine is None:
        engine = array_multiply(board_engine_config(mem_kib=kib, sparse=sparse, **fields),
                                target.family,
                                chosen=bool({"multiply_stages", "multiplier_cell"} & set(given)))
    return GemmTopConfig(engine=engine, divisor=uart_divisor(clock_mhz), max_dsp=max_dsp,
                         design_id=(SPARSE_ENGINE if sparse else GEMM).design_id)


def engine_design(top_config):
    """The design of a GEMM board top config: :data:`SPARSE_ENGINE` or :data:`GEMM`."""
    return SPARSE_ENGINE if top_config.sparse else GEMM


def engine_top_config(block, args, clock_mhz, target):
    """``build``'s top config of design ``block`` (the gemm or the
    sparse_engine block)."""
    max_dsp = None
    if block.name == "gemm":
        # --max-dsp (a SystolicConfig field) sets the GEMM top's max_dsp.
        max_dsp = args.cfg_max_dsp
        args = argparse.Namespace(**{**vars(args), "cfg_max_dsp": None})
    given = {k: v for k, v in config_overrides(block, args).items() if v is not None}
    if args.mem_kib is not None:
        given["mem_kib"] = args.mem_kib
    engine = config_from_args(block, args) if args.preset or args.config else None
    return gemm_top_config(target, clock_mhz, max_dsp=max_dsp, engine=engine,
                           sparse=block.name == "sparse_engine", **given)


def gemm_run_args(parser):
    add_ab(parser, "B")
    add_int8(parser)


def sparse_engine_run_args(parser):
    sparse_run_args(parser)
    add_int8(parser)


def run_gemm(args, target, saved):
    """``run gemm`` and ``run sparse_engine`` (``--n``, ``--m``: W's pattern)."""
    from bertforge.boards.gemm_top import GemmTopConfig
    from bertforge.boards.gemm_host import gemm_board_layout
    from bertforge.boards.gemm_host import run_gemm as run_on_board
    config = GemmTopConfig.from_dict(saved)
    width = config.engine.width
    a = load_int_matrix(args.a, "A", width)
    b = load_int_matrix(args.b, "W" if config.sparse else "B", width)
    flags = {"int8": args.int8, "multiplier": 1 if args.multiplier is None else args.multiplier,
             "shift": 0 if args.shift is None else args.shift}
    pattern = ""
    if config.sparse:
        flags["pattern"] = (args.n, args.m)
        pattern = f" at {args.n}:{args.m}"
    checked(lambda: gemm_board_layout(config, a, b, **flags))
    result, cycles = on_board(args, config, lambda link: run_on_board(link, config, a, b, **flags))
    save_npy_atomic(args.out, result.astype(np.int8 if args.int8 else np.int32))
    m, k = a.shape
    print(f"ran {m}x{k}x{b.shape[1]}{pattern} on {target.name} in {cycles} cycles; "
          f"wrote {args.out}")

    def matches():
        # The sparse engine computes what the dense one does on the decompressed W.
        from bertforge.sim.gemm_golden import gemm_golden
        golden = {key: value for key, value in flags.items() if key != "pattern"}
        return np.array_equal(result, gemm_golden(config.engine, a, b, **golden))
    return compare(args, matches)


GEMM = BoardDesign(
    name="gemm", design_id=2, help="the GEMM engine (boards/gemm_top.py)",
    top_config=engine_top_config, top=lazy("bertforge.boards.gemm_top:GemmBoardTop"),
    per_cycle=lambda top_config: top_config.engine.rows * top_config.engine.cols,
    add_run_args=gemm_run_args, run=run_gemm, build_flags=("mem_kib",))
SPARSE_ENGINE = dataclasses.replace(
    GEMM, name="sparse_engine", design_id=8,
    help="the N:M sparse GEMM engine (boards/gemm_top.py, the GEMM engine's top)",
    add_run_args=sparse_engine_run_args)
