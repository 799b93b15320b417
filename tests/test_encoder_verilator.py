"""One BERT encoder layer on EncoderTop, the emitted Verilog in Verilator
against the integer golden model and ``analyze``'s prediction.

The runs share one build (tiny.toml, seq 32): the layer without stalls (every
operation's cycles equal the prediction), and with random memory latency and
stalls on every stream (still bit-exact)."""

from bertforge.generators.encoder_sim import TINY_HW, run_encoder


def test_layer_in_verilator_matches_golden_and_prediction():
    result = run_encoder(TINY_HW, seq=32, seed=0)
    assert result["passed"] and result["match"], result["mismatches"]
    assert all(count == 0 for count in result["mismatches"].values())
    # every operation, and so the layer, takes the predicted cycles exactly
    for op in result["operations"]:
        assert op["cycles"] == op["predicted"], op
    assert result["cycles"] == result["predicted_cycles"]
    assert {c["class"] for c in result["classes"]} == {"gemm", "softmax", "layernorm", "gelu"}
    assert result["cosine"] >= 0.99


def test_layer_with_random_memory_stalls_is_still_exact():
    result = run_encoder(TINY_HW, seq=32, seed=5, gap=0.3, stall=0.3)
    assert result["passed"] and result["match"], result["mismatches"]
    assert result["cycles"] > result["predicted_cycles"]
