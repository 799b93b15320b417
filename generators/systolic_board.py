"""The systolic array's board design (:mod:`bertforge.boards.systolic_top`):
its ``build`` top config and ``run`` on the board."""

import numpy as np

from .block import lazy
from .board_design import (BoardDesign, add_ab, array_macs, checked, compare, k_max_of, on_board,
                           uart_divisor, with_array_multiply, with_dsps)
from .cli_common import config_from_args, save_npy_atomic

__all__ = ["SYSTOLIC", "systolic_top_config", "run_systolic"]


def systolic_top_config(block, args, clock_mhz, target):
    from bertforge.boards.systolic_top import SystolicTopConfig
    array = with_array_multiply(with_dsps(config_from_args(block, args), target), args, target)
    return SystolicTopConfig(array=array, divisor=uart_divisor(clock_mhz), k_max=k_max_of(args),
                             design_id=block.board.design_id)


def run_systolic(args, target, saved):
    from bertforge.boards.systolic_host import systolic_result_from_bytes, systolic_tile_bytes
    from bertforge.boards.systolic_top import SystolicTopConfig
    from bertforge.rtl.systolic import SystolicConfig
    from .systolic_sim import user_tile
    config = SystolicTopConfig(**{**saved, "array": SystolicConfig(**saved["array"])})
    array = config.array
    (a, b), = user_tile(array, args)[0]
    mem_a, mem_b, k = checked(lambda: systolic_tile_bytes(config, a, b))
    rows = array.rows if array.dataflow == "os" else k

    def work(link):
        link.write(0, 0, mem_a)
        link.write(1, 0, mem_b)
        cycles = link.run(k.to_bytes(2, "little"))
        return link.read(2, 0, config.word_bytes()[2] * rows), cycles
    data, cycles = on_board(args, config, work)
    result = systolic_result_from_bytes(config, data, rows)
    save_npy_atomic(args.out, result.astype(np.int32 if array.acc_width <= 32 else np.int64))
    print(f"ran K={k} on {target.name} in {cycles} cycles; wrote {args.out}")

    def matches():
        from bertforge.sim.systolic_golden import systolic_golden
        return np.array_equal(result, systolic_golden(array, a, b))
    return compare(args, matches)


SYSTOLIC = BoardDesign(
    name="systolic", design_id=1, help="a systolic array tile (boards/systolic_top.py)",
    top_config=systolic_top_config, top=lazy("bertforge.boards.systolic_top:SystolicBoardTop"),
    per_cycle=array_macs, add_run_args=lambda parser: add_ab(parser, "B"), run=run_systolic,
    build_flags=("k_max",))
