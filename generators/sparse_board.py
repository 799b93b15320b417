"""The N:M sparse array's board design (:mod:`bertforge.boards.sparse_top`):
its ``build`` top config and ``run`` on the board."""

import numpy as np

from .block import lazy
from .board_design import (BoardDesign, add_ab, array_macs, checked, compare, k_max_of, on_board,
                           uart_divisor, with_array_multiply, with_dsps)
from .cli_common import CliError, config_from_args, load_int_matrix, save_npy_atomic

__all__ = ["SPARSE", "sparse_top_config", "sparse_run_args", "run_sparse"]


def sparse_top_config(block, args, clock_mhz, target):
    from bertforge.boards.sparse_top import SparseTopConfig
    array = with_array_multiply(with_dsps(config_from_args(block, args), target), args, target)
    return SparseTopConfig(array=array, divisor=uart_divisor(clock_mhz), k_max=k_max_of(args),
                           design_id=block.board.design_id)


def sparse_run_args(parser):
    add_ab(parser, "the weights W (K x C), N:M sparse along K")
    parser.add_argument("--n", type=int, required=True,
                        help="N, the non-zeros in each group of M along K")
    parser.add_argument("--m", type=int, required=True, help="M, the group size (at most m_max)")


def run_sparse(args, target, saved):
    from bertforge.boards.sparse_host import run_sparse, sparse_tile_bytes
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
    checked(lambda: sparse_tile_bytes(config, a, w, n, m))
    result, cycles = on_board(args, config, lambda link: run_sparse(link, config, a, w, n, m))
    save_npy_atomic(args.out, result.astype(np.int32 if array.acc_width <= 32 else np.int64))
    print(f"ran {a.shape[0]}x{a.shape[1]}x{w.shape[1]} at {n}:{m} on {target.name} in "
          f"{cycles} cycles; wrote {args.out}")

    def matches():
        from bertforge.sim.sparse_golden import compress_nm, nm_tile_golden
        values, indices = compress_nm(w, n, m)
        return np.array_equal(result, nm_tile_golden(array, a, values, indices, n, m))
    return compare(args, matches)


SPARSE = BoardDesign(
    name="sparse", design_id=6, help="an N:M sparse array tile (boards/sparse_top.py)",
    top_config=sparse_top_config, top=lazy("bertforge.boards.sparse_top:SparseBoardTop"),
    per_cycle=array_macs, add_run_args=sparse_run_args, run=run_sparse, build_flags=("k_max",))
