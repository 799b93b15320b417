"""Parameter validation of the systolic array: bad configs fail at
construction with the house messages, before reaching yosys or Verilator."""

import pytest

from bertforge.rtl.systolic import SystolicArray, SystolicConfig


@pytest.mark.parametrize("fields, error, message", [
    ({"rows": 0}, ValueError, r"^rows must be a positive integer, not 0$"),
    ({"cols": -3}, ValueError, r"^cols must be a positive integer, not -3$"),
    ({"rows": "4"}, TypeError, r"^rows must be an integer, not '4'$"),
    ({"cols": 2.0}, TypeError, r"^cols must be an integer, not 2\.0$"),
    ({"rows": True}, TypeError, r"^rows must be an integer, not True$"),
    ({"rows": 257}, ValueError, r"^rows must be an integer <= 256, not 257$"),
    ({"dataflow": "xy"}, ValueError, r"^dataflow must be 'os' or 'ws', not 'xy'$"),
    ({"dataflow": 1}, TypeError, r"^dataflow must be a string, not 1$"),
    ({"width": 7}, ValueError, r"^width must be 8 or 16, not 7$"),
    ({"width": "8"}, TypeError, r"^width must be an integer, not '8'$"),
    ({"acc_width": 15}, ValueError, r"^acc_width must be an integer >= 16, not 15$"),
    ({"width": 16, "acc_width": 24}, ValueError, r"^acc_width must be an integer >= 32, not 24$"),
    ({"acc_width": 49}, ValueError, r"^acc_width must be an integer <= 48, not 49$"),
    ({"max_dsp": -1}, ValueError, r"^max_dsp must be a non-negative integer, not -1$"),
    ({"max_dsp": 2.5}, TypeError, r"^max_dsp must be an integer, not 2\.5$"),
])
def test_bad_config_fails_at_construction(fields, error, message):
    with pytest.raises(error, match=message):
        SystolicConfig(**fields)


def test_component_takes_only_a_config():
    with pytest.raises(TypeError, match=r"^config must be a SystolicConfig, not \{'rows': 2\}$"):
        SystolicArray({"rows": 2})


def test_config_is_frozen_and_keyword_only():
    config = SystolicConfig(rows=3, cols=5)
    with pytest.raises(Exception):
        config.rows = 4
    with pytest.raises(TypeError):
        SystolicConfig(3, 5)


@pytest.mark.parametrize("rows, cols, dataflow", [(1, 1, "os"), (3, 5, "ws"), (7, 2, "os")])
def test_ports_follow_the_config(rows, cols, dataflow):
    array = SystolicArray(SystolicConfig(rows=rows, cols=cols, dataflow=dataflow, width=16,
                                         acc_width=40))
    assert array.a.payload.data.shape().length == rows
    assert array.b.payload.shape().length == cols
    assert array.c.payload.data.shape().length == cols
    assert array.c.payload.data.shape().elem_shape.width == 40
    assert config_name(rows, cols, dataflow) == array.config.name


def config_name(rows, cols, dataflow):
    return f"systolic_{rows}x{cols}_{dataflow}"
