"""Designs and data builders shared by several ``tests/test_<block>_<kind>.py``
files of one block (one definition each; import with ``from helpers import``).

Block-specific names carry the block as prefix; a test file may import them
under its own short name (``from helpers import LAYERNORM_SMALL as SMALL``).
Only rtl and golden-model modules are imported at the top, so one block's
files do not fail to collect because of another block's generator module."""

from bertforge.rtl.gelu import GeluConfig
from bertforge.rtl.layernorm import LayerNormConfig
from bertforge.sim.layernorm_golden import layernorm_config_for_scale

# ---- layernorm ---------------------------------------------------------------

#: 4 lanes, int16 x + r, int8 gamma/beta; the CLI tests use the same design.
LAYERNORM_SMALL = LayerNormConfig(lanes=4, h_max=64)
#: 3 lanes, int32 x, no residual, int16 gamma/beta, a non-power-of-two output scale.
LAYERNORM_WIDE = layernorm_config_for_scale(
    LayerNormConfig(lanes=3, h_max=48, in_width=32, add_residual=False, param_width=16,
                    gamma_frac=12, beta_frac=10), 0.05)


def layernorm_bert_vectors(config, count, length, seed):
    import numpy as np

    from bertforge.generators.layernorm_sim import random_layernorm_data
    return random_layernorm_data(config, count, length, np.random.default_rng(seed))


# ---- encoder -----------------------------------------------------------------

def tiny_encoder_config():
    from bertforge.generators.analyze import load_hardware
    from bertforge.generators.encoder_sim import TINY_HW
    from bertforge.rtl.encoder import EncoderConfig
    hw = load_hardware(TINY_HW)
    return EncoderConfig(gemm=hw.gemm, softmax=hw.softmax, layernorm=hw.layernorm, gelu=hw.gelu)


# ---- gelu --------------------------------------------------------------------

#: int16 in (LSB 2**-10) and int16 out (LSB 2**-11): the 0.02 bound holds end to end.
GELU_WIDE = GeluConfig(lanes=3, in_width=16, out_width=16, in_mult=1, in_shift=0, out_mult=1,
                       out_shift=3)
#: the default: int8 in and out, LSB 1/16.
GELU_DEFAULT = GeluConfig()


# ---- softmax -----------------------------------------------------------------

#: The bound on every softmax output's error against float softmax (2 LSB of uint8).
SOFTMAX_MAX_ERR = 2 / 256
