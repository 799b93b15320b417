"""Code coverage of the emitted Verilog (sim/coverage.py, runner's
BERTFORGE_COVERAGE) and the runner's mutant substitution (BERTFORGE_MUTANT)."""

import hashlib
import json

import numpy as np
import pytest

from bertforge.generators.cli import main
from bertforge.sim import coverage, runner

_VERILOG = """module top(clk, a, y);
  input clk;
  input [1:0] a;
  output reg y;
  always @(posedge clk)
    if (a[0]) y <= 1'h1;
    else y <= a[1];
  always @* if (\\$auto$verilog_backend.cc:2355:dump_module$1 ) begin end
endmodule
module sub(b);
  input b;
endmodule
"""


def _point(line, kind, comment, count, spans=None, hier="top"):
    page = f"v_{kind}/{hier}"
    fields = [("f", "/x/top.v"), ("l", str(line)), ("n", "1"), ("t", kind), ("page", page),
              ("o", comment)] + ([("S", spans)] if spans else []) + [("h", hier)]
    key = "".join(f"\x01{name}\x02{value}" for name, value in fields)
    return f"C '{key}' {count}"


def _dat(points):
    return "# SystemC::Coverage-3\n" + "\n".join(points) + "\n"


#: a hand-written coverage.dat: the if arm reached, the else arm never; a[0]
#: toggled both ways, a[1] only rose; sub's b (a Verilator mangled name: $b) never.
_SNIPPET = _dat([
    _point(6, "branch", "if", 5, "6"),
    _point(6, "branch", "else", 0, "7"),
    _point(5, "line", "block", 5, "5"),
    _point(8, "branch", "if", 0, "8"),          # yosys's trigger: never, by construction
    _point(3, "toggle", "a[0]:0->1", 2),
    _point(3, "toggle", "a[0]:1->0", 1),
    _point(3, "toggle", "a[1]:0->1", 1),
    _point(3, "toggle", "a[1]:1->0", 0),
    _point(10, "toggle", "__024b:0->1", 0, hier="top.sub"),
    _point(10, "toggle", "__024b:1->0", 0, hier="top.sub"),
])


def test_reader_on_a_hand_written_snippet():
    points = coverage.parse(_SNIPPET)
    summary = coverage.summarize(points, _VERILOG)
    assert summary["top"]["line_points"] == 3 and summary["top"]["line_hit"] == 2
    assert summary["top"]["missed_lines"] == [7]
    assert summary["top"]["toggle_points"] == 4 and summary["top"]["toggle_hit"] == 3
    assert summary["top"]["missed_signals"] == {"a": ["[1]1->0"]}
    assert summary["sub"]["missed_signals"] == {"$b": ["0->1", "1->0"]}
    assert summary["(all)"]["toggle_pct"] == 50.0
    assert summary["(all)"]["line_pct"] == pytest.approx(66.67)
    # two runs merge by summing: a second run that takes the else arm closes it
    second = coverage.parse(_dat([_point(6, "branch", "else", 3, "7")]))
    merged = coverage.summarize(coverage.merge([points, second]), _VERILOG)
    assert merged["top"]["missed_lines"] == [] and merged["top"]["line_pct"] == 100.0
    annotated = coverage.annotate(points, _VERILOG).splitlines()
    assert annotated[6].startswith("%000000 ") and annotated[6].endswith("else y <= a[1];")
    assert annotated[5].startswith(" 000005 ")
    assert annotated[2].endswith("// untoggled: a")
    assert annotated[0].startswith("        module top")


@pytest.mark.parametrize("text, message", [
    ("C 'x' 1\n", r"^x\.dat is not a Verilator coverage file"),
    ("# SystemC::Coverage-3\nC 'x' y\n", r"^x\.dat:2: not a coverage point"),
])
def test_reader_refuses_what_is_not_coverage(text, message):
    with pytest.raises(coverage.CoverageError, match=message):
        coverage.parse(text, "x.dat")


def test_coverage_command_reports_a_directory(tmp_path, capsys):
    model = tmp_path / "top-cov-0123"
    model.mkdir()
    (model / "top.v").write_text(_VERILOG)
    (model / "run-1.dat").write_text(_SNIPPET)
    assert main(["coverage", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "top-cov-0123" in out and "2/3" in out and "3/4" in out
    stored = json.loads((tmp_path / "coverage.json").read_text())
    assert stored["models"]["top-cov-0123"]["top"]["missed_lines"] == [7]
    summary = json.loads((tmp_path / "coverage-summary.json").read_text())
    assert summary["models"]["top-cov-0123"]["top"]["missed_lines"] == 1
    assert "%000000" in (tmp_path / "annotated" / "top-cov-0123.v.txt").read_text()
    # --bench: a row per model, for store_bench
    assert main(["coverage", str(tmp_path), "--bench", str(tmp_path / "bench")]) == 0
    rows = json.loads((tmp_path / "bench" / "bench.json").read_text())["results"]
    assert rows == [{"model": "top", "design": "", "line_hit": 2, "line_points": 3, "line_pct": 66.67,
                     "toggle_hit": 3, "toggle_points": 6, "toggle_pct": 50.0,
                     "lines_missed": 1, "signals_missed": 2}]
    capsys.readouterr()
    assert main(["coverage", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.strip() == f"bertforge: error: no coverage directory {tmp_path / 'none'}"


def test_mutant_substitution_applies_only_to_its_design(tmp_path, monkeypatch):
    (tmp_path / "mutant.v").write_text("module top; endmodule\n")
    (tmp_path / "original.sha256").write_text(hashlib.sha256(_VERILOG.encode()).hexdigest())
    monkeypatch.setenv("BERTFORGE_MUTANT", str(tmp_path))
    assert runner._substitute(_VERILOG) == "module top; endmodule\n"
    assert runner._substitute("module other; endmodule\n") == "module other; endmodule\n"


@pytest.mark.slow
def test_coverage_of_a_real_2x2_systolic_run(tmp_path, monkeypatch):
    from bertforge.generators.systolic_sim import random_systolic_tiles, simulate_systolic
    from bertforge.rtl.systolic import SystolicConfig
    monkeypatch.setenv("BERTFORGE_COVERAGE", str(tmp_path))
    config = SystolicConfig(rows=2, cols=2, dataflow="os")
    tiles = random_systolic_tiles(config, 3, 2, np.random.default_rng(0))
    assert simulate_systolic(config, tiles, seed=1, c_stall=0.3)["match"]
    (model,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    assert model.name.startswith("systolic_2x2_os-cov-")
    assert len(list(model.glob("*.dat"))) == 1
    reports, text = coverage.write_report(tmp_path)
    summary = reports[model.name]
    assert set(summary) >= {"(all)", "systolic_2x2_os", "systolic_2x2_os.queue.fifo"}
    total = summary["(all)"]
    assert total["line_points"] > 100 and 0 < total["line_hit"] < total["line_points"]
    assert total["toggle_points"] > 1000 and 50 < total["toggle_pct"] < 100
    # a second run adds its counts to the same model
    assert simulate_systolic(config, tiles, seed=2, c_stall=0.0)["match"]
    assert len(list(model.glob("*.dat"))) == 2


def test_record_lists_the_designs_run(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFORGE_RECORD", str(tmp_path))
    runner._record(_VERILOG, "top")
    runner._record(_VERILOG, "top")
    name = f"top-{hashlib.sha256(_VERILOG.encode()).hexdigest()}.v"
    assert (tmp_path / name).read_text() == _VERILOG
    assert (tmp_path / "runs.txt").read_text().split() == [name, name]
