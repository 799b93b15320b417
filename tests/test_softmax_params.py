"""Softmax parameters: bad configs and scales fail with the house messages,
a scale becomes a 16-bit multiplier and shift, and the emitted Verilog is
deterministic."""

import math

import pytest

from bertforge.generators.emit import emit_verilog
from bertforge.rtl.softmax import Softmax, SoftmaxConfig, softmax_scale

from config_helpers import config_tests, positive_int_errors


test_bad_parameters, test_component_needs_a_config = config_tests(
    SoftmaxConfig, Softmax, positive_int_errors("lanes", 64) + [
    ({"l_max": 0}, ValueError, r"^l_max must be a positive integer, not 0$"),
    ({"l_max": 4097}, ValueError, r"^l_max must be an integer <= 4096, not 4097$"),
    ({"l_max": "128"}, TypeError, r"^l_max must be an integer, not '128'$"),
    ({"in_width": 8}, ValueError, r"^in_width must be 32 or 16, not 8$"),
    ({"in_width": True}, TypeError, r"^in_width must be an integer, not True$"),
    ({"out_width": 32}, ValueError, r"^out_width must be 8 or 16, not 32$"),
    ({"mask": 1}, TypeError, r"^mask must be a bool, not 1$"),
])


@pytest.mark.parametrize("scale, error, message", [
    (0.0, ValueError, r"^scale must be a positive finite number, not 0\.0$"),
    (-1e-3, ValueError, r"^scale must be a positive finite number, not -0\.001$"),
    (math.inf, ValueError, r"^scale must be a positive finite number, not inf$"),
    (100.0, ValueError, r"^scale must be at most 11\.09, not 100\.0$"),
    (1e-30, ValueError, r"^scale must be at least .*, not 1e-30$"),
    ("1", TypeError, r"^scale must be a number, not '1'$"),
])
def test_bad_scales(scale, error, message):
    with pytest.raises(error, match=message):
        softmax_scale(scale)


@pytest.mark.parametrize("scale", [1e-12, 1e-6, 1e-4, 3.7e-3, 0.1, 1.0, 11.0])
def test_scale_is_a_16_bit_multiplier_within_2_to_minus_16(scale):
    multiplier, shift = softmax_scale(scale)
    assert 1 << 15 <= multiplier < 1 << 16 and 0 <= shift < 64
    target = scale * math.log2(math.e) * 4096
    assert abs(multiplier * 2.0 ** -shift / target - 1) <= 2.0 ** -16


def test_emission_is_deterministic():
    config = SoftmaxConfig(lanes=2, l_max=10, mask=False)
    text = emit_verilog(config, Softmax(config))
    again = SoftmaxConfig(lanes=2, l_max=10, mask=False)
    assert text == emit_verilog(again, Softmax(again))
    assert "module softmax_2x10_i32_o8_nomask(" in text
    for port in ("x__valid", "x__ready", "x__payload", "y__valid", "y__ready", "y__payload"):
        assert port in text
