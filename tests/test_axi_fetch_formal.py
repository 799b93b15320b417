"""Formal proofs of the AXI top's program fetcher (sim/axi_fetch_formal.py,
part of ``bertforge prove gemm``; test_formal runs the registry's): a broken
copy makes each bounded proof fail with a counterexample. Slow: the
fetcher's proofs run the master and the register file too."""

import pytest

from bertforge.generators.blocks import BLOCKS
from bertforge.sim.axi_fetch_formal import FetchSpec, FetchTop, fetch_proofs
from bertforge.sim.formal import run_proof

pytestmark = pytest.mark.formal


def test_gemm_block_lists_the_fetch_proofs():
    names = {p.name for p in BLOCKS["gemm"].proofs() if p.config.startswith("axi fetcher")}
    assert names == set(FetchSpec.PROPERTIES)


@pytest.mark.slow
@pytest.mark.parametrize("fault, name", [
    ("bad_opcode_waits", "fetch_never_hangs"),
    ("no_drain", "ends_answered"),
    ("reject_no_drain", "ends_answered"),
])
def test_broken_fetcher_fails(fault, name, tmp_path):
    (proof,) = [p for p in fetch_proofs(make=lambda: FetchTop(fault=fault),
                                        label=f"broken fetcher {fault}") if p.name == name]
    result = run_proof(proof, tmp_path)
    assert result.status == "failed", result.line()
    assert result.trace.suffix == ".vcd" and result.trace.stat().st_size > 0
