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
    (dict(gemm=GemmConfig(width=16, mem_width=128, k_chunk=64)), ValueError,
     r"^the encoder top with gemm width 16 \(int16 activations\) needs softmax out_width 16, not 8$"),
    (dict(gemm=GemmConfig(arith="bf16", mem_width=128, k_chunk=64)), ValueError,
     r"^the encoder top runs integer activations: set \[gemm\] arith to int8 or int16, not bf16$"),
    (dict(gemm=GemmConfig(mem_width=128, k_chunk=64, serial=True)), ValueError,
     r"^the encoder top drives the staged GEMM engine: set \[gemm\] serial to false$"),
    (dict(softmax=SoftmaxConfig(in_width=16, out_width=8)), ValueError,
     r"^the encoder top needs softmax in_width 32 \(int32 scores\)$"),
    (dict(layernorm=LayerNormConfig(lanes=4, h_max=64, in_width=8, out_width=16)), ValueError,
     r"^the encoder top with gemm width 8 \(int8 activations\) needs layernorm out_width 8, not 16$"),
    (dict(layernorm=LayerNormConfig(lanes=4, h_max=64)), ValueError,      # int16 statistics for int8 values
     r"^the encoder top with gemm width 8 \(int8 activations\) needs layernorm in_width 8, not 16$"),
    (dict(layernorm=LayerNormConfig(in_width=8, add_residual=False)), ValueError,
     r"^the encoder top needs layernorm add_residual = true$"),
    (dict(gelu=GeluConfig(out_width=16)), ValueError,
     r"^the encoder top with gemm width 8 \(int8 activations\) needs gelu out_width 8, not 16$"),
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
    (32, 64, 2, 200, r"^ffn 200 must be a multiple of the 16-byte memory word \(16 elements of 1 bytes\)$"),
    (32, 48, 5, 256, r"^hidden 48 is not a multiple of heads 5$"),
])
def test_shapes_the_adapters_cannot_take(seq, hidden, heads, ffn, message):
    with pytest.raises(ValueError, match=message):
        check_shape(tiny_config(), seq, hidden, heads, ffn)


def test_int16_activations():
    """minilm.toml's units form an int16 top (two bytes an element); the
    layernorm unit's int16 output is a checked choice."""
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.encoder_sim import encoder_config
    from bertforge.generators.model_sim import MINILM_HW
    config = encoder_config(load_hardware(MINILM_HW), MINILM_HW)
    assert config.element_bytes == 2 and config.name.endswith("_i16")
    assert (config.softmax.out_width, config.layernorm.out_width, config.gelu.in_width) == (16, 16, 16)
    assert tiny_config().element_bytes == 1
    with pytest.raises(ValueError, match=r"^out_width must be 8 or 16, not 12$"):
        LayerNormConfig(out_width=12)
    check_shape(config, 32, 384, 12, 1536)
    with pytest.raises(ValueError, match=r"^hidden 376 must be a multiple of the 64-byte memory word "
                                         r"\(32 elements of 2 bytes\)$"):
        check_shape(config, 32, 376, 8, 1536)
    with pytest.raises(ValueError, match=r"^a layer of 2 x sequence length 128 and 384 heads needs 1547 "
                                         r"commands; the harness queue holds at most 1024$"):
        check_shape(config, 128, 384, 384, 1536, batch=2)
