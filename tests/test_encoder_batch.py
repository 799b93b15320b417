"""A batch of sentences on the encoder top: the projections and the FFN on
the stacked rows (each weight read once per batch), attention per sentence.
The golden model of a batch equals each sentence's on its own; in
Verilator (tiny.toml: the build test_encoder_verilator.py uses) a batch of
two is bit-exact and every operation takes the predicted cycles."""

import dataclasses

import numpy as np
import pytest

from bertforge.generators.analyze import analyze, load_hardware
from bertforge.generators.encoder_sim import (TINY16_HW, TINY_HW, encoder_config, run_encoder,
                                              sdram_row, simulate_layers, write_sdram_rows)
from bertforge.generators.model_sim import encode
from bertforge.sim.encoder_golden import encoder_golden, random_layer
from bertforge.sim.encoder_harness import MAX_COMMANDS, queue_depth
from bertforge.sim.encoder_run import check_shape, encoder_program, program_commands

from checkpoint_helpers import write_checkpoint

CONFIG = encoder_config(load_hardware(TINY_HW), TINY_HW)
ROWS = ("q", "v", "ctx", "attn", "ln1", "h1", "g", "f", "out")


def test_golden_batch_is_each_sentence_on_its_own():
    layer = random_layer(CONFIG, 16, 64, 2, 256, seed=3, batch=2)
    layer.valid = [16, 11]                   # the second sentence has 5 padding tokens
    batch = encoder_golden(CONFIG, layer)
    assert batch["out"].shape == (32, 64) and batch["scores"].shape == (4, 16, 16)
    for b in range(2):
        rows = slice(16 * b, 16 * b + 16)
        alone = encoder_golden(CONFIG, dataclasses.replace(layer, batch=1, x=layer.x[rows],
                                                           xq=layer.xq[rows], valid=layer.valid[b]))
        for key in ROWS:
            assert np.array_equal(alone[key], batch[key][rows]), key
        assert np.array_equal(alone["kt"], batch["kt"][:, rows])
        assert np.array_equal(alone["p"], batch["p"][2 * b:2 * b + 2])
    assert batch["p"][2:, :, 11:].max() == 0 and batch["p"][:2, :, 11:].max() > 0


def test_batch_program():
    layer = random_layer(CONFIG, 16, 64, 2, 256, seed=3, batch=2)
    _, commands, _, groups, _ = encoder_program(CONFIG, layer)
    assert len(commands) == program_commands(16, 2, 2) == 2 + 1 + 8 + 2 + 6
    ffn1 = commands[groups[7][0]]["gemm"]
    assert (ffn1["m"], ffn1["k"], ffn1["n"]) == (32, 64, 256)      # one weight read for both
    assert [commands[i]["gemm"]["m"] for i in groups[2]] == [16] * 4   # scores per sentence, head
    with pytest.raises(ValueError, match=r"^a layer of 204 x sequence length 32 and 2 heads needs "
                                         r"1029 commands; the harness queue holds at most 1024$"):
        check_shape(CONFIG, 32, 64, 2, 256, batch=204)
    one = analyze("tiny", 16, load_hardware(TINY_HW), bias=False, transpose=True)
    two = analyze("tiny", 16, load_hardware(TINY_HW), batch=2, bias=False, transpose=True)
    ops = {r["operation"]: r for r in two["operations"]}
    assert ops["softmax"]["cycles"] == 2 * {r["operation"]: r for r in one["operations"]}[
        "softmax"]["cycles"]                 # a softmax command per sentence


def test_batch_of_two_in_verilator(tmp_path):
    result = run_encoder(TINY_HW, seq=16, batch=2, seed=1)
    assert result["passed"] and result["match"], result["mismatches"]
    assert result["batch"] == 2 and result["commands"] == program_commands(16, 2, 2)
    for op in result["operations"]:
        assert op["cycles"] == op["predicted"], op
    assert result["cycles"] == result["predicted_cycles"]
    row = sdram_row("tiny.toml", result)       # the SDRAM bench's row of a run
    assert (row["engine"], row["batch"], row["cycles"]) == ("4x4", 2, result["cycles"])
    assert row["gemm_difference"] == row["softmax_difference"] == 0 and row["match"]
    assert row["sentences_per_second"] == 2 * 100e6 / (2 * result["cycles"])   # 2 layers, 100 MHz
    write_sdram_rows(tmp_path, [row])
    assert (f"| tiny.toml | 4x4 | 2 | {result['cycles']:,} | {result['cycles']:,} | +0.0% | +0.0% "
            f"| +0.0% | +0.0% | +0.0% | yes |") in (tmp_path / "bench.md").read_text()


def test_program_longer_than_the_default_queue():
    """A program of more commands than the default harness queue (192) runs
    on a deeper one (256; the default's Verilog is unchanged): 21 sentences
    of 4 tokens, 4 heads, 198 commands, every stage bit-exact and every
    command stamped in order."""
    layer = random_layer(CONFIG, 4, 64, 4, 64, seed=5, batch=21)
    assert program_commands(4, 4, 21) == 198 > MAX_COMMANDS and queue_depth(198) == 256
    result = simulate_layers(CONFIG, [layer], [(layer.xq, None)], mem_latency=4)
    run = result["runs"][0][0]
    assert run["match"], run["mismatches"]
    assert run["passed"] and run["commands"] == 198
    assert all(0 < s <= e for s, e in zip(run["starts"], run["ends"]))
    assert run["ends"] == sorted(run["ends"]) and run["ends"][-1] == run["cycles"]


def test_sim_model_batch_of_two_gives_each_sentence_its_embedding(tmp_path):
    """``sim model --batch 2`` on the random checkpoint (tiny16.toml, as
    test_model_verilator.py; texts of at most 4 tokens, so that both runs
    share that test's Verilator build): three texts, so the second batch is
    filled up; every layer bit-exact and the embeddings those of batch 1."""
    checkpoint = write_checkpoint(tmp_path / "random-bert")
    texts = ["rain falls", "rain", "falls"]
    one = encode(texts, checkpoint=str(checkpoint), hw=str(TINY16_HW))
    two = encode(texts, checkpoint=str(checkpoint), hw=str(TINY16_HW), batch=2)
    assert one["match"] and two["match"] and two["batch"] == 2
    assert np.array_equal(one["embeddings"], two["embeddings"])
    assert len(two["sentences"]) == 3 and two["seq"] == 4
    # two batches of two sentences against three single runs: fewer cycles a sentence
    assert two["cycles"] < one["cycles"]
    for c in two["classes"]:
        assert abs(c["difference"]) <= 0.02, c
