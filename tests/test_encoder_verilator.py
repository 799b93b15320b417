"""One BERT encoder layer on EncoderTop, the emitted Verilog in Verilator
against the integer golden model and ``analyze``'s prediction.

The runs share one build per config (tiny.toml, and tiny16.toml with int16
activations; seq 32): the layer without stalls (every operation's cycles,
and the layer's, equal the prediction: the k projection stores K^T
directly, so there are no one-column transposing commands), and with
random memory latency and stalls on every stream (still bit-exact)."""

import pytest

from bertforge.generators.encoder_sim import TINY16_HW, TINY_HW, run_encoder
from bertforge.sim.coverage import uncovered


@pytest.mark.parametrize("hw, target", [(TINY_HW, 0.99), (TINY16_HW, 0.9999)])
def test_layer_in_verilator_matches_golden_and_prediction(hw, target):
    """int8 activations (tiny.toml) and int16 (tiny16.toml)."""
    result = run_encoder(hw, seq=32, seed=0)
    assert result["passed"] and result["match"], result["mismatches"]
    assert all(count == 0 for count in result["mismatches"].values())
    # every operation takes the predicted cycles exactly (tiny.toml: 111,387)
    for op in result["operations"]:
        assert op["cycles"] == op["predicted"], op
    assert "input transpose" not in {op["operation"] for op in result["operations"]}
    assert result["cycles"] == result["predicted_cycles"]
    for c in result["classes"]:
        assert c["cycles"] == c["predicted"], c
    assert {c["class"] for c in result["classes"]} == {"gemm", "softmax", "layernorm", "gelu"}
    assert result["cosine"] >= target


def test_layer_with_random_memory_stalls_is_still_exact():
    """The layer, then its elementwise commands back to back in every
    order (``tail``: run again on some of their rows, so the memory still
    equals the golden model's)."""
    result = run_encoder(TINY_HW, seq=32, seed=5, gap=0.3, stall=0.3, tail=True)
    assert result["passed"] and result["match"], result["mismatches"]
    assert result["cycles"] > result["predicted_cycles"]
    # every functional cover point (sim/encoder_tb.py) but those waived
    assert uncovered([result], WAIVED) == []


#: Cover points no run of this design can hit, and why:
#: - ``cmd.idle``: the sequencer takes a command only when it is valid
#:   (``cmd.ready`` is computed from ``cmd.valid``);
#: - ``cmd.refused`` for 1 and 2-3 cycles: a command is held until the one
#:   before it completes (an elementwise command: the read latency, the
#:   unit's pipeline and the write, tens of cycles; a GEMM: the engine's
#:   done), or, a GEMM queued behind GEMMs without a barrier, until the
#:   engine's 4-deep command queue has room: the tile scheduler takes a
#:   command from it at most once per ``dim_width + 3`` = 19 cycles (its
#:   address products take ``dim_width + 1`` steps) and the sequencer
#:   refills it the next cycle, so a burst's first hold, which starts when
#:   the queue fills 5 cycles after the scheduler took the burst's first
#:   command, lasts at least 14 cycles and every later one about 19.
WAIVED = {"encoder.cmd.idle:True", "encoder.cmd.refused:1", "encoder.cmd.refused:2-3"}
