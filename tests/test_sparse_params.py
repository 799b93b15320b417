"""Parameter validation of the N:M sparse array: bad configs fail at
construction with the house messages; ports follow the config; the Verilog
is deterministic."""

import pytest

from config_helpers import ARRAY_ERRORS, config_tests, frozen_config_test
from bertforge.generators.emit import emit_verilog
from bertforge.rtl.sparse import SparseArray, SparseConfig

test_bad_parameters, test_component_needs_a_config = config_tests(
    SparseConfig, SparseArray, ARRAY_ERRORS + [
    ({"m_max": 3}, ValueError, r"^m_max must be 2, 4, 8 or 16, not 3$"),
    ({"m_max": 32}, ValueError, r"^m_max must be 2, 4, 8 or 16, not 32$"),
    ({"m_max": "8"}, TypeError, r"^m_max must be an integer, not '8'$"),
    ({"multiply_stages": 4}, ValueError, r"^multiply_stages must be 1, 2 or 3, not 4$"),
    ({"multiplier_cell": "ecp5"}, ValueError,
     r"^multiplier_cell 'ecp5' uses the MULT18X18D's input and output registers: set multiply_stages to 2 or 3$"),
    ({"multiplier_cell": "dsp48"}, ValueError, r"^multiplier_cell must be 'inferred' or 'ecp5', not 'dsp48'$"),
], article="an")


test_config_is_frozen_and_keyword_only = frozen_config_test(SparseConfig, rows=3, cols=5)


@pytest.mark.parametrize("rows, cols, m_max, bits", [(1, 1, 2, 1), (3, 5, 8, 3), (2, 7, 16, 4)])
def test_ports_follow_the_config(rows, cols, m_max, bits):
    config = SparseConfig(rows=rows, cols=cols, m_max=m_max, width=16, acc_width=40)
    array = SparseArray(config)
    window = array.a.payload.data.shape()
    assert window.length == rows and window.elem_shape.length == m_max
    assert array.b.payload.data.shape().length == cols
    assert array.b.payload.index.shape().elem_shape.width == bits == config.index_bits
    assert array.c.payload.data.shape().length == cols
    assert array.c.payload.data.shape().elem_shape.width == 40
    assert config.name == f"sparse_{rows}x{cols}_m{m_max}"


def test_verilog_is_deterministic():
    config = SparseConfig(rows=2, cols=3, m_max=4)
    first = emit_verilog(config, SparseArray(config))
    again = SparseConfig(rows=2, cols=3, m_max=4)
    assert first == emit_verilog(again, SparseArray(again))
    assert "module sparse_2x3_m4" in first
    assert '"m_max": 4' in first.splitlines()[1]
