"""Board designs: what ``bertforge build`` and ``bertforge run`` know about
one block behind the UART host link, as one :class:`BoardDesign` per design.

Each is the ``board`` of its :class:`~bertforge.generators.block.Block` in
:data:`bertforge.generators.blocks.BLOCKS` (the only list of designs);
:mod:`bertforge.generators.board_cli` reads nothing else.
"""

import argparse
import dataclasses
import functools
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from bertforge.rtl.gelu import Gelu
from bertforge.rtl.layernorm import LayerNorm
from bertforge.rtl.softmax import Softmax
from .block import lazy
from .cli_common import (CliError, config_from_args, config_overrides, load_int_matrix, positive_float,
                         save_npy_atomic)

__all__ = ["BoardDesign", "BAUD", "GEMM", "GEMM_BOARD_DEFAULTS", "gemm_top_config", "SYSTOLIC", "SOFTMAX", "LAYERNORM", "GELU", "SPARSE",
           "BUTTERFLY", "SPARSE_ENGINE", "engine_design"]

BAUD = 115200
#: ``--k-max`` when not given.
K_MAX = 256
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
#: Default beats of the streaming and butterfly tops' memories per FPGA family.
STREAM_DEPTH_DEFAULTS = {"ice40": 256}


@dataclass(frozen=True)
class BoardDesign:
    """One design behind the UART host link.

    ``name`` (as in ``--design`` and ``run NAME``), ``design_id`` (the PING
    reply's design byte, put in the top config), ``help``; ``build_flags``:
    which of ``k_max``, ``mem_kib``, ``depth`` ``build`` takes for it;
    ``top_config`` ``(design_id, args, clock_mhz, target) -> top config``;
    ``top`` (top config -> the board top Component); ``per_cycle`` (top
    config -> MACs per cycle, or elements per cycle if ``elements``);
    ``add_run_args`` (adds the design's own ``run`` flags to its sub-parser);
    ``run`` ``(args, target, saved top config dict) -> exit code``.
    """

    name: str
    design_id: int
    help: str
    top_config: Callable
    top: Callable
    per_cycle: Callable
    add_run_args: Callable
    run: Callable
    build_flags: tuple = ()
    elements: bool = False


def _divisor(clock_mhz):
    return round(clock_mhz * 1e6 / BAUD)


def _k_max(args):
    return K_MAX if args.k_max is None else args.k_max


def _with_dsps(array, target):
    if array.max_dsp is None and target.dsp_count is not None:
        array = dataclasses.replace(array, max_dsp=target.dsp_count)
    return array


def _depth(args, target, least):
    if args.depth is not None:
        return args.depth
    return max(STREAM_DEPTH_DEFAULTS.get(target.family, 1024), least)


def _systolic_top_config(design_id, args, clock_mhz, target):
    from bertforge.boards.systolic_top import SystolicTopConfig
    array = _with_array_multiply(_with_dsps(config_from_args("systolic", args), target), args,
                                 target)
    return SystolicTopConfig(array=array, divisor=_divisor(clock_mhz), k_max=_k_max(args),
                             design_id=design_id)


def _with_array_multiply(array, args, target):
    """The family's multiply fields (ECP5: registered MULT18X18Ds, for Fmax)
    unless the command line sets them."""
    from bertforge.boards.targets import array_multiply
    chosen = args.cfg_multiply_stages is not None or args.cfg_multiplier_cell is not None
    return array_multiply(array, target.family, chosen=chosen)


def _sparse_top_config(design_id, args, clock_mhz, target):
    from bertforge.boards.sparse_top import SparseTopConfig
    array = _with_array_multiply(_with_dsps(config_from_args("sparse", args), target), args, target)
    return SparseTopConfig(array=array, divisor=_divisor(clock_mhz), k_max=_k_max(args),
                           design_id=design_id)


def _butterfly_top_config(design_id, args, clock_mhz, target):
    from bertforge.boards.butterfly_top import ButterflyTopConfig
    engine = config_from_args("butterfly", args)
    return ButterflyTopConfig(engine=engine, divisor=_divisor(clock_mhz),
                              depth=_depth(args, target, engine.n_max), design_id=design_id)


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
    return GemmTopConfig(engine=engine, divisor=_divisor(clock_mhz), max_dsp=max_dsp,
                         design_id=(SPARSE_ENGINE if sparse else GEMM).design_id)


def engine_design(top_config):
    """The design of a GEMM board top config: :data:`SPARSE_ENGINE` or :data:`GEMM`."""
    return SPARSE_ENGINE if top_config.sparse else GEMM


def _engine_top_config(block, design_id, args, clock_mhz, target):
    """``build``'s top config of design ``block`` ("gemm" or "sparse_engine")."""
    max_dsp = None
    if block == "gemm":
        # --max-dsp (a SystolicConfig field) sets the GEMM top's max_dsp.
        max_dsp = args.cfg_max_dsp
        args = argparse.Namespace(**{**vars(args), "cfg_max_dsp": None})
    given = {k: v for k, v in config_overrides(block, args).items() if v is not None}
    if args.mem_kib is not None:
        given["mem_kib"] = args.mem_kib
    engine = config_from_args(block, args) if args.preset or args.config else None
    return gemm_top_config(target, clock_mhz, max_dsp=max_dsp, engine=engine,
                           sparse=block == "sparse_engine", **given)


def _norm_top_config(component, design_id, args, clock_mhz, target):
    from bertforge.boards.norm_top import NormTopConfig
    unit = config_from_args(component.__module__.rpartition(".")[2], args)
    return NormTopConfig(unit=unit, component=component, design_id=design_id,
                           divisor=_divisor(clock_mhz),
                           depth=_depth(args, target, getattr(unit, "beats_max", 1)))


def _array_macs(top_config):
    return top_config.array.rows * top_config.array.cols


# -- bertforge run: the host side ----------------------------------------

def _open_link(port_name):
    try:
        import serial
    except ImportError:
        raise CliError("pyserial is not installed; run: pip install pyserial") from None
    try:
        return serial.Serial(port_name, BAUD, timeout=2.0)
    except (OSError, serial.SerialException) as error:
        raise CliError(f"cannot open {port_name}: {error}") from None


def _on_board(args, config, work):
    """Open the serial port, check with a PING that the board runs the top
    of ``config`` (its design id) and return ``work(link)``; link errors end
    as one line."""
    from bertforge.boards import protocol
    with _open_link(args.port) as port:
        try:
            link = protocol.HostLink(port)
            design, _ = link.ping()
            if design != config.design_id:
                raise CliError(f"the board on {args.port} runs design {design}, not the {args.design} "
                               f"top ({config.design_id}); flash build {args.build_dir or 'first'}")
            return work(link)
        except protocol.LinkError as error:
            raise CliError(f"board link: {error}") from None


def _checked(check):
    """Run ``check()`` (the host-side checks ``run_*`` make, before the port
    is opened); its ``ValueError`` ends as one line."""
    try:
        return check()
    except ValueError as error:
        raise CliError(str(error)) from None


def _compare(args, matches):
    """``--check``: exit code 1 if ``matches()`` is false, else 0."""
    if not args.check:
        return 0
    if not matches():
        print("bertforge: error: the board's result differs from the golden model", file=sys.stderr)
        return 1
    print("matches the golden model")
    return 0


def _add_ab(parser, b_help):
    parser.add_argument("--a", required=True, metavar="A.npy", help="A")
    parser.add_argument("--b", required=True, metavar="B.npy", help=b_help)


def _add_requant(parser, shift_default):
    parser.add_argument("--multiplier", "--mult", type=int, default=None,
                        help="requantization multiplier (default 1)")
    parser.add_argument("--shift", type=int, default=None,
                        help=f"requantization shift (default {shift_default})")


def _add_x(parser, x_help="the rows (vectors) of integers"):
    parser.add_argument("--x", required=True, metavar="X.npy", help=x_help)


def _add_int8(parser):
    parser.add_argument("--int8", action="store_true", help="requantize C to int8")
    _add_requant(parser, 0)


def _gemm_run_args(parser):
    _add_ab(parser, "B")
    _add_int8(parser)


def _sparse_engine_run_args(parser):
    _sparse_run_args(parser)
    _add_int8(parser)


def _run_gemm(args, target, saved):
    """``run gemm`` and ``run sparse_engine`` (``--n``, ``--m``: W's pattern)."""
    from bertforge.boards.gemm_top import GemmTopConfig
    from bertforge.boards.host import gemm_board_layout, run_gemm
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
    _checked(lambda: gemm_board_layout(config, a, b, **flags))
    result, cycles = _on_board(args, config, lambda link: run_gemm(link, config, a, b, **flags))
    save_npy_atomic(args.out, result.astype(np.int8 if args.int8 else np.int32))
    m, k = a.shape
    print(f"ran {m}x{k}x{b.shape[1]}{pattern} on {target.name} in {cycles} cycles; "
          f"wrote {args.out}")

    def matches():
        # The sparse engine computes what the dense one does on the decompressed W.
        from bertforge.sim.gemm_golden import gemm_golden
        golden = {key: value for key, value in flags.items() if key != "pattern"}
        return np.array_equal(result, gemm_golden(config.engine, a, b, **golden))
    return _compare(args, matches)


def _run_systolic(args, target, saved):
    from bertforge.boards.host import systolic_result_from_bytes, systolic_tile_bytes
    from bertforge.boards.systolic_top import SystolicTopConfig
    from bertforge.rtl.systolic import SystolicConfig
    from .systolic_sim import user_tile
    config = SystolicTopConfig(**{**saved, "array": SystolicConfig(**saved["array"])})
    array = config.array
    (a, b), = user_tile(array, args)[0]
    mem_a, mem_b, k = _checked(lambda: systolic_tile_bytes(config, a, b))
    rows = array.rows if array.dataflow == "os" else k

    def work(link):
        link.write(0, 0, mem_a)
        link.write(1, 0, mem_b)
        cycles = link.run(k.to_bytes(2, "little"))
        return link.read(2, 0, config.word_bytes()[2] * rows), cycles
    data, cycles = _on_board(args, config, work)
    result = systolic_result_from_bytes(config, data, rows)
    save_npy_atomic(args.out, result.astype(np.int32 if array.acc_width <= 32 else np.int64))
    print(f"ran K={k} on {target.name} in {cycles} cycles; wrote {args.out}")

    def matches():
        from bertforge.sim.systolic_golden import systolic_golden
        return np.array_equal(result, systolic_golden(array, a, b))
    return _compare(args, matches)


def _sparse_run_args(parser):
    _add_ab(parser, "the weights W (K x C), N:M sparse along K")
    parser.add_argument("--n", type=int, required=True,
                        help="N, the non-zeros in each group of M along K")
    parser.add_argument("--m", type=int, required=True, help="M, the group size (at most m_max)")


def _run_sparse(args, target, saved):
    from bertforge.boards.host import run_sparse, sparse_tile_bytes
    from bertforge.boards.sparse_top import SparseTopConfig
    from bertforge.sim.sparse_golden import check_pattern
    config = SparseTopConfig.from_dict(saved)
    array = config.array
    try:
        n, m = check_pattern(args.n, args.m, array.m_max)
    except ValueError as error:
        raise CliError(f"--n {args.n} --m {args.m}: {error}") from None
    a = load_int_matrix(args.a, "A", array.width)
    w = load_int_matrix(args.b, "W", array.width)
    _checked(lambda: sparse_tile_bytes(config, a, w, n, m))
    result, cycles = _on_board(args, config, lambda link: run_sparse(link, config, a, w, n, m))
    save_npy_atomic(args.out, result.astype(np.int32 if array.acc_width <= 32 else np.int64))
    print(f"ran {a.shape[0]}x{a.shape[1]}x{w.shape[1]} at {n}:{m} on {target.name} in "
          f"{cycles} cycles; wrote {args.out}")

    def matches():
        from bertforge.sim.sparse_golden import compress_nm, nm_tile_golden
        values, indices = compress_nm(w, n, m)
        return np.array_equal(result, nm_tile_golden(array, a, values, indices, n, m))
    return _compare(args, matches)


def _butterfly_run_args(parser):
    parser.add_argument("--mode", required=True, choices=("linear", "fft", "ifft"),
                        help="the operation")
    _add_x(parser, "batch x n (real parts)")
    parser.add_argument("--x-im", dest="x_im", metavar="XI.npy",
                        help="fft/ifft: the imaginary parts, batch x n (default 0)")
    parser.add_argument("--weights", "--w", dest="weights", metavar="W.npy",
                        help="linear: log2(n) x n/2 x 4 weights [w00, w01, w10, w11]")
    parser.add_argument("--n", type=int, help="the vector length (default: X's columns)")
    _add_requant(parser, "weight_width")


def _run_butterfly(args, target, saved):
    from types import SimpleNamespace

    from bertforge.boards.butterfly_top import ButterflyTopConfig
    from bertforge.boards.host import butterfly_images, run_butterfly
    from .butterfly_sim import _linear_params, _user_jobs
    config = ButterflyTopConfig.from_dict(saved)
    engine = config.engine
    if args.mode != "linear" and (args.multiplier is not None or args.shift is not None):
        raise CliError("--multiplier and --shift are for --mode linear only")
    # The checks of `bertforge sim butterfly --x` (shapes, values, n, weights).
    user = SimpleNamespace(x=args.x, x_im=args.x_im, out=args.out, n=args.n, mode=args.mode,
                           weights=args.weights, mult=args.multiplier, shift=args.shift)
    jobs, arrays, n = _user_jobs(engine, user)
    mode, first = args.mode, len(jobs) - 1
    re = arrays[f"x_re_{first}"]
    im = None if mode == "linear" else arrays[f"x_im_{first}"]
    weights = arrays.get("w_0")
    mult, shift = _linear_params(engine, user) if mode == "linear" else (1, 0)
    _checked(lambda: butterfly_images(config, mode, re, im, weights))
    (out_re, out_im), cycles = _on_board(
        args, config, lambda link: run_butterfly(link, config, mode, re, im, weights, mult, shift))
    out = out_re if mode == "linear" else np.stack([out_re, out_im], axis=-1)
    save_npy_atomic(args.out, out.astype(np.int16 if engine.width == 16 else np.int8))
    print(f"ran {mode} on {re.shape[0]} vectors of {n} on {target.name} in {cycles} cycles; "
          f"wrote {args.out}")

    def matches():
        from bertforge.sim.butterfly_golden import board_golden
        want_re, want_im = board_golden(engine, mode, re, im, weights, mult, shift)
        return np.array_equal(out_re, want_re) and np.array_equal(out_im, want_im)
    return _compare(args, matches)


def _softmax_run_args(parser):
    _add_x(parser)
    parser.add_argument("--x-mask", dest="x_mask", metavar="M.npy",
                        help="R x L bools, true = excluded (a design built with a mask)")
    parser.add_argument("--scale", type=positive_float, default=None,
                        help="real value of one input LSB (default 1)")


def _layernorm_run_args(parser):
    _add_x(parser)
    parser.add_argument("--residual", metavar="R.npy", help="the residual (add_residual)")
    parser.add_argument("--gamma", metavar="G.npy", help="H gamma values (with --beta; "
                        "default gamma 1.0, beta 0)")
    parser.add_argument("--beta", metavar="B.npy", help="H beta values (with --gamma)")


def _softmax_inputs(args, unit, x):
    inputs = {}
    if args.x_mask:
        if not unit.mask:
            raise CliError("--x-mask needs a build with a mask input (--mask true)")
        from .softmax_sim import _load_mask
        inputs["mask"] = _load_mask(args.x_mask, x.shape)
    inputs["scale"] = 1.0 if args.scale is None else args.scale
    return inputs


def _layernorm_inputs(args, unit, x):
    if bool(args.gamma) != bool(args.beta):
        raise CliError("--gamma and --beta go together: give both")
    if unit.add_residual and not args.residual:
        raise CliError("this build adds a residual: give --residual R.npy")
    if args.residual and not unit.add_residual:
        raise CliError("--residual needs a build with add_residual true")
    inputs = {}
    if args.residual:
        inputs["r"] = load_int_matrix(args.residual, "R", unit.in_width)
        if inputs["r"].shape != x.shape:
            raise CliError(f"R has shape {inputs['r'].shape}; it must have the shape of X {x.shape}")
    if args.gamma:
        for key, path in (("gamma", args.gamma), ("beta", args.beta)):
            inputs[key] = load_int_matrix(path, key, unit.param_width, ndim=1)
            if inputs[key].shape != (x.shape[1],):
                raise CliError(f"{key} has shape {inputs[key].shape}; it must hold "
                               f"H={x.shape[1]} values")
    else:
        # The board keeps the gamma/beta of the last run; --check needs them
        # known, so without --gamma/--beta load 1.0 and 0.
        inputs["gamma"] = np.full(x.shape[1], 1 << unit.gamma_frac, dtype=np.int64)
        inputs["beta"] = np.zeros(x.shape[1], dtype=np.int64)
    return inputs


def _run_stream(args, target, saved):
    from bertforge.boards import host
    from bertforge.boards.norm_top import NormTopConfig
    if "component" not in saved:
        raise CliError("this build is from an older bertforge (its report names no unit "
                       "component): build it again")
    config = NormTopConfig.from_dict(saved)
    unit, design = config.unit, config.design
    x = load_int_matrix(args.x, "X", unit.in_width)
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise CliError(f"X file {args.x} has shape {x.shape}; it needs at least one row and column")
    inputs = {"softmax": _softmax_inputs, "layernorm": _layernorm_inputs}.get(
        design, lambda *_: {})(args, unit, x)

    def phases():
        if design == "softmax":
            return host.softmax_phases(unit, x, inputs.get("mask"), 0, 0)
        if design == "layernorm":
            return host.layernorm_phases(unit, x, inputs.get("r"), inputs["gamma"], inputs["beta"])
        return host.gelu_phases(unit, x)
    for (_, beats), (_, depth) in zip(_checked(phases), config.memories()):
        if beats > depth:
            raise CliError(f"X needs {beats} beats; this bitstream holds {depth} "
                           f"(build with a larger --depth or send fewer rows)")
    run = getattr(host, f"run_{design}")
    result, cycles = _on_board(args, config, lambda link: run(link, config, x, **inputs))
    dtype = {8: np.uint8 if design == "softmax" else np.int8, 16: np.int16}
    save_npy_atomic(args.out, result.astype(dtype[getattr(unit, "out_width", 8)]))
    print(f"ran {design} on {x.shape[0]} x {x.shape[1]} on {target.name} in {cycles} cycles; "
          f"wrote {args.out}")

    def matches():
        from bertforge.sim.norm_golden import norm_golden
        return np.array_equal(result, norm_golden(design, unit, x, **inputs))
    return _compare(args, matches)


def _stream_design(name, design_id, component, add_run_args):
    return BoardDesign(
        name=name, design_id=design_id, help=f"the {name} unit (boards/norm_top.py)",
        top_config=functools.partial(_norm_top_config, component), top=lazy("bertforge.boards.norm_top:NormBoardTop"),
        per_cycle=lambda top_config: top_config.unit.lanes, elements=True,
        add_run_args=add_run_args, run=_run_stream, build_flags=("depth",))


SYSTOLIC = BoardDesign(
    name="systolic", design_id=1, help="a systolic array tile (boards/systolic_top.py)",
    top_config=_systolic_top_config, top=lazy("bertforge.boards.systolic_top:SystolicBoardTop"), per_cycle=_array_macs,
    add_run_args=lambda parser: _add_ab(parser, "B"), run=_run_systolic,
    build_flags=("k_max",))
GEMM = BoardDesign(
    name="gemm", design_id=2, help="the GEMM engine (boards/gemm_top.py)",
    top_config=functools.partial(_engine_top_config, "gemm"),
    top=lazy("bertforge.boards.gemm_top:GemmBoardTop"),
    per_cycle=lambda top_config: top_config.engine.rows * top_config.engine.cols,
    add_run_args=_gemm_run_args, run=_run_gemm, build_flags=("mem_kib",))
SOFTMAX = _stream_design("softmax", 3, Softmax, _softmax_run_args)
LAYERNORM = _stream_design("layernorm", 4, LayerNorm, _layernorm_run_args)
GELU = _stream_design("gelu", 5, Gelu, _add_x)
SPARSE = BoardDesign(
    name="sparse", design_id=6, help="an N:M sparse array tile (boards/sparse_top.py)",
    top_config=_sparse_top_config, top=lazy("bertforge.boards.sparse_top:SparseBoardTop"), per_cycle=_array_macs,
    add_run_args=_sparse_run_args, run=_run_sparse, build_flags=("k_max",))
SPARSE_ENGINE = dataclasses.replace(
    GEMM, name="sparse_engine", design_id=8,
    help="the N:M sparse GEMM engine (boards/gemm_top.py, the GEMM engine's top)",
    top_config=functools.partial(_engine_top_config, "sparse_engine"),
    add_run_args=_sparse_engine_run_args)
BUTTERFLY = BoardDesign(
    name="butterfly", design_id=7, help="the butterfly engine (boards/butterfly_top.py)",
    top_config=_butterfly_top_config, top=lazy("bertforge.boards.butterfly_top:ButterflyBoardTop"),
    per_cycle=lambda top_config: 4 * top_config.engine.lanes,   # four multipliers per lane
    add_run_args=_butterfly_run_args, run=_run_butterfly, build_flags=("depth",))
