"""Parameter validation of the N:M sparse array: bad configs fail at
construction with the house messages; ports follow the config; the Verilog
is deterministic."""

import pytest

from bertforge.generators.emit import emit_verilog
from bertforge.rtl.sparse import SparseArray, SparseConfig


@pytest.mark.parametrize("fields, error, message", [
    ({"rows": 0}, ValueError, r"^rows must be a positive integer, not 0$"),
    ({"cols": -3}, ValueError, r"^cols must be a positive integer, not -3$"),
    ({"rows": "4"}, TypeError, r"^rows must be an integer, not '4'$"),
    ({"cols": 2.0}, TypeError, r"^cols must be an integer, not 2\.0$"),
    ({"rows": True}, TypeError, r"^rows must be an integer, not True$"),
    ({"rows": 257}, ValueError, r"^rows must be an integer <= 256, not 257$"),
    ({"m_max": 3}, ValueError, r"^m_max must be 2, 4, 8 or 16, not 3$"),
    ({"m_max": 32}, ValueError, r"^m_max must be 2, 4, 8 or 16, not 32$"),
    ({"m_max": "8"}, TypeError, r"^m_max must be an integer, not '8'$"),
    ({"width": 7}, ValueError, r"^width must be 8 or 16, not 7$"),
    ({"acc_width": 15}, ValueError, r"^acc_width must be an integer >= 16, not 15$"),
    ({"width": 16, "acc_width": 24}, ValueError, r"^acc_width must be an integer >= 32, not 24$"),
    ({"acc_width": 49}, ValueError, r"^acc_width must be an integer <= 48, not 49$"),
    ({"max_dsp": -1}, ValueError, r"^max_dsp must be a non-negative integer, not -1$"),
    ({"max_dsp": 2.5}, TypeError, r"^max_dsp must be an integer, not 2\.5$"),
])
def test_bad_config_fails_at_construction(fields, error, message):
    with pytest.raises(error, match=message):
        SparseConfig(**fields)


def test_component_takes_only_a_config():
    with pytest.raises(TypeError, match=r"^config must be an SparseConfig, not \{'rows': 2\}$"):
        SparseArray({"rows": 2})


def test_config_is_frozen_and_keyword_only():
    config = SparseConfig(rows=3, cols=5)
    with pytest.raises(Exception):
        config.rows = 4
    with pytest.raises(TypeError):
        SparseConfig(3, 5)


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
    first = emit_verilog(config)
    assert first == emit_verilog(SparseConfig(rows=2, cols=3, m_max=4))
    assert "module sparse_2x3_m4" in first
    assert '"m_max": 4' in first.splitlines()[1]
