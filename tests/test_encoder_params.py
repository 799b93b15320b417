"""Encoder parameters: EncoderConfig refuses unit configs the top cannot
take, EncoderTop needs a config, and the layer shapes the adapters cannot
take are refused with the house messages."""

import pytest

from bertforge.rtl.encoder import EncoderConfig, EncoderTop
from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.gemm import GemmConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.rtl.softmax import SoftmaxConfig
from bertforge.sim.encoder_run import check_shape

from helpers import tiny_encoder_config as tiny_config


@pytest.mark.parametrize("change, error, message", [
    (dict(gemm=SoftmaxConfig()), TypeError, r"^gemm must be a GemmConfig, not SoftmaxConfig\("),
    (dict(gemm=GemmConfig(width=16)), ValueError, r"^the encoder top needs gemm width 8, not 16$"),
    (dict(softmax=SoftmaxConfig(in_width=16, out_width=16)), ValueError,
     r"^the encoder top needs softmax in_width 32 and out_width 8$"),
    (dict(layernorm=LayerNormConfig(add_residual=False)), ValueError,
     r"^the encoder top needs layernorm add_residual = true$"),
    (dict(gelu=GeluConfig(out_width=16)), ValueError, r"^the encoder top needs gelu in_width 8 and out_width 8$"),
    (dict(gelu=GeluConfig(lanes=32)), ValueError,
     r"^gelu beats of 32 bytes must divide the 16-byte memory word; change \[gelu\] lanes or \[gemm\] mem_width$"),
])
def test_bad_encoder_config(change, error, message):
    base = tiny_config()
    fields = {name: getattr(base, name) for name in ("gemm", "softmax", "layernorm", "gelu")}
    with pytest.raises(error, match=message):
        EncoderConfig(**{**fields, **change})


def test_top_needs_an_encoder_config():
    with pytest.raises(TypeError, match=r"^config must be an EncoderConfig, not 3$"):
        EncoderTop(3)


@pytest.mark.parametrize("seq, hidden, heads, ffn, message", [
    (256, 64, 2, 256, r"^sequence length 256 exceeds the softmax unit's l_max = 128$"),
    (32, 128, 2, 256, r"^hidden 128 exceeds the layernorm unit's h_max = 64$"),
    (30, 64, 2, 256, r"^sequence length 30 must be a multiple of 4 "),
    (32, 64, 2, 200, r"^ffn 200 must be a multiple of the 16-byte memory word$"),
    (32, 48, 5, 256, r"^hidden 48 is not a multiple of heads 5$"),
])
def test_shapes_the_adapters_cannot_take(seq, hidden, heads, ffn, message):
    with pytest.raises(ValueError, match=message):
        check_shape(tiny_config(), seq, hidden, heads, ffn)
