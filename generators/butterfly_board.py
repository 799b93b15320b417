"""The butterfly engine's board design (:mod:`bertforge.boards.butterfly_top`):
its ``build`` top config and ``run`` on the board."""

import numpy as np

from .block import lazy
from .board_design import (BoardDesign, add_requant, add_x, checked, compare, memory_depth, on_board,
                           uart_divisor)
from .cli_common import CliError, config_from_args, save_npy_atomic

__all__ = ["BUTTERFLY", "butterfly_top_config", "butterfly_run_args", "run_butterfly"]


def butterfly_top_config(block, args, clock_mhz, target):
    from bertforge.boards.butterfly_top import ButterflyTopConfig
    engine = config_from_args(block, args)
    return ButterflyTopConfig(engine=engine, divisor=uart_divisor(clock_mhz),
                              depth=memory_depth(args, target, engine.n_max), design_id=block.board.design_id)


def butterfly_run_args(parser):
    parser.add_argument("--mode", required=True, choices=("linear", "fft", "ifft"),
                        help="the operation")
    add_x(parser, "batch x n (real parts)")
    parser.add_argument("--x-im", dest="x_im", metavar="XI.npy",
                        help="fft/ifft: the imaginary parts, batch x n (default 0)")
    parser.add_argument("--weights", "--w", dest="weights", metavar="W.npy",
                        help="linear: log2(n) x n/2 x 4 weights [w00, w01, w10, w11]")
    parser.add_argument("--n", type=int, help="the vector length (default: X's columns)")
    add_requant(parser, "weight_width")


def run_butterfly(args, target, saved):
    from types import SimpleNamespace

    from bertforge.boards.butterfly_top import ButterflyTopConfig
    from bertforge.boards.butterfly_host import butterfly_images, run_butterfly
    from .butterfly_sim import linear_params, user_jobs
    config = ButterflyTopConfig.from_dict(saved)
    engine = config.engine
    if args.mode != "linear" and (args.multiplier is not None or args.shift is not None):
        raise CliError("--multiplier and --shift are for --mode linear only")
    # The checks of `bertforge sim butterfly --x` (shapes, values, n, weights).
    user = SimpleNamespace(x=args.x, x_im=args.x_im, out=args.out, n=args.n, mode=args.mode,
                           weights=args.weights, mult=args.multiplier, shift=args.shift)
    jobs, arrays, n = user_jobs(engine, user)
    mode, first = args.mode, len(jobs) - 1
    re = arrays[f"x_re_{first}"]
    im = None if mode == "linear" else arrays[f"x_im_{first}"]
    weights = arrays.get("w_0")
    mult, shift = linear_params(engine, user) if mode == "linear" else (1, 0)
    checked(lambda: butterfly_images(config, mode, re, im, weights))
    (out_re, out_im), cycles = on_board(
        args, config, lambda link: run_butterfly(link, config, mode, re, im, weights, mult, shift))
    out = out_re if mode == "linear" else np.stack([out_re, out_im], axis=-1)
    save_npy_atomic(args.out, out.astype(np.int16 if engine.width == 16 else np.int8))
    print(f"ran {mode} on {re.shape[0]} vectors of {n} on {target.name} in {cycles} cycles; "
          f"wrote {args.out}")

    def matches():
        from bertforge.sim.butterfly_golden import board_golden
        want_re, want_im = board_golden(engine, mode, re, im, weights, mult, shift)
        return np.array_equal(out_re, want_re) and np.array_equal(out_im, want_im)
    return compare(args, matches)


BUTTERFLY = BoardDesign(
    name="butterfly", design_id=7, help="the butterfly engine (boards/butterfly_top.py)",
    top_config=butterfly_top_config, top=lazy("bertforge.boards.butterfly_top:ButterflyBoardTop"),
    per_cycle=lambda top_config: 4 * top_config.engine.lanes,   # four multipliers per lane
    add_run_args=butterfly_run_args, run=run_butterfly, build_flags=("depth",))
