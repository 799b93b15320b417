"""LayerNorm parameters: bad configs fail at construction with the house
messages; the emitted Verilog is deterministic."""

import dataclasses

import pytest

from bertforge.generators.emit import emit_verilog
from bertforge.rtl.layernorm import LayerNorm, LayerNormConfig


@pytest.mark.parametrize("fields, error, message", [
    ({"lanes": 0}, ValueError, r"^lanes must be a positive integer, not 0$"),
    ({"lanes": 65}, ValueError, r"^lanes must be an integer <= 64, not 65$"),
    ({"h_max": 8192}, ValueError, r"^h_max must be an integer <= 4096, not 8192$"),
    ({"lanes": 16, "h_max": 100}, ValueError, r"^h_max must be a multiple of lanes \(16\), not 100$"),
    ({"h_max": "768"}, TypeError, r"^h_max must be an integer, not '768'$"),
    ({"in_width": 12}, ValueError, r"^in_width must be 8, 16 or 32, not 12$"),
    ({"add_residual": 1}, TypeError, r"^add_residual must be a bool, not 1$"),
    ({"param_width": 12}, ValueError, r"^param_width must be 8 or 16, not 12$"),
    ({"gamma_frac": 8}, ValueError, r"^gamma_frac must be an integer <= 7, not 8$"),
    ({"beta_frac": 21}, ValueError, r"^beta_frac must be an integer <= 20, not 21$"),
    ({"out_mult": 0}, ValueError, r"^out_mult must be a positive integer, not 0$"),
    ({"out_shift": -2}, ValueError, r"^out_shift must be a non-negative integer, not -2$"),
])
def test_bad_parameters(fields, error, message):
    with pytest.raises(error, match=message):
        LayerNormConfig(**fields)


def test_component_needs_config():
    with pytest.raises(TypeError, match=r"^config must be a LayerNormConfig, not None$"):
        LayerNorm(None)


def test_verilog_is_deterministic():
    tiny = LayerNormConfig(lanes=1, h_max=4)
    text = emit_verilog(tiny, LayerNorm(tiny))
    again = dataclasses.replace(tiny)
    assert text == emit_verilog(again, LayerNorm(again))
    assert "module layernorm_l1_h4_i16_p8_res" in text
