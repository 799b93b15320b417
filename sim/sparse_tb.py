"""cocotb testbench of the emitted ``SparseArray`` Verilog.

Parameters come from the JSON spec (see :mod:`bertforge.sim.runner`):
``config`` (an :class:`SparseConfig` as a dict), ``data`` (an ``.npz``
with ``a_t`` (R x K activations), ``v_t`` and ``i_t`` (compressed weight
values and indices, see :func:`bertforge.sim.sparse_golden.compress_nm`)
per tile t), ``patterns`` (``[n, m]`` per tile), ``seed``, ``a_gap`` /
``b_gap`` (idle probability per beat) and ``c_stall`` (probability of
``ready`` low per cycle).

Tiles run back to back (each with its own N:M); every output row and ``last``
flag is checked against :func:`~bertforge.sim.sparse_golden.nm_tile_golden`,
nothing may be lost or duplicated (drain check) and, with no gaps or stalls,
the measured cycles must equal :func:`~bertforge.sim.sparse_cycles.sparse_cycles`.
Results go to ``result_path``, outputs to ``result_path`` + ``.npz``, with
the run's functional coverage (:mod:`bertforge.sim.funcov_tb`): the
streams (``b``'s ``last`` is ``group_end``), the extremes of activations
and weights, and back-to-back tiles of every pair of N:M patterns the
config allows.
"""

import cocotb
import numpy as np

from bertforge.rtl.sparse import SparseConfig, a_layout, b_layout, c_layout
from bertforge.sim.funcov_tb import StreamCoverage, flag_of
from bertforge.sim.sparse_cycles import sparse_cycles
from bertforge.sim.sparse_golden import nm_tile_golden, sparse_beats
from bertforge.sim.systolic_tb import run_tiles
from bertforge.sim.stream_tb import read_spec


#: Kinds of an N:M pattern: groups of one weight (``N = 1``), ``sparse``
#: (``1 < N < M``) and ``dense`` (``N = M > 1``).
PATTERN_KINDS = ["1", "sparse", "dense"]


def pattern_kind(n, m):
    return "1" if n == 1 else "dense" if n == m else "sparse"


def load_tiles(path, patterns):
    with np.load(path) as data:
        return [(data[f"a_{t}"], data[f"v_{t}"], data[f"i_{t}"], int(n), int(m))
                for t, (n, m) in enumerate(patterns)]


@cocotb.test()
async def sparse_tiles(dut):
    spec = read_spec()
    config = SparseConfig(**spec["config"])
    tiles = load_tiles(spec["data"], spec["patterns"])
    a_beats, b_beats, beats = sparse_beats(config, tiles)
    expected = [nm_tile_golden(config, a, v, i, n, m) for a, v, i, n, m in tiles]

    def cover(a_driver, b_driver, monitor):
        cover = StreamCoverage(
            "sparse", {"a": (a_driver, flag_of(a_layout(config))),
                       "b": (b_driver, flag_of(b_layout(config), "group_end"))},
            {"c": (monitor, flag_of(c_layout(config)))}, fixed_rows=("c",) if config.rows > 1 else ())
        cover.values("a", np.concatenate([np.ravel(a) for a, *_ in tiles]), config.width)
        cover.values("w", np.concatenate([np.ravel(v) for _, v, *_ in tiles]), config.width)
        cover.pairs("pattern", [pattern_kind(n, m) for *_, n, m in tiles], PATTERN_KINDS)
        cover.bounds("m", [m for *_, m in tiles], 1, config.m_max)
        return cover

    await run_tiles(dut, spec, config, a_beats, b_beats, c_layout(config), expected,
                    sparse_cycles(config, beats), sum(beats), cover)
