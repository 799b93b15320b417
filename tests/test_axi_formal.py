"""Formal proofs of the AXI master (sim/axi_formal.py, part of ``bertforge
prove gemm``): each holds (test_formal runs the registry's; the quick ones
by default) and a broken copy makes each fail with a counterexample."""

import pytest

from bertforge.generators.blocks import BLOCKS
from bertforge.sim.axi_formal import AXI_FORMAL_ARGS, BrokenAxiMaster, axi_proofs
from bertforge.sim.formal import run_proof

pytestmark = pytest.mark.formal


def _proof(proofs, name):
    (found,) = [p for p in proofs if p.name == name]
    return found


def test_gemm_block_lists_the_axi_proofs():
    names = {p.name for p in BLOCKS["gemm"].proofs() if p.config.startswith("axi master")}
    assert {"ar_valid_held", "w_payload_held", "ar_no_4k_crossing", "aw_no_4k_crossing",
            "w_matches_aw", "reads_bounded", "writes_bounded", "no_beat_from_nothing",
            "no_beat_lost", "idle_means_answered", "reaches_answered"} <= names


@pytest.mark.parametrize("fault, name", [
    pytest.param("arvalid_drops", "ar_valid_held", marks=pytest.mark.slow),
    ("arlen_plus_one", "ar_no_4k_crossing"),
    ("wlast_dropped", "w_matches_aw"),
    pytest.param("wdata_flips", "w_payload_held", marks=pytest.mark.slow),
    pytest.param("extra_beat", "no_beat_from_nothing", marks=pytest.mark.slow),
    pytest.param("idle_always", "idle_means_answered", marks=pytest.mark.slow),
    ("rready_always", "no_beat_lost"),      # the AXI top's mutant 19 (4 s)
])
def test_broken_master_fails(fault, name, tmp_path):
    proofs = axi_proofs(make=lambda: BrokenAxiMaster(fault, **AXI_FORMAL_ARGS),
                        label=f"broken axi {fault}")
    result = run_proof(_proof(proofs, name), tmp_path)
    assert result.status == "failed", result.line()
    assert result.trace.suffix == ".vcd" and result.trace.stat().st_size > 0


def test_outstanding_bound_bites(tmp_path):
    """A master allowed 2 reads in flight, checked against a bound of 1."""
    proofs = axi_proofs(check_reads=1, label="axi reads checked against 1")
    result = run_proof(_proof(proofs, "reads_bounded"), tmp_path)
    assert result.status == "failed", result.line()
