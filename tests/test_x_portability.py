"""Simulator portability: no result may depend on uninitialized state (X).

- The runner's ``x_seed`` builds with Verilator's ``--x-assign unique
  --x-initial unique`` and starts every uninitialized variable from a random
  value of that seed: shown on a register nobody writes, then used on small
  designs (the GEMM engine among them), which must give the golden model's
  results in the cycle model's cycles for every seed, as with the default
  build (X as 0).
- The portable set (every block's small config) on Icarus Verilog, a
  four-state simulator, when ``iverilog`` is installed (``slow``: Icarus
  runs a few thousand cycles a second).
"""

import json
import shutil
import tempfile

import pytest

from bertforge.generators import cli
from bertforge.sim import runner

UNINITIALIZED = """
module uninit(input clk, input en, input [15:0] d, output [15:0] q);
  reg [15:0] r;
  always @(posedge clk) if (en) r <= d;
  assign q = r;
endmodule
"""


@pytest.fixture(autouse=True)
def _work_in_tmp_path(tmp_path, monkeypatch):
    """The runs' work directories go to the test's own directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _read(**options):
    return runner.run(UNINITIALIZED, "uninit", "cocotb_read_uninitialized", {}, quiet=True,
                      rerun_with_waves=False, **options)["q"]


def test_x_seed_randomizes_uninitialized_state():
    assert _read() == 0                                   # --x-initial 0
    values = {seed: _read(x_seed=seed) for seed in (1, 2, 3)}
    assert len(set(values.values())) > 1, values          # the seed decides
    assert _read(x_seed=2) == values[2]                   # and repeats


@pytest.mark.parametrize("bad", [0, -1, "3", True])
def test_x_seed_checked(bad):
    with pytest.raises(runner.SimulationError, match="x_seed must be a positive integer"):
        runner.build(UNINITIALIZED, "uninit", x_seed=bad)


def test_x_seed_from_environment(monkeypatch):
    monkeypatch.setenv("BERTFORGE_X_SEED", "zero")
    with pytest.raises(runner.SimulationError, match="BERTFORGE_X_SEED must be a positive"):
        runner.build(UNINITIALIZED, "uninit")
    monkeypatch.setenv("BERTFORGE_X_SEED", "2")
    assert _read() == _read(x_seed=2)


def test_unknown_simulator():
    with pytest.raises(runner.SimulationError, match="simulator must be one of"):
        runner.build(UNINITIALIZED, "uninit", simulator="xcelium")


#: Small configs of every simulated block: ``bertforge sim`` arguments.
PORTABLE = {
    "systolic-os": ["systolic", "--preset", "tiny", "--k", "6", "--tiles", "3"],
    "systolic-ws": ["systolic", "--preset", "tiny", "--dataflow", "ws", "--k", "5", "--tiles", "2"],
    "gemm": ["gemm", "--preset", "tiny", "--m", "3", "--k", "5", "--n", "3", "--batch", "2"],
    "sparse": ["sparse", "--preset", "tiny", "--pattern", "2:4", "--m", "3", "--k", "8", "--n", "3"],
    "butterfly": ["butterfly", "--n-max", "8", "--n", "8", "--batch", "4"],
    "softmax": ["softmax", "--lanes", "2", "--l-max", "8", "--rows", "3"],
    "layernorm": ["layernorm", "--lanes", "2", "--h-max", "8", "--vectors", "3"],
    "gelu": ["gelu", "--lanes", "2", "--rows", "3", "--length", "8"],
}

#: Built with ``x_seed`` in the default run (each one model, cached).
X_UNIQUE = ["systolic-os", "gemm", "gelu"]


def _sim(args, capsys):
    assert cli.main(["sim", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _same(result, reference):
    """Bit-exact (as the golden model) in the same cycles as the reference."""
    assert result["match"], result
    for key in ("cycles", "model_cycles", "dense_cycles", "mismatches", "max_abs_err",
                "mean_abs_err"):
        assert result.get(key) == reference.get(key), key


@pytest.mark.parametrize("design", X_UNIQUE)
def test_x_unique_builds_are_bit_exact(design, monkeypatch, capsys):
    reference = _sim(PORTABLE[design], capsys)
    assert reference["match"]
    for seed in (7, 1234):
        monkeypatch.setenv("BERTFORGE_X_SEED", str(seed))
        _same(_sim(PORTABLE[design], capsys), reference)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("iverilog") is None,
                    reason="Icarus Verilog is not installed (apt install iverilog)")
@pytest.mark.parametrize("design", PORTABLE)
def test_portable_set_on_icarus(design, monkeypatch, capsys):
    """Every block's small config gives the same results in the same
    cycles on Icarus (four-state) as on Verilator."""
    reference = _sim(PORTABLE[design], capsys)
    monkeypatch.setenv("BERTFORGE_SIMULATOR", "icarus")
    _same(_sim(PORTABLE[design], capsys), reference)
