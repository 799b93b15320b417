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
Results go to ``result_path``, outputs to ``result_path`` + ``.npz``.
"""

import cocotb
import numpy as np

from bertforge.rtl.sparse import SparseConfig, c_layout
from bertforge.sim.sparse_cycles import sparse_cycles
from bertforge.sim.sparse_golden import nm_tile_golden, sparse_beats
from bertforge.sim.systolic_tb import run_tiles
from bertforge.sim.stream_tb import read_spec


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
    await run_tiles(dut, spec, config, a_beats, b_beats, c_layout(config), expected,
                    sparse_cycles(config, beats), sum(beats))
