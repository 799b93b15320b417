"""The payload codec (:mod:`bertforge.rtl.payload`), and the packers built on
it checked bit for bit against the hand-written packers they replaced (kept
here, as reference implementations)."""

from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.hdl import Shape, signed, unsigned
from amaranth.lib import data

from bertforge.rtl.butterfly import ButterflyConfig, ButterflyEngine
from bertforge.rtl.encoder import encoder_command_layout
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.payload import bytes_to_words, layout_bytes, pack, unpack, words_to_bytes
from bertforge.sim.payload_np import pack_beats, pack_bytes, unpack_beats, unpack_bytes
from bertforge.rtl.sparse import SparseConfig
from bertforge.rtl.sparse_engine import (SparseEngineConfig, pack_sparse_command,
                                         sparse_command_layout)
from bertforge.rtl.tile_scheduler import command_layout, pack_command
from bertforge.sim.butterfly_golden import x_beats, y_vectors
from bertforge.sim.sparse_golden import compress_nm, prune_nm, sparse_beats


# ---- the replaced hand-written packers, as references --------------------------

def old_pack_fields(layout, values):
    """The old ``pack_command`` / ``pack_sparse_command`` / encoder ``pack_struct``."""
    packed = 0
    for name, field in layout:
        value = values.get(name, 0)
        if isinstance(field.shape, data.StructLayout):
            raw = old_pack_fields(field.shape, value or {})
        else:
            raw = int(value) & ((1 << Shape.cast(field.shape).width) - 1)
        packed |= raw << field.offset
    return packed


def old_pack_row(row, width):
    """The old ``pack_vector`` / ``pack_rows`` / ``pack_words`` (one row)."""
    packed = 0
    for index, value in enumerate(np.asarray(row, dtype=np.int64).tolist()):
        packed |= (value & ((1 << width) - 1)) << (index * width)
    return packed


def old_unpack_row(packed, width, count):
    out = []
    for index in range(count):
        value = (packed >> (index * width)) & ((1 << width) - 1)
        out.append(value - (1 << width) if value >> (width - 1) else value)
    return out


def random_fields(rng, layout):
    out = {}
    for name, field in layout:
        if isinstance(field.shape, data.StructLayout):
            out[name] = random_fields(rng, field.shape)
        else:
            out[name] = int(rng.integers(-5, 1 << min(Shape.cast(field.shape).width + 1, 62)))
    return out


# ---- commands: the same bits as before ------------------------------------------

@pytest.mark.parametrize("config", [GemmConfig(), GemmConfig(rows=3, cols=5, mem_width=128,
                                                             addr_width=15, k_chunk=16)])
def test_pack_command_same_bits(config):
    rng = np.random.default_rng(1)
    layout = command_layout(config)
    for _ in range(50):
        cmd = random_fields(rng, layout)
        del cmd["tag"]                               # a missing field packs as 0
        assert pack_command(config, cmd) == old_pack_fields(layout, cmd)


def test_pack_sparse_command_same_bits():
    config = SparseEngineConfig(rows=2, cols=2, mem_width=64, addr_width=15, k_chunk=16, m_max=4)
    rng = np.random.default_rng(2)
    layout = sparse_command_layout(config)
    for _ in range(50):
        cmd = dict(random_fields(rng, layout), comment="ignored")   # unknown keys are ignored
        assert pack_sparse_command(config, cmd) == old_pack_fields(layout, cmd)


def test_encoder_command_same_bits():
    layout = encoder_command_layout(SimpleNamespace(gemm=GemmConfig(), lowbit=False))  # reads only these
    rng = np.random.default_rng(3)
    for _ in range(20):
        cmd = random_fields(rng, layout)
        assert pack(layout, cmd) == old_pack_fields(layout, cmd)
    assert pack(layout, {"op": 1, "gemm": None}) == old_pack_fields(layout, {"op": 1, "gemm": None})


def test_butterfly_command_same_bits():
    layout = ButterflyEngine(ButterflyConfig()).cmd.payload.shape()
    for mode, n, groups, shift, mult in [(0, 64, 3, 5, 7), (3, 1 << 16, 70000, 63, 65535),
                                         (2, 16, 0, 0, 1)]:
        old = ((mode & 3) | (n & 0xFFFF) << 2 | (groups & 0xFFFF) << 18 | (shift & 63) << 34
               | (mult & 0xFFFF) << 40)
        value = {"mode": mode, "n": n, "groups": groups, "shift": shift, "mult": mult}
        assert pack(layout, value) == old


# ---- beats and words -------------------------------------------------------------

@pytest.mark.parametrize("width", [3, 8, 12, 16, 20, 32, 64])
def test_rows_same_bits_and_back(width):
    rng = np.random.default_rng(width)
    rows = rng.integers(-(1 << (width - 1)), 1 << (width - 1), (9, 5), dtype=np.int64)
    layout = data.ArrayLayout(signed(width), 5)
    words = pack_beats(layout, rows)
    assert words == [old_pack_row(row, width) for row in rows]
    assert np.array_equal(unpack_beats(layout, words), rows)
    assert [old_unpack_row(w, width, 5) for w in words] == rows.tolist()
    for stride in (layout_bytes(layout), 64):
        raw = pack_bytes(layout, rows, stride=stride)
        assert raw == words_to_bytes(words, stride)
        assert bytes_to_words(raw, stride) == words
        assert np.array_equal(unpack_bytes(layout, raw, stride), rows)


def test_struct_beats_columns_and_broadcast():
    layout = data.StructLayout({"data": data.ArrayLayout(signed(12), 3), "mask": unsigned(3),
                                "scale": data.StructLayout({"m": unsigned(16), "s": unsigned(6)}),
                                "last": 1})
    rng = np.random.default_rng(4)
    value = {"data": rng.integers(-2048, 2048, (7, 3)), "mask": rng.integers(0, 8, 7),
             "scale": {"m": rng.integers(0, 1 << 16, 7), "s": 5}, "last": np.arange(7) == 6}
    words = pack_beats(layout, value)
    for beat, word in enumerate(words):
        one = {"data": value["data"][beat], "mask": value["mask"][beat],
               "scale": {"m": value["scale"]["m"][beat], "s": 5}, "last": beat == 6}
        old = old_pack_fields(layout, dict(one, data=0)) | old_pack_row(one["data"], 12)
        assert word == pack(layout, one) == old
        assert unpack(layout, word)["data"] == one["data"].tolist()
    back = unpack_beats(layout, words)
    assert np.array_equal(back["data"], value["data"]) and back["scale"]["s"].tolist() == [5] * 7
    assert back["last"].tolist() == [0] * 6 + [1]


def test_array_of_structs_and_wide_fields():
    layout = data.ArrayLayout(data.StructLayout({"re": signed(16), "im": signed(16)}), 2)
    words = pack_beats(layout, {"re": [[1, -2]], "im": [[3, -4]]})
    assert words == [old_pack_row([1, 3, -2, -4], 16)]
    assert unpack(layout, words[0]) == [{"re": 1, "im": 3}, {"re": -2, "im": -4}]
    wide = np.array([(1 << 99) - 1, -(1 << 99), 5], dtype=object)
    assert unpack_beats(signed(100), pack_beats(signed(100), wide)).tolist() == wide.tolist()
    assert unpack_beats(data.ArrayLayout(signed(3), 4), []).shape == (0, 4)
    assert unpack(signed(8), 0x1FF) == -1 and pack(signed(8), -1) == 0xFF


def test_butterfly_and_sparse_beats_same_bits():
    config = ButterflyConfig(n_max=16, lanes=2, width=16)
    rng = np.random.default_rng(5)
    re, im = rng.integers(-999, 999, (3, 8)), rng.integers(-999, 999, (3, 8))
    beats = x_beats(config, re, im)
    full = np.zeros((4, 8, 2), dtype=np.int64)
    full[:3, :, 0], full[:3, :, 1] = re, im
    rows = full.reshape(2, 2, 8, 2).transpose(0, 2, 1, 3).reshape(16, 4)
    assert beats == [old_pack_row(row, 16) for row in rows]
    flags = [(w | (1 << 64)) if k % 8 == 7 else w for k, w in enumerate(beats)]
    got_re, got_im, last = y_vectors(config, flags, 3, 8)
    assert np.array_equal(got_re, re) and np.array_equal(got_im, im)
    assert last == [k % 8 == 7 for k in range(16)]

    sparse = SparseConfig(rows=2, cols=3, m_max=4, width=8)
    a = rng.integers(-128, 128, (2, 10))
    values, indices = compress_nm(prune_nm(rng.integers(-128, 128, (10, 3)), 2, 4), 2, 4)
    a_beats, b_beats, counts = sparse_beats(sparse, [(a, values, indices, 2, 4)])
    padded = np.zeros((2, 12), dtype=np.int64)
    padded[:, :10] = a
    old_a = []
    for g in range(3):
        window = np.zeros((2, 4), dtype=np.int64)
        window[:, :4] = padded[:, 4 * g:4 * g + 4]
        old_a.append(old_pack_row(window.reshape(-1), 8) | (int(g == 2) << 64))
    old_b = [old_pack_row(values[r], 8) | (old_pack_row(indices[r], sparse.index_bits) << 24)
             | (int(r % 2 == 1) << (3 * (8 + sparse.index_bits))) for r in range(6)]
    assert (a_beats, b_beats, counts) == (old_a, old_b, [6])
