"""The N:M sparse GEMM engine on the GEMM board top (boards/gemm_top.py with
a SparseEngineConfig): config checks, the host's memory image and command,
``build``/``run --design sparse_engine``, and the whole top in Verilator over
the bit-level UART."""

import json

import numpy as np
import pytest

from bertforge.boards.gemm_top import (GemmBoardTop, GemmTopConfig, board_engine_config,
                                       engine_config_from_dict)
from bertforge.boards.gemm_host import gemm_board_layout, gemm_command_bytes, gemm_result_from_bytes
from bertforge.boards.targets import board
from bertforge.generators import board_design
from bertforge.generators.blocks import BLOCKS
from bertforge.generators.gemm_board import GEMM, SPARSE_ENGINE, engine_design, gemm_top_config
from bertforge.generators.cli import build_parser, main
from bertforge.rtl.gemm import GemmConfig, GemmEngine
from bertforge.rtl.payload import unpack
from bertforge.rtl.sparse_engine import (SparseEngine, SparseEngineConfig, pack_sparse_command,
                                         sparse_command_layout)
from bertforge.sim.gemm_golden import gemm_golden
from bertforge.sim.sparse_engine_golden import run_sparse_commands
from bertforge.sim.sparse_golden import compress_nm, prune_nm

from board_helpers import (FakeBoard, check_build_plan, cli_error, run_board_top, run_exit_checked,
                           save_build_report)

#: The tested engine: 2x2, groups up to 4, 32-bit memory words, 2 KiB, 8-element K chunks.
ENGINE = board_engine_config(rows=2, cols=2, mem_kib=2, k_chunk=8, sparse=True, m_max=4)


def _config(**fields):
    return GemmTopConfig(**{"design_id": SPARSE_ENGINE.design_id, "engine": ENGINE,
                            "divisor": 4, **fields})


def test_sparse_engine_top_config():
    config = _config()
    assert isinstance(config.engine, SparseEngineConfig) and config.sparse
    assert (config.engine.mem_width, config.engine.m_max, config.engine.addr_width) == (32, 4, 11)
    assert config.command_layout == sparse_command_layout(ENGINE)
    assert config.command_bytes == (sparse_command_layout(ENGINE).size + 7) // 8
    assert isinstance(config.make_engine(), SparseEngine)
    assert config.name == "board_sparse_engine_2x2_m4"
    assert GemmTopConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    dense = GemmTopConfig(design_id=GEMM.design_id, engine=board_engine_config(rows=2, cols=2))
    assert type(engine_config_from_dict(dense.engine.to_dict())) is GemmConfig
    assert not dense.sparse and isinstance(dense.make_engine(), GemmEngine)
    # m_max 16 at int8 needs 128-bit memory words (a group's activations in one word)
    assert board_engine_config(rows=2, cols=2, sparse=True, m_max=16).mem_width == 128
    with pytest.raises(ValueError, match=r"^max_dsp must be None for the sparse engine \(its "
                                         r"array has no DSP limit\), not 4$"):
        _config(max_dsp=4)


def _problem(rng, m, k, n, pattern):
    return rng.integers(-128, 128, (m, k)), prune_nm(rng.integers(-128, 128, (k, n)), *pattern)


@pytest.mark.parametrize("pattern, flags", [((2, 4), {}), ((1, 2), {"int8": True, "multiplier": 3,
                                                                    "shift": 6})])
def test_sparse_layout_runs_on_the_golden_engine(pattern, flags):
    """The host's image holds A, then W's compressed values and indices, then
    room for C; the sparse engine's golden model run on it with the command
    gives the dense product of A and W (requantized with int8)."""
    rng = np.random.default_rng(7)
    a, w = _problem(rng, 3, 11, 5, pattern)
    config = _config()
    image, command = gemm_board_layout(config, a, w, **flags, pattern=pattern)
    values, indices = compress_nm(w, *pattern)
    rows = values.shape[0]
    assert rows == -(-11 // pattern[1]) * pattern[0]
    assert (command["pat_n"], command["pat_m"]) == pattern
    assert command["b_addr"] % 4 == 0 and command["idx_addr"] % 4 == 0
    view = np.frombuffer(image, dtype=np.uint8)
    b, i = command["b_addr"], command["idx_addr"]
    assert np.array_equal(view[b:b + rows * 5].view(np.int8).reshape(rows, 5), values)
    assert np.array_equal(view[i:i + rows * 5].reshape(rows, 5), indices)
    assert len(image) == command["c_addr"] >= i + rows * 5
    memory = np.zeros(1 << ENGINE.addr_width, dtype=np.uint8)
    memory[:len(image)] = view
    assert run_sparse_commands(ENGINE, memory, [command]) == [False]
    c, size = command["c_addr"], command["m"] * command["c_stride"]
    result = gemm_result_from_bytes(command, memory[c:c + size].tobytes())
    assert np.array_equal(result, gemm_golden(ENGINE, a, w, **flags))
    packed = gemm_command_bytes(config, command)
    assert int.from_bytes(packed, "little") == pack_sparse_command(ENGINE, command)
    assert len(packed) == config.command_bytes


@pytest.mark.parametrize("pattern, w, message", [
    (None, np.zeros((8, 2), int),
     r"^this bitstream's engine is N:M sparse: give the pattern of W$"),
    ((2, 3), np.zeros((8, 2), int), r"^the sparse engine takes M a power of two, not 2:3$"),
    ((2, 8), np.zeros((8, 2), int), r"^m must be at most m_max = 4, not 8$"),
    ((2, 4), np.ones((8, 2), int), r"^W breaks the 2:4 pattern: weights are not 2:4 sparse: "
                                   r"group 0 \(rows 0\.\.3\) of column 0 has 4 non-zeros"),
    ((2, 4), np.zeros((800, 2), int), r"^A, B and C need \d+ bytes; the board memory holds 2048"),
    ((2,), np.zeros((8, 2), int), r"^the pattern of W is two numbers \(N, M\), not \(2,\)$"),
])
def test_sparse_layout_rejects(pattern, w, message):
    with pytest.raises(ValueError, match=message):
        gemm_board_layout(_config(), np.zeros((2, w.shape[0]), int), w, pattern=pattern)


def test_dense_layout_takes_no_pattern():
    config = GemmTopConfig(design_id=GEMM.design_id, engine=board_engine_config(rows=2, cols=2))
    with pytest.raises(ValueError, match=r"^this bitstream's engine is dense: it takes no N:M "
                                         r"pattern, not \(2, 4\)$"):
        gemm_board_layout(config, np.zeros((2, 4), int), np.zeros((4, 2), int), pattern=(2, 4))


def _build_args(*flags):
    return build_parser().parse_args(["build", "--board", "ulx3s-85f", "--design", "sparse_engine",
                                      *flags])


def test_build_design_makes_the_sparse_engine_top():
    """``build --design sparse_engine``: the GEMM top around a sparse engine
    of the family's default size, its own design id, no DSP limit and the
    ECP5 multiply fields (registered MULT18X18Ds, as the dense engine's);
    its build plan holds the engine; a sweep point's sparse engine maps to
    the same design."""
    target = board("ulx3s-85f")
    config = SPARSE_ENGINE.top_config(BLOCKS["sparse_engine"],
                                      _build_args("--rows", "4", "--cols", "4", "--m-max", "4"),
                                      100.0, target)
    assert config.design_id == SPARSE_ENGINE.design_id == 8 and config.sparse
    assert config.max_dsp is None
    assert (config.engine.multiply_stages, config.engine.multiplier_cell) == (3, "ecp5")
    assert config.engine.sparse.multiply_stages == 3
    assert (config.engine.rows, config.engine.m_max, config.engine.addr_width) == (4, 4, 15)
    assert SPARSE_ENGINE.per_cycle(config) == 16
    assert SPARSE_ENGINE.top(config).config is config
    assert engine_design(config) is SPARSE_ENGINE
    assert gemm_top_config(target, 100.0, engine=config.engine) == config
    assert engine_design(gemm_top_config(target, 100.0)) is GEMM
    default = SPARSE_ENGINE.top_config(BLOCKS["sparse_engine"], _build_args(), 100.0, target)
    assert default.engine.m_max == SparseEngineConfig.m_max and default.engine.mem_width == 64
    check_build_plan("ulx3s-85f", GemmBoardTop(_config()), "engine")


def test_sparse_engine_cli_errors(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build = ["build", "--board", "ulx3s-85f", "--design", "sparse_engine", "-o", "b"]
    assert "--max-dsp is not a sparse_engine config field" in cli_error(
        capsys, build + ["--max-dsp", "4"])
    assert "m_max must be 2, 4, 8 or 16, not 3" in cli_error(capsys, build + ["--m-max", "3"])
    assert "dataflow must be 'os' for the sparse engine, not 'ws'" in cli_error(
        capsys, build + ["--dataflow", "ws"])
    assert "--mem-kib must be between 1 and 64, not 0" in cli_error(
        capsys, build + ["--mem-kib", "0"])
    assert "--k-max is not a flag of design sparse_engine" in cli_error(
        capsys, build + ["--k-max", "4"])
    np.save("a.npy", np.ones((2, 8), np.int8))
    np.save("w.npy", np.ones((8, 2), np.int8))
    run = ["run", "--board", "ulx3s-85f", "--port", "/dev/null", "sparse_engine", "--a", "a.npy",
           "--b", "w.npy", "--out", "c.npy"]
    save_build_report(tmp_path, "sparse_engine", _config())
    assert "the following arguments are required: --n, --m" in cli_error(capsys, run)
    assert "W breaks the 2:4 pattern" in cli_error(capsys, run + ["--n", "2", "--m", "4"])
    assert "m must be at most m_max = 4, not 8" in cli_error(capsys, run + ["--n", "2", "--m", "8"])
    assert "--x is not a flag of design sparse_engine" in cli_error(
        capsys, run + ["--n", "4", "--m", "4", "--x", "a.npy"])
    assert not (tmp_path / "c.npy").exists()


class FakeEngineBoard(FakeBoard):
    """The GEMM top's stand-in: data memory 0, command register 1, a RUN
    that runs the packed command on the sparse engine's golden model."""

    def __init__(self, config, design_id, flip=False):
        super().__init__(config, design_id, flip, memories=2)

    def run(self, args):
        engine = self.config.engine
        raw = int.from_bytes(self.mems[1][:self.config.command_bytes], "little")
        command = unpack(sparse_command_layout(engine), raw)
        memory = np.frombuffer(self.mems[0], dtype=np.uint8)[:1 << engine.addr_width].copy()
        run_sparse_commands(engine, memory, [command])
        memory[command["c_addr"]] ^= int(self.flip)
        self.mems[0][:len(memory)] = memory.tobytes()
        return (4321).to_bytes(4, "little")


@pytest.mark.parametrize("design_id, flip", [(8, False), (8, True), (2, False)])
def test_sparse_engine_cli_run(design_id, flip, capsys, tmp_path, monkeypatch):
    """``bertforge run sparse_engine`` against the stand-in board: the packed
    command and image give C (int8, requantized) equal to the dense product
    (--check; a wrong bit fails it); a board running the dense GEMM top is
    refused."""
    monkeypatch.chdir(tmp_path)
    config = _config()
    save_build_report(tmp_path, "sparse_engine", config)
    rng = np.random.default_rng(5)
    a, w = _problem(rng, 3, 13, 3, (1, 4))
    np.save("a.npy", a.astype(np.int8))
    np.save("w.npy", w.astype(np.int8))
    monkeypatch.setattr(board_design, "open_link",
                        lambda port: FakeEngineBoard(config, design_id, flip))
    code = main(["run", "--board", "ulx3s-85f", "--port", "/dev/fake", "sparse_engine",
                 "--a", "a.npy", "--b", "w.npy", "--n", "1", "--m", "4", "--int8",
                 "--multiplier", "5", "--shift", "7", "--out", "c.npy", "--check"])
    out, err = capsys.readouterr()
    if design_id != 8:
        assert code == 2 and err.strip() == (
            "bertforge: error: the board on /dev/fake runs design 2, not the sparse_engine top "
            "(8); flash build first")
        return
    if not run_exit_checked(code, out, err, flip=flip, ran="ran 3x13x3 at 1:4", cycles=4321,
                            wrote="c.npy"):
        return
    c = np.load("c.npy")
    assert c.dtype == np.int8
    assert np.array_equal(c, gemm_golden(ENGINE, a, w, int8=True, multiplier=5, shift=7))


def test_sparse_engine_board_top_over_uart_in_verilator(tmp_path):
    """Random sparse GEMMs through the UART link (the GEMM top's testbench),
    a corrupted frame before each (rejected, the link goes on): 2:4 over two
    K chunks with a partial last group and an edge tile, 1:4 of one
    element, dense 4:4 int8 at both saturation limits, 1:2 int8
    requantized, 1:4 of -128 x -128; bit-exact against the sparse engine's
    golden model, reply cycles equal the engine's cycle model (every
    problem is compute bound: one block of rows, one panel). Then bad
    patterns (M not a power of two, N = 0, N > M) and indices outside
    memory rejected, then a good run."""
    config = _config()
    rng = np.random.default_rng(13)
    cases = [(2, 11, 3, (2, 4), {}), (1, 1, 1, (1, 4), {}),
             (1, 8, 4, (4, 4), {"int8": True, "multiplier": 1, "shift": 0}),
             (2, 10, 3, (1, 2), {"int8": True, "multiplier": 3, "shift": 4}),
             (2, 12, 4, (1, 4), {})]
    arrays, flags = {}, []
    for index, (m, k, n, pattern, flag) in enumerate(cases):
        arrays[f"a_{index}"], arrays[f"b_{index}"] = _problem(rng, m, k, n, pattern)
        flags.append(dict(flag, pattern=list(pattern)))
    arrays["a_2"][0] = 127
    arrays["b_2"][:, 0], arrays["b_2"][:, 1] = 127, -128     # C saturates to 127 and -128
    arrays["a_4"][:] = -128
    arrays["b_4"] = prune_nm(np.full((12, 4), -128), 1, 4)
    bad = [{"pat_m": 3}, {"pat_n": 0}, {"pat_n": 5}, {"idx_addr": (1 << ENGINE.addr_width) - 1}]
    result = run_board_top(tmp_path, GemmBoardTop(config), config, "gemm_board_tb", arrays,
                           flags=flags, corrupt=True, bad=bad, cycles=True)
    problems = result["problems"]
    assert result["design_id"] == SPARSE_ENGINE.design_id
    assert [p["match"] for p in problems] == [True] * len(cases)
    assert all(p["model_exact"] for p in problems)
    assert [p["cycles"] for p in problems] == [p["model_cycles"] for p in problems]
    assert result["corrupt_rejected"] == len(cases)
    assert result["bad_rejected"] == [True] * len(bad) and result["works_after_errors"]
