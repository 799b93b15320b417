"""The N:M sparse array's board top-level: config checks, memory images,
the whole top in Verilator over the bit-level UART, the CLI."""

import dataclasses
import json

import numpy as np
import pytest

from bertforge.boards.sparse_host import (sparse_result_from_bytes, sparse_run_args,
                                          sparse_tile_bytes)
from bertforge.boards.host import vector_layout
from bertforge.boards.sparse_top import SparseBoardTop, SparseTopConfig
from bertforge.generators import board_design
from bertforge.generators.sparse_board import SPARSE
from bertforge.generators.cli import main
from bertforge.sim.payload_np import pack_bytes, unpack_bytes
from bertforge.rtl.sparse import SparseConfig
from bertforge.sim.sparse_golden import compress_nm, nm_tile_golden, prune_nm

from board_helpers import (FakeBoard, cli_error, run_board_top, run_exit_checked, save_build_report,
                           top_config_test)

ARRAY = SparseConfig(rows=2, cols=3, m_max=8, acc_width=20)


test_sparse_top_config_validation = top_config_test(SparseTopConfig, [
    ({"divisor": 3}, ValueError, r"^divisor must be an integer >= 4, not 3$"),
    ({"k_max": 0}, ValueError, r"^k_max must be a positive integer, not 0$"),
    ({"array": {"rows": 2}}, TypeError, r"^array must be an SparseConfig, not \{'rows': 2\}$"),
    # 16x16, m_max 16, int16: 512-byte A words; the link addresses 64 KiB.
    ({"array": SparseConfig(rows=16, cols=16, m_max=16, width=16), "k_max": 129}, ValueError,
     r"^k_max must be at most 128 for this array \(memory A has 512-byte words and the host "
     r"link addresses 65536 bytes\), not 129$"),
], design_id=SPARSE.design_id)


def test_sparse_top_word_sizes_and_round_trip():
    config = SparseTopConfig(design_id=SPARSE.design_id, array=ARRAY, divisor=8, k_max=64)
    # A: 2 rows x 8 x int8 = 128 bits; B: 3 x (8 + 3) + 1 = 34 bits; C: 3 x 20 bits.
    assert config.word_bits() == (128, 34, 60)
    assert config.word_bytes() == (16, 8, 8)
    assert SparseTopConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(TypeError, match=r"^config must be a SparseTopConfig, not 3$"):
        SparseBoardTop(3)


def test_sparse_memory_images_follow_the_documented_layout():
    """A word g holds each row's window of group g (M values, zeros to m_max),
    B word b one compressed beat (values, indices, group_end): decoded
    independently of the packer here."""
    config = SparseTopConfig(design_id=SPARSE.design_id, array=ARRAY, divisor=8, k_max=64)
    rng = np.random.default_rng(5)
    n, m, k = 2, 4, 10                      # a partial last group (rows 8, 9)
    a = rng.integers(-128, 128, (2, k))
    w = prune_nm(rng.integers(-128, 128, (k, 3)), n, m)
    mem_a, mem_b, groups, beats = sparse_tile_bytes(config, a, w, n, m)
    assert (groups, beats) == (3, 6)
    assert len(mem_a) == 3 * 16 and len(mem_b) == 6 * 8
    windows = unpack_bytes(vector_layout(8, 2 * 8), mem_a).reshape(3, 2, 8)
    padded = np.zeros((2, 12), np.int64)
    padded[:, :k] = a
    for g in range(3):
        assert np.array_equal(windows[g, :, :m], padded[:, g * m:(g + 1) * m])
        assert not windows[g, :, m:].any()
    values, indices = compress_nm(w, n, m)
    for b in range(beats):
        word = int.from_bytes(mem_b[8 * b:8 * b + 8], "little")
        data = [((word >> (8 * c)) & 0xFF) - (((word >> (8 * c + 7)) & 1) << 8) for c in range(3)]
        index = [(word >> (24 + 3 * c)) & 7 for c in range(3)]
        assert data == values[b].tolist() and index == indices[b].tolist()
        assert (word >> 33) == int(b % n == n - 1)
    assert sparse_run_args(3, 6) == b"\x03\x00\x06\x00"
    c = rng.integers(-2**19, 2**19, (2, 3))
    assert np.array_equal(sparse_result_from_bytes(config, pack_bytes(vector_layout(20, 3), c, stride=8)), c)


@pytest.mark.parametrize("a_shape, w, n, m, message", [
    ((2, 8), np.ones((8, 3), int), 2, 4,
     r"^W breaks the 2:4 pattern: weights are not 2:4 sparse: group 0 \(rows 0\.\.3\) of "
     r"column 0 has 4 non-zeros"),
    ((2, 8), np.zeros((8, 3), int), 2, 16, r"^m must be at most m_max = 8, not 16$"),
    ((2, 8), np.zeros((8, 3), int), 5, 4, r"^n must be in 1\.\.m = 4, not 5$"),
    ((3, 8), np.zeros((8, 3), int), 2, 4,
     r"^A is 3 x 8 and W is 8 x 3; the 2x3 array takes A as 2 x K and W as K x 3$"),
    ((2, 8), np.full((8, 3), 128), 8, 8, r"^W holds values in \[128, 128\]; int8 values"),
    ((2, 65), np.zeros((65, 3), int), 8, 8,
     r"^K = 65 at 8:8 is 72 compressed beats; this bitstream holds k_max = 64 "
     r"\(build with a larger --k-max\)$"),
])
def test_sparse_tile_bytes_rejects(a_shape, w, n, m, message):
    config = SparseTopConfig(design_id=SPARSE.design_id, array=ARRAY, divisor=8, k_max=64)
    with pytest.raises(ValueError, match=message):
        sparse_tile_bytes(config, np.zeros(a_shape, int), w, n, m)


@pytest.mark.parametrize("array", [
    ARRAY, dataclasses.replace(ARRAY, multiply_stages=3, multiplier_cell="ecp5")],
    ids=["1-multiply-stage", "ecp5-multipliers"])   # what ECP5 boards build
def test_sparse_board_top_over_uart_in_verilator(array, tmp_path):
    """Tiles at 2:4, 1:8 (partial last group; one beat, fewer than R), dense
    8:8 at K = k_max with -128 everywhere (saturates the 20-bit accumulators),
    3:8 with -128 x 127, each after a corrupted frame (rejected, the link goes
    on); results bit-exact, cycles = the array's cycle model + 1; bad RUNs
    (0 groups, 0 beats, beats or groups > k_max) rejected; RUNs whose counts
    disagree with B's group_end bits finish (no hang); then a good run."""
    config = SparseTopConfig(design_id=SPARSE.design_id, array=array, divisor=8, k_max=64)
    rng = np.random.default_rng(11)
    cases = [(2, 4, 20, None), (1, 8, 37, None), (1, 8, 3, None), (8, 8, 64, (-128, -128)),
             (3, 8, 24, (-128, 127))]
    arrays, patterns = {}, []
    for t, (n, m, k, extreme) in enumerate(cases):
        if extreme:
            a, w = np.full((2, k), extreme[0]), np.full((k, 3), extreme[1])
        else:
            a, w = rng.integers(-128, 128, (2, k)), rng.integers(-128, 128, (k, 3))
        arrays[f"a_{t}"], arrays[f"w_{t}"] = a, prune_nm(w, n, m)
        patterns.append([n, m])
    result = run_board_top(tmp_path, SparseBoardTop(config), config, "sparse_board_tb", arrays,
                           patterns=patterns, corrupt=True)
    assert result["design_id"] == SPARSE.design_id == 6
    tiles = result["tiles"]
    assert [t["match"] for t in tiles] == [True] * len(cases)
    assert [t["beats"] for t in tiles] == [10, 5, 1, 64, 9]
    assert [t["cycles"] for t in tiles] == [t["model_cycles"] for t in tiles]
    # One more compressed beat, one more cycle (the tiles are longer than R).
    assert tiles[3]["cycles"] - tiles[0]["cycles"] == 64 - 10
    assert result["corrupt_rejected"] == len(cases)
    assert result["bad_runs_rejected"] == [True] * 4 and result["works_after_errors"]
    assert result["short_b_cycles"] == tiles[2]["cycles"]       # both one beat
    assert result["long_b_cycles"] > 0


def test_sparse_board_cli_errors(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(2)
    np.save(tmp_path / "a.npy", rng.integers(-128, 128, (2, 8)).astype(np.int8))
    w = rng.integers(1, 100, (8, 3)).astype(np.int8)
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "w24.npy", prune_nm(w, 2, 4).astype(np.int8))
    run = ["run", "--board", "ulx3s-85f", "--port", "/dev/null", "sparse", "--a", "a.npy",
           "--out", "c.npy"]

    def error(argv):
        return cli_error(capsys, argv)

    assert "no build report at build-ulx3s-85f-sparse/report.json" in error(
        run + ["--b", "w.npy", "--n", "2", "--m", "4"])
    save_build_report(tmp_path, "sparse", SparseTopConfig(design_id=SPARSE.design_id, array=ARRAY,
                                                          divisor=8, k_max=64))
    assert "the following arguments are required: --n" in error(run + ["--b", "w.npy", "--m", "4"])
    assert "the following arguments are required: --b" in error(run + ["--n", "2", "--m", "4"])
    assert "--n 5 --m 4: n must be in 1..m = 4, not 5" in error(
        run + ["--b", "w.npy", "--n", "5", "--m", "4"])
    assert "--n 2 --m 16: m must be at most m_max = 8, not 16" in error(
        run + ["--b", "w.npy", "--n", "2", "--m", "16"])
    assert ("W breaks the 2:4 pattern: weights are not 2:4 sparse: group 0 (rows 0..3) "
            "of column 0 has 4 non-zeros") in error(run + ["--b", "w.npy", "--n", "2", "--m", "4"])
    assert "the 2x3 array takes A as 2 x K and W as K x 3" in error(
        run[:-4] + ["--a", "w.npy", "--b", "w24.npy", "--n", "2", "--m", "4", "--out", "c.npy"])
    # Pruned W passes every check; then the port (/dev/null) is no serial port.
    assert "/dev/null" in error(run + ["--b", "w24.npy", "--n", "2", "--m", "4"])
    assert not (tmp_path / "c.npy").exists()
    assert "--x is not a flag of design sparse" in error(
        run + ["--b", "w24.npy", "--n", "2", "--m", "4", "--x", "a.npy"])
    save_build_report(tmp_path, "systolic", {})
    assert "--n is not a flag of design systolic" in error(
        ["run", "--board", "ulx3s-85f", "--port", "/dev/null", "systolic", "--a", "a.npy",
         "--b", "a.npy", "--n", "2", "--out", "c.npy"])
    build_cmd = ["build", "--board", "ulx3s-85f", "--design", "sparse", "-o", str(tmp_path / "b")]
    assert "--dataflow is not a sparse config field" in error(build_cmd + ["--dataflow", "ws"])
    assert "m_max must be 2, 4, 8 or 16, not 3" in error(build_cmd + ["--m-max", "3"])
    assert "--mem-kib is not a flag of design sparse" in error(build_cmd + ["--mem-kib", "4"])
    assert "k_max must be at most 128 for this array (memory A has 512-byte words" in error(
        build_cmd + ["--rows", "16", "--cols", "16", "--m-max", "16", "--width", "16"])
    assert "--m-max is not a systolic config field" in error(
        ["build", "--board", "ulx3s-85f", "--design", "systolic", "--m-max", "4"])


class FakeSparseBoard(FakeBoard):
    """The sparse top's stand-in: memories A, B, C, and a RUN that reads A
    and B as the module doc of :mod:`bertforge.boards.sparse_top` lays them
    out (B decoded by hand, independently of the packer)."""

    def __init__(self, config, design_id=6, flip=False):
        super().__init__(config, design_id, flip, memories=3)

    def run(self, args):
        array = self.config.array
        rows, cols, mm = array.rows, array.cols, array.m_max
        groups, beats = int.from_bytes(args[:2], "little"), int.from_bytes(args[2:4], "little")
        a_bytes, b_bytes, c_bytes = self.config.word_bytes()
        windows = unpack_bytes(vector_layout(8, rows * mm), self.mems[0][:groups * a_bytes], a_bytes)
        acc, group = np.zeros((rows, cols), np.int64), 0
        for beat in range(beats):
            word = int.from_bytes(self.mems[1][beat * b_bytes:(beat + 1) * b_bytes], "little")
            for c in range(cols):
                value = ((word >> (8 * c)) & 0xFF) - (((word >> (8 * c + 7)) & 1) << 8)
                index = (word >> (8 * cols + 3 * c)) & 7
                acc[:, c] += windows[group].reshape(rows, mm)[:, index] * value
            group += (word >> (11 * cols)) & 1
        self.mems[2][:rows * c_bytes] = pack_bytes(vector_layout(array.acc_width, cols), acc,
                                                   stride=c_bytes)
        self.mems[2][0] ^= self.flip
        return (1234).to_bytes(4, "little")


@pytest.mark.parametrize("design_id, flip", [(6, False), (6, True), (1, False)])
def test_sparse_board_cli_run(design_id, flip, capsys, tmp_path, monkeypatch):
    """``bertforge run sparse`` against the stand-in board: C written as
    int32 and checked (--check; a wrong bit fails it), or a board running
    another design refused."""
    monkeypatch.chdir(tmp_path)
    config = SparseTopConfig(design_id=SPARSE.design_id, array=ARRAY, divisor=8, k_max=64)
    save_build_report(tmp_path, "sparse", config)
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (2, 13)).astype(np.int8)
    w = prune_nm(rng.integers(-128, 128, (13, 3)), 3, 8).astype(np.int8)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "w.npy", w)
    monkeypatch.setattr(board_design, "open_link", lambda port: FakeSparseBoard(config, design_id, flip))
    code = main(["run", "--board", "ulx3s-85f", "--port", "/dev/fake", "sparse", "--a", "a.npy",
                 "--b", "w.npy", "--n", "3", "--m", "8", "--out", "c.npy", "--check"])
    out, err = capsys.readouterr()
    if design_id != 6:
        assert code == 2 and not (tmp_path / "c.npy").exists()
        assert err.strip() == ("bertforge: error: the board on /dev/fake runs design 1, not the "
                               "sparse top (6); flash build first")
        return
    if not run_exit_checked(code, out, err, flip=flip, ran="ran 2x13x3 at 3:8", cycles=1234,
                            wrote="c.npy"):
        return
    c = np.load(tmp_path / "c.npy")
    values, indices = compress_nm(w, 3, 8)
    assert c.dtype == np.int32
    assert np.array_equal(c, nm_tile_golden(ARRAY, a, values, indices, 3, 8))
    assert np.array_equal(c, a.astype(np.int64) @ w.astype(np.int64))
