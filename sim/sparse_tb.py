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

import json
import os

import cocotb
import numpy as np

from bertforge.rtl.sparse import SparseConfig
from bertforge.sim.sparse_cycles import sparse_cycles
from bertforge.sim.sparse_golden import nm_tile_golden
from bertforge.sim.streams import pack_vector
from bertforge.sim.systolic_tb import run_tiles


def load_tiles(path, patterns):
    with np.load(path) as data:
        return [(data[f"a_{t}"], data[f"v_{t}"], data[f"i_{t}"], int(n), int(m))
                for t, (n, m) in enumerate(patterns)]


def sparse_beats(config, tiles):
    """Payload ints of the ``a`` and ``b`` streams, and compressed beats per tile.

    ``a``: one beat per group, per row the group's M activations (zeros past
    K and past M up to ``m_max``), ``last`` on the tile's last group. ``b``:
    one beat per compressed row (C values, C indices, ``group_end`` on the
    group's N-th)."""
    rows, cols, width, mm = config.rows, config.cols, config.width, config.m_max
    a_last = rows * mm * width
    b_index = cols * width
    b_end = cols * (width + config.index_bits)
    a_beats, b_beats, beats = [], [], []
    for a, values, indices, n, m in tiles:
        k = a.shape[1]
        groups = values.shape[0] // n
        padded = np.zeros((rows, groups * m), dtype=np.int64)
        padded[:, :k] = a
        for g in range(groups):
            window = np.zeros((rows, mm), dtype=np.int64)
            window[:, :m] = padded[:, g * m:(g + 1) * m]
            a_beats.append(pack_vector(window.reshape(-1), width) | (int(g == groups - 1) << a_last))
        for r in range(values.shape[0]):
            b_beats.append(pack_vector(values[r], width)
                           | (pack_vector(indices[r], config.index_bits) << b_index)
                           | (int(r % n == n - 1) << b_end))
        beats.append(values.shape[0])
    return a_beats, b_beats, beats


@cocotb.test()
async def sparse_tiles(dut):
    spec = json.loads(open(os.environ["BERTFORGE_SPEC"]).read())
    config = SparseConfig(**spec["config"])
    tiles = load_tiles(spec["data"], spec["patterns"])
    a_beats, b_beats, beats = sparse_beats(config, tiles)
    expected = [nm_tile_golden(config, a, v, i, n, m) for a, v, i, n, m in tiles]
    await run_tiles(dut, spec, config, a_beats, b_beats, expected, sparse_cycles(config, beats),
                    sum(beats))
