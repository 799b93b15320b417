"""Parameter validation of the systolic array: bad configs fail at
construction with the house messages, before reaching yosys or Verilator."""

import pytest

from config_helpers import ARRAY_ERRORS, config_tests, frozen_config_test
from bertforge.rtl.systolic import SystolicArray, SystolicConfig

test_bad_parameters, test_component_needs_a_config = config_tests(
    SystolicConfig, SystolicArray, ARRAY_ERRORS + [
    ({"dataflow": "xy"}, ValueError, r"^dataflow must be 'os' or 'ws', not 'xy'$"),
    ({"dataflow": 1}, TypeError, r"^dataflow must be a string, not 1$"),
    ({"width": "8"}, TypeError, r"^width must be an integer, not '8'$"),
    ({"multiply_stages": 4}, ValueError, r"^multiply_stages must be 1, 2 or 3, not 4$"),
    ({"multiply_stages": 0}, ValueError, r"^multiply_stages must be 1, 2 or 3, not 0$"),
    ({"multiplier_cell": "dsp48"}, ValueError,
     r"^multiplier_cell must be 'inferred' or 'ecp5', not 'dsp48'$"),
    ({"multiplier_cell": "ecp5"}, ValueError,
     r"^multiplier_cell 'ecp5' uses the MULT18X18D's input and output registers: "
     r"set multiply_stages to 2 or 3$"),
    ({"arith": "fp16"}, ValueError, r"^arith must be 'int', 'int8', 'int16' or 'bf16', not 'fp16'$"),
    ({"arith": 16}, TypeError, r"^arith must be a string, not 16$"),
    ({"arith": "bf16", "acc_width": 40}, ValueError,
     r"^acc_width must be 32 with arith 'bf16' \(sums are binary32\), not 40$"),
])


test_config_is_frozen_and_keyword_only = frozen_config_test(SystolicConfig, rows=3, cols=5)


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


def test_new_fields_stay_out_of_the_dict_at_their_defaults():
    """Configs from before multiply_stages keep their Verilog header and sidecar."""
    assert SystolicConfig(rows=2, cols=3).to_dict() == {
        "rows": 2, "cols": 3, "dataflow": "os", "width": 8, "acc_width": 32}
    config = SystolicConfig(multiply_stages=3, multiplier_cell="ecp5")
    assert SystolicConfig(**config.to_dict()) == config


@pytest.mark.parametrize("stages, cell, instances", [
    (1, "inferred", 0), (2, "inferred", 0), (3, "inferred", 0), (2, "ecp5", 6), (3, "ecp5", 6)])
def test_ecp5_cells_only_where_asked_and_only_for_dsp_pes(stages, cell, instances):
    """max_dsp 6 of 12 PEs: the other six multiply in logic, never in a cell."""
    from bertforge.generators.emit import emit_verilog
    config = SystolicConfig(rows=3, cols=4, max_dsp=6, multiply_stages=stages,
                            multiplier_cell=cell)
    text = emit_verilog(config, SystolicArray(config))
    assert text.count("MULT18X18D #(") == instances
    if instances:
        assert text.count(".REG_OUTPUT_CLK(\"CLK0\")") == instances


def test_arith_sets_the_width_and_int_formats_have_one_config():
    assert SystolicConfig(arith="int16") == SystolicConfig(width=16)
    assert SystolicConfig(arith="int8", width=16) == SystolicConfig(width=8)
    assert SystolicConfig(arith="int16").number_format == "int16"
    assert "arith" not in SystolicConfig(arith="int8").to_dict()
    config = SystolicConfig(rows=2, cols=3, arith="bf16")
    assert (config.width, config.number_format, config.name) == (16, "bf16", "systolic_2x3_os_bf16")
    assert config.to_dict()["arith"] == "bf16"
    assert SystolicConfig(**config.to_dict()) == config


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_bf16_ports_carry_bit_patterns(dataflow):
    array = SystolicArray(SystolicConfig(rows=2, cols=3, dataflow=dataflow, arith="bf16"))
    assert array.a.payload.data.shape().elem_shape.width == 16
    assert not array.a.payload.data.shape().elem_shape.signed
    assert array.c.payload.data.shape().elem_shape.width == 32
    assert not array.c.payload.data.shape().elem_shape.signed


def test_bf16_verilog_is_deterministic_and_uses_ecp5_cells_where_asked():
    from bertforge.generators.emit import emit_verilog
    config = SystolicConfig(rows=2, cols=2, arith="bf16", max_dsp=3, multiply_stages=3,
                            multiplier_cell="ecp5")
    text = emit_verilog(config, SystolicArray(config))
    again = SystolicConfig(**config.to_dict())
    assert text == emit_verilog(again, SystolicArray(again))
    assert text.count("MULT18X18D #(") == 3
