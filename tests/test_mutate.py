"""Mutants and their bounded equivalence check (sim/mutate.py) on a tiny
design, and the command's refusals (the whole flow on a block is a
benchmark: bertforge mutate BLOCK)."""

import pytest

from bertforge.generators.cli import main
from bertforge.sim import mutate

_TINY = """module tiny(clk, a, b, y);
  input clk;
  input [3:0] a;
  input [3:0] b;
  output reg [4:0] y = 5'h00;
  always @(posedge clk)
    y <= a + b;
endmodule
"""


def test_mutants_of_a_tiny_design_and_their_equivalence(tmp_path):
    source = tmp_path / "tiny.v"
    source.write_text(_TINY)
    listed = mutate.mutations(source, "tiny", 4, 1, tmp_path / "list")
    assert len(listed) == 4
    assert all(m["command"].startswith("mutate -mode ") and m["module"] == "tiny" for m in listed)
    assert all(set(m["lines"]) & {5, 6, 7} for m in listed)     # the register or the adder
    # no mutation: equivalent; a register's D bit tied to 0: a different output
    assert mutate.equivalent(source, "tiny", mutate.NONE, tmp_path / "e0", depth=3)[0] == "equivalent"
    tied = next(m for m in listed if m["mode"] == "const0" and m["port"] == "D")
    assert mutate.equivalent(source, "tiny", tied, tmp_path / "e1", depth=3)[0] == "different"
    mutate.write_mutant(source, "tiny", tied, tmp_path / "mutant.v", tmp_path / "list")
    text = (tmp_path / "mutant.v").read_text()
    assert "module tiny(clk, a, b, y);" in text and "1'h0" in text


_TWO = """module \\two.inner (a, y);
  input [3:0] a;
  output [3:0] y;
  assign y = a ^ 4'h5;
endmodule
module two(clk, a, y);
  input clk;
  input [3:0] a;
  output reg [3:0] y = 4'h0;
  wire [3:0] z;
  \\two.inner  inner (.a(a), .y(z));
  always @(posedge clk)
    y <= z + a;
endmodule
"""


def test_mutants_of_one_submodule_only(tmp_path):
    """``modules``: the cells of an Amaranth-style submodule (``\\two.inner``,
    named as yosys patterns are) only; no module matched, no mutants."""
    source = tmp_path / "two.v"
    source.write_text(_TWO)
    both = mutate.mutations(source, "two", 12, 1, tmp_path / "both")
    assert {m["module"] for m in both} == {"two", "two.inner"}
    inner = mutate.mutations(source, "two", 6, 1, tmp_path / "inner", ["two.inner"])
    assert len(inner) == 6 and {m["module"] for m in inner} == {"two.inner"}
    assert all(set(m["lines"]) <= {1, 2, 3, 4, 5} for m in inner)    # lines of two.inner
    assert mutate.mutations(source, "two", 6, 1, tmp_path / "none", ["two.nothing"]) == []


@pytest.mark.parametrize("args, message", [
    (["--count", "0"], "--count must be at least 1, not 0"),
    (["--depth", "0"], "--depth must be at least 1, not 0"),
    (["--tests", "tests/none.py"], "no test file tests/none.py (mutate runs from a source tree)"),
])
def test_mutate_refuses_bad_arguments(args, message, capsys, tmp_path):
    assert main(["mutate", "gelu", "--out", str(tmp_path), *args]) == 2
    assert capsys.readouterr().err.strip() == f"bertforge: error: {message}"


def test_mutate_refuses_a_bad_proof_timeout(capsys, tmp_path):
    assert main(["mutate", "gelu", "--out", str(tmp_path), "--proof-timeout", "0"]) == 2
    assert capsys.readouterr().err.strip() == \
        "bertforge: error: --proof-timeout must be positive, not 0.0"


def test_a_proof_on_the_verilog_kills_a_mutant_the_original_passes(tmp_path):
    """The block's proofs on a design's Verilog (``bertforge mutate``'s
    step 5): GELU, 2 lanes; the design rewritten by yosys (mutant 0) keeps
    ``y.valid`` high while stalled; with the ``y.valid`` register's output
    inverted the proof fails."""
    from bertforge.generators.blocks import BLOCKS
    from bertforge.generators.emit import cached_verilog
    from bertforge.generators.mutate_cli import _design_proofs, _prove_mutant
    from bertforge.rtl.gelu import Gelu, GeluConfig
    config = GeluConfig(lanes=2)
    original = tmp_path / "original.v"
    original.write_text(cached_verilog(config, Gelu))
    proofs, internal, reason = _design_proofs(BLOCKS["gelu"], original, config.name)
    assert reason is None and internal == []
    assert [p.name for p in proofs] == ["y_valid_held", "y_payload_held", "y_valid_before_ready",
                                        "first_output", "latency"]
    held = [p for p in proofs if p.name == "y_valid_held"]
    listed = mutate.mutations(original, config.name, 400, 1, tmp_path / "list")
    tied = next(m for m in listed if m["mode"] == "inv" and m.get("wire") == "y__valid")
    for index, mutation in enumerate([mutate.NONE, tied]):
        mutant = tmp_path / f"m{index}.v"
        mutate.write_mutant(original, config.name, mutation, mutant, tmp_path / "list")
        entry = {}
        failed = _prove_mutant(entry, held, mutant, tmp_path / f"p{index}", 120)
        assert (failed, entry["proofs"]["y_valid_held"]["status"]) == \
            ((None, "proved") if index == 0 else ("y_valid_held", "failed"))
    # A design that is not the block's component (its top named otherwise: a
    # harness) has none; the systolic array's queue properties read inside it.
    assert "is not a gelu component" in _design_proofs(BLOCKS["gelu"], original, "harness")[2]
    from bertforge.rtl.systolic import SystolicArray, SystolicConfig
    systolic = SystolicConfig(rows=2, cols=2)
    (tmp_path / "systolic.v").write_text(cached_verilog(systolic, SystolicArray))
    proofs, internal, reason = _design_proofs(BLOCKS["systolic"], tmp_path / "systolic.v",
                                              systolic.name)
    assert reason is None and len(proofs) == 5
    assert internal == [f"{name} [2x2 os]" for name in ("queue_never_refuses", "reaches_full_queue")]
