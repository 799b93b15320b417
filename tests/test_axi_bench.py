"""``bertforge bench axi``: the designs it builds out of context (the board
build's ECP5 multiply fields), the LUT overhead it reports, its bad
flags. The builds themselves run in the benchmark, not here."""

import argparse

import pytest
from cli_helpers import assert_one_line_error, run_cli

from bertforge.boards.targets import ARRAY_MULTIPLY
from bertforge.generators import axi_bench
from bertforge.generators.cli_common import CliError


def test_designs_are_the_board_builds_engines():
    for size in (4, 8):
        stream = axi_bench.design_config(f"gemm-{size}x{size}-stream")
        assert stream == axi_bench.design_config(f"gemm-{size}x{size}-axi4")
        assert (stream.rows, stream.cols) == (size, size)
        assert stream.multiply_stages == ARRAY_MULTIPLY["ecp5"]["multiply_stages"]
        assert stream.multiplier_cell == "ecp5"


def _row(design, bus, luts, ffs):
    return {"design": design, "bus": bus, "resources": {"LUTs": {"used": luts}, "FFs": {"used": ffs}}}


def test_overhead_against_the_stream_engine():
    rows = [_row("gemm-4x4-stream", "stream", 1000, 2000), _row("gemm-4x4-axi4", "axi4", 1040, 2300),
            _row("gemm-8x8-axi4", "axi4", 5000, 6000)]     # no stream build: no overhead
    axi_bench._overheads(rows)
    assert rows[1]["lut_overhead"] == 40 and rows[1]["lut_overhead_percent"] == 4.0
    assert rows[1]["ff_overhead"] == 300 and rows[1]["lut_overhead_within_bound"]
    assert "lut_overhead" not in rows[0] and "lut_overhead" not in rows[2]
    rows[1]["resources"]["LUTs"]["used"] = 1060
    axi_bench._overheads(rows)
    assert not rows[1]["lut_overhead_within_bound"]
    assert axi_bench._overhead(rows[1]) == "+60 (+6.0%)"


def test_bad_flags(tmp_path):
    assert_one_line_error(run_cli("bench", "axi", "--designs", "gemm-3x3-axi4", "--out", str(tmp_path)),
                          "unknown design 'gemm-3x3-axi4' for bench axi; designs: "
                          + ", ".join(axi_bench.DESIGNS))
    args = argparse.Namespace(rebuild=True, reuse_only=True, designs="gemm-4x4-axi4", out=str(tmp_path))
    with pytest.raises(CliError, match=r"^--rebuild and --reuse-only contradict each other: give one$"):
        axi_bench.run_bench(args)
    assert not any(tmp_path.iterdir())
