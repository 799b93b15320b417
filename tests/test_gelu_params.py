"""GELU parameters: bad configs fail at construction with the house messages;
the emitted Verilog is deterministic."""

import dataclasses

from bertforge.generators.emit import emit_verilog
from bertforge.rtl.gelu import Gelu, GeluConfig

from config_helpers import config_tests, positive_int_errors
from helpers import GELU_WIDE as WIDE


test_bad_parameters, test_component_needs_a_config = config_tests(
    GeluConfig, Gelu, positive_int_errors("lanes", 64) + [
    ({"in_width": 12}, ValueError, r"^in_width must be 8, 16 or 32, not 12$"),
    ({"out_width": 32}, ValueError, r"^out_width must be 8 or 16, not 32$"),
    ({"in_mult": 0}, ValueError, r"^in_mult must be a positive integer, not 0$"),
    ({"in_shift": -1}, ValueError, r"^in_shift must be a non-negative integer, not -1$"),
    ({"out_shift": 63}, ValueError, r"^out_shift must be an integer <= 62, not 63$"),
    ({"out_mult": True}, TypeError, r"^out_mult must be an integer, not True$"),
])


def test_verilog_is_deterministic():
    again = dataclasses.replace(WIDE)
    assert emit_verilog(WIDE, Gelu(WIDE)) == emit_verilog(again, Gelu(again))
    assert "module gelu_l3_i16_o16" in emit_verilog(WIDE, Gelu(WIDE))
