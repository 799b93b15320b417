"""Formal proofs of the AXI4-Lite register file (sim/axi_regs_formal.py,
``bertforge prove axi_regs``; test_formal holds the registry's, the quick
ones by default): a broken copy makes each property fail with a
counterexample, and the command runs them."""

import dataclasses

import pytest

from bertforge.generators import cli
from bertforge.generators.blocks import BLOCKS
from bertforge.sim.axi_regs_formal import FAULTS, AxiRegsSpec, BrokenRegisters, axi_regs_proofs
from bertforge.sim.formal import run_proof

pytestmark = pytest.mark.formal

#: Broken copies the default run checks (the rest with -m slow).
QUICK = ("w1c_sticky", "bresp_okay", "rresp_okay")


def test_block_lists_every_property():
    proofs = BLOCKS["axi_regs"].proofs()
    assert [p.name for p in proofs] == list(AxiRegsSpec.PROPERTIES)
    assert {p.method for p in proofs} == {"prove", "cover"}
    # every property but the cover has a broken copy that fails it
    assert set(FAULTS.values()) == set(AxiRegsSpec.PROPERTIES) - {"reaches_irq_cleared"}


@pytest.mark.parametrize("fault", [pytest.param(f, marks=[] if f in QUICK else [pytest.mark.slow])
                                   for f in FAULTS])
def test_broken_register_file_fails(fault, tmp_path):
    (proof,) = [p for p in axi_regs_proofs(make=lambda: BrokenRegisters(fault), label=fault)
                if p.name == FAULTS[fault]]
    result = run_proof(proof, tmp_path)
    assert result.status == "failed", result.line()
    assert result.trace.suffix == ".vcd" and result.trace.stat().st_size > 0


def test_cli_prove_axi_regs(tmp_path, monkeypatch, capsys):
    quick = [p for p in axi_regs_proofs() if p.name in ("irq_matches", "reaches_irq_cleared")]
    monkeypatch.setitem(BLOCKS, "axi_regs",
                        dataclasses.replace(BLOCKS["axi_regs"], proofs=lambda: quick))
    assert cli.main(["prove", "axi_regs", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("axi_regs [axi-lite register file (bertforge map)] irq_matches: "
                             "proved (k-induction, depth 6)")
    assert "reached within 8 (cover)" in out[1]
    assert out[-1].startswith("2 of 2 properties hold")
