"""The streaming units' board designs (:mod:`bertforge.boards.norm_top`, one
top for softmax, layernorm or GELU): the ``build`` top config, each
unit's ``run`` flags and inputs, and ``run`` on the board."""

import numpy as np

from .block import lazy
from .board_design import (BoardDesign, add_x, checked, compare, memory_depth, on_board,
                           uart_divisor)
from .cli_common import CliError, config_from_args, load_int_matrix, positive_float, save_npy_atomic

__all__ = ["SOFTMAX", "LAYERNORM", "GELU", "norm_top_config", "softmax_run_args",
           "layernorm_run_args", "softmax_inputs", "layernorm_inputs", "run_stream",
           "stream_design"]


def norm_top_config(block, args, clock_mhz, target):
    from bertforge.boards.norm_top import NormTopConfig
    unit = config_from_args(block, args)
    return NormTopConfig(unit=unit, component=block.component, design_id=block.board.design_id,
                           divisor=uart_divisor(clock_mhz),
                           depth=memory_depth(args, target, getattr(unit, "beats_max", 1)))


def softmax_run_args(parser):
    add_x(parser)
    parser.add_argument("--x-mask", dest="x_mask", metavar="M.npy",
                        help="R x L bools, true = excluded (a design built with a mask)")
    parser.add_argument("--scale", type=positive_float, default=None,
                        help="real value of one input LSB (default 1)")


def layernorm_run_args(parser):
    add_x(parser)
    parser.add_argument("--residual", metavar="R.npy", help="the residual (add_residual)")
    parser.add_argument("--gamma", metavar="G.npy", help="H gamma values (with --beta; "
                        "default gamma 1.0, beta 0)")
    parser.add_argument("--beta", metavar="B.npy", help="H beta values (with --gamma)")


def softmax_inputs(args, unit, x):
    inputs = {}
    if args.x_mask:
        if not unit.mask:
            raise CliError("--x-mask needs a build with a mask input (--mask true)")
        from .softmax_sim import load_mask
        inputs["mask"] = load_mask(args.x_mask, x.shape)
    inputs["scale"] = 1.0 if args.scale is None else args.scale
    return inputs


def layernorm_inputs(args, unit, x):
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


def run_stream(args, target, saved):
    from bertforge.boards import norm_host
    from bertforge.boards.norm_top import NormTopConfig
    if "component" not in saved:
        raise CliError("this build is from an older bertforge (its report names no unit "
                       "component): build it again")
    config = NormTopConfig.from_dict(saved)
    unit, design = config.unit, config.design
    x = load_int_matrix(args.x, "X", unit.in_width)
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise CliError(f"X file {args.x} has shape {x.shape}; it needs at least one row and column")
    inputs = {"softmax": softmax_inputs, "layernorm": layernorm_inputs}.get(
        design, lambda *_: {})(args, unit, x)

    def phases():
        if design == "softmax":
            return norm_host.softmax_phases(unit, x, inputs.get("mask"), 0, 0)
        if design == "layernorm":
            return norm_host.layernorm_phases(unit, x, inputs.get("r"), inputs["gamma"],
                                              inputs["beta"])
        return norm_host.gelu_phases(unit, x)
    for (_, beats), (_, depth) in zip(checked(phases), config.memories()):
        if beats > depth:
            raise CliError(f"X needs {beats} beats; this bitstream holds {depth} "
                           f"(build with a larger --depth or send fewer rows)")
    run = getattr(norm_host, f"run_{design}")
    result, cycles = on_board(args, config, lambda link: run(link, config, x, **inputs))
    dtype = {8: np.uint8 if design == "softmax" else np.int8, 16: np.int16}
    save_npy_atomic(args.out, result.astype(dtype[getattr(unit, "out_width", 8)]))
    print(f"ran {design} on {x.shape[0]} x {x.shape[1]} on {target.name} in {cycles} cycles; "
          f"wrote {args.out}")

    def matches():
        from bertforge.sim.norm_golden import norm_golden
        return np.array_equal(result, norm_golden(design, unit, x, **inputs))
    return compare(args, matches)


def stream_design(name, design_id, add_run_args):
    return BoardDesign(
        name=name, design_id=design_id, help=f"the {name} unit (boards/norm_top.py)",
        top_config=norm_top_config, top=lazy("bertforge.boards.norm_top:NormBoardTop"),
        per_cycle=lambda top_config: top_config.unit.lanes, elements=True,
        add_run_args=add_run_args, run=run_stream, build_flags=("depth",))


SOFTMAX = stream_design("softmax", 3, softmax_run_args)
LAYERNORM = stream_design("layernorm", 4, layernorm_run_args)
GELU = stream_design("gelu", 5, add_x)
