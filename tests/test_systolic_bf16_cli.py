"""``bertforge sim systolic --arith bf16``: float32 files in (rounded to
bf16, with a note), float32 out, bit-exact against the golden model, the
error against float64 reported; bad input ends with one line. Uses the
2x3 WS bf16 model the Verilator tests build."""

import json

import ml_dtypes
import numpy as np
import pytest

from cli_helpers import assert_one_line_error, npy_flags, run_cli
from bertforge.rtl.systolic import SystolicConfig
from bertforge.sim.systolic_golden import systolic_golden

FLAGS = ["sim", "systolic", "--rows", "2", "--cols", "3", "--dataflow", "ws", "--arith", "bf16"]


def test_float32_files_in_float32_out(tmp_path):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 2)).astype(np.float32)
    a[0, 0] = 1.0                                    # exact in bf16
    b = rng.standard_normal((2, 3)).astype(np.float32)
    result = run_cli(*FLAGS, *npy_flags(tmp_path, a=a, b=b), "--json")
    assert result.returncode == 0, result.stderr
    assert "note: A converted from float32 to bfloat16 (round to nearest even): 13 of 14 values " \
           "changed" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["match"] and summary["cycles"] == summary["model_cycles"]
    assert summary["max_err_to_bound"] <= 1 and summary["max_abs_err_vs_float64"] >= 0
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.float32
    config = SystolicConfig(rows=2, cols=3, dataflow="ws", arith="bf16")
    expected = systolic_golden(config, a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16))
    assert np.array_equal(c.view(np.uint32), expected.view(np.uint32))
    assert np.max(np.abs(c - a.astype(np.float64) @ b)) < 0.05    # bf16 inputs: ~2**-8 relative


@pytest.mark.parametrize("a, message", [
    (np.ones((4, 2), dtype=np.int8), "A file {dir}/a.npy holds int8 values; with --arith bf16 it "
                                     "must hold floats (float32)"),
    (np.ones((4, 3), dtype=np.float32), "A is 4 x 3 and B is 2 x 3; a WS 2x3 array takes "
                                        "A as K x 2 and B as 2 x 3"),
    (np.ones(4, dtype=np.float32), "A file {dir}/a.npy has shape (4,); it must have 2 dimensions"),
])
def test_bad_files_end_with_one_line(tmp_path, a, message):
    result = run_cli(*FLAGS, *npy_flags(tmp_path, a=a, b=np.ones((2, 3), dtype=np.float32)))
    assert_one_line_error(result, message.format(dir=tmp_path))
    assert not (tmp_path / "c.npy").exists()


def test_unknown_format_ends_with_one_line():
    result = run_cli("sim", "systolic", "--arith", "fp8", "--k", "4")
    assert_one_line_error(result, "arith must be 'int', 'int8', 'int16' or 'bf16', not 'fp8'")
