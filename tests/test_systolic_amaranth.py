"""Fast unit test of the whole SystolicArray in amaranth.sim (no Verilator):
a few tiles back to back in both dataflows, int8 and bf16, against the
golden model."""

import ml_dtypes
import numpy as np
import pytest
from amaranth.back import verilog

from bertforge.rtl.arith import exact_sum_width
from bertforge.rtl.errors import BertforgeError
from bertforge.rtl.systolic import SystolicArray, SystolicConfig, pe_arith
from bertforge.sim.stream_sim import run_streams
from bertforge.sim.systolic_golden import operand_words, result_words, systolic_golden


def beats(config, tiles):
    a_beats, b_beats = [], []
    for a, b in tiles:
        a, b = operand_words(config, a), operand_words(config, b)
        if config.dataflow == "os":
            k = a.shape[1]
            a_beats += [(a[:, i].tolist(), i == k - 1) for i in range(k)]
            b_beats += [b[i].tolist() for i in range(k)]
        else:
            k = a.shape[0]
            a_beats += [(a[i].tolist(), i == k - 1) for i in range(k)]
            b_beats += [b[i].tolist() for i in range(config.rows)]
    return a_beats, b_beats


def check_tiles(dut, tiles):
    """Runs ``tiles`` back to back through ``dut`` and checks ``c`` against
    the golden model; returns the expected result words."""
    config = dut.config
    a_beats, b_beats = beats(config, tiles)
    expected = np.concatenate([result_words(config, systolic_golden(config, a, b))
                               for a, b in tiles])
    received, _ = run_streams(
        dut, {"a": [{"data": data, "last": last} for data, last in a_beats], "b": b_beats},
        {"c": len(expected)}, max_cycles=500)
    assert np.array_equal(np.array([row["data"] for row in received["c"]]), expected)
    return expected


@pytest.mark.parametrize("arith", ["int8", "bf16"])
@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_tiles_back_to_back(dataflow, arith):
    config = SystolicConfig(rows=2, cols=3, dataflow=dataflow, arith=arith)
    dut = SystolicArray(config)
    rng = np.random.default_rng(3)
    shapes = {"os": lambda k: ((2, k), (k, 3)), "ws": lambda k: ((k, 2), (2, 3))}[dataflow]
    tiles = []
    for k in (1, 4, 2, 5):
        sa, sb = shapes(k)
        if arith == "bf16":
            tiles.append((rng.standard_normal(sa).astype(ml_dtypes.bfloat16),
                          (rng.standard_normal(sb) * 1e3).astype(ml_dtypes.bfloat16)))
        else:
            tiles.append((rng.integers(-128, 128, sa), rng.integers(-128, 128, sb)))
    check_tiles(dut, tiles)


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_exact_sums_of_at_most_sum_terms_products(dataflow):
    """With ``sum_terms`` (OS) or always (WS: a column's ``rows``
    products) the PEs hold sums in just the bits that many
    products need and do not saturate: the extremes (every product
    (-128)**2, or -128 * 127) and random tiles of up to ``sum_terms`` beats
    still equal the golden model, sign-extended on ``c``."""
    config = SystolicConfig(rows=2, cols=3, dataflow=dataflow, arith="int8")
    terms = 5 if dataflow == "os" else config.rows
    dut = SystolicArray(config, sum_terms=5) if dataflow == "os" else SystolicArray(config)
    rng = np.random.default_rng(5)
    shapes = {"os": lambda k: ((2, k), (k, 3)), "ws": lambda k: ((k, 2), (2, 3))}[dataflow]
    lo, hi = np.iinfo(np.int8).min, np.iinfo(np.int8).max
    tiles = []
    for k, a_value, b_value in ((5, lo, lo), (5, lo, hi), (3, hi, lo), (5, None, None)):
        sa, sb = shapes(k)
        if a_value is None:
            tiles.append((rng.integers(-128, 128, sa), rng.integers(-128, 128, sb)))
        else:
            tiles.append((np.full(sa, a_value), np.full(sb, b_value)))
    expected = check_tiles(dut, tiles)
    top = terms * 128 * 128     # the largest sum: it needs every bit
    assert expected.max() == top
    assert exact_sum_width(8, terms) == top.bit_length() + 1 < config.acc_width
    for logic in (False, True):     # the PEs' sums are that narrow
        assert pe_arith(config, logic=logic, terms=terms).acc_shape.width == top.bit_length() + 1
    text = verilog.convert(dut, name="array", emit_src=False)
    assert f"reg [{top.bit_length()}:0] pe_1_2_{'acc' if dataflow == 'os' else 'psum'} " in text


def test_ws_int16_sums_keep_saturating():
    """Two int16 products reach 2 * (-32768)**2 = 2**31, past int32: a 2-row
    WS array keeps its 32-bit saturating sums, and the extremes clamp."""
    config = SystolicConfig(rows=2, cols=3, dataflow="ws", arith="int16")
    dut = SystolicArray(config)
    lo = np.iinfo(np.int16).min
    expected = check_tiles(dut, [(np.full((3, 2), lo), np.full((2, 3), lo))])
    assert expected.max() == (1 << 31) - 1
    assert "reg [31:0] pe_1_2_psum " in verilog.convert(dut, name="array", emit_src=False)


def test_exact_sum_width_is_the_width_of_the_extreme_sums():
    """Exhaustively for 3-bit operands: ``exact_sum_width`` holds every sum
    of ``terms`` products, and one bit fewer does not."""
    products = [a * b for a in range(-4, 4) for b in range(-4, 4)]
    for terms in range(1, 10):
        bits = exact_sum_width(3, terms)
        most, least = terms * max(products), terms * min(products)
        assert -(1 << (bits - 1)) <= least and most < 1 << (bits - 1)
        assert most >= 1 << (bits - 2)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True])
def test_sum_terms_must_be_a_positive_integer(bad):
    with pytest.raises(BertforgeError, match="sum_terms"):
        SystolicArray(SystolicConfig(rows=2, cols=2), sum_terms=bad)
