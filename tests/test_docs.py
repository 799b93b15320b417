"""The manual and the examples: the Sphinx build has no warnings, every
```python block of the README and of every manual page runs, the README's
tour of the commands parses (the fast ones run), and ``--help`` shows no
default that the command refuses."""

import html
import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from bertforge.generators import manual
from bertforge.generators.blocks import BLOCKS
from bertforge.generators.cli import build_parser, main
from cli_helpers import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted(manual.DOCS.glob("*.md"))


def fenced(path, language):
    """The ```language blocks of the Markdown file ``path``: (line, text)."""
    blocks, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == f"```{language}":
            start, i = i + 1, i + 1
            while lines[i].strip() != "```":
                i += 1
            blocks.append((start + 1, "\n".join(lines[start:i])))
        i += 1
    return blocks


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The manual, built once with warnings as errors, as ``bertforge docs`` builds it."""
    return manual.build_manual(tmp_path_factory.mktemp("docs") / "html", warnings_are_errors=True)


def test_manual_builds_without_warnings(built):
    html = built.parent
    for page in PAGES:
        assert (html / f"{page.stem}.html").is_file(), page.name
    index = (html / "index.html").read_text()
    for page in PAGES:
        if page.stem != "index":
            assert f'href="{page.stem}.html"' in index, f"{page.name} is not in the index"


def test_measured_tables_come_from_stored_results(built):
    """Each stored result is named by some page and rendered with where it
    comes from (command, date, machine)."""
    text = html.unescape(re.sub(r"<[^>]+>", "", "".join(
        path.read_text() for path in built.parent.glob("*.html")))).replace("\u2019", "'")
    results = sorted((manual.DOCS / "results").glob("*.json"))
    assert results
    for path in results:
        result = json.loads(path.read_text())
        for key in ("command", "date", "machine", "columns", "rows"):
            assert result.get(key), f"{path.name} has no {key}"
        assert f"results/{path.name}" in "".join(p.read_text() for p in PAGES), path.name
        assert f"Made by {result['command']} on {result['date']}, {result['machine']}" in text


def test_bench_table_renders_rows_and_source():
    sys.path.insert(0, str(manual.DOCS))
    try:
        import conf
    finally:
        sys.path.remove(str(manual.DOCS))
    lines = conf.bench_table_markdown({
        "command": "bertforge bench x", "date": "2026-01-02", "machine": "m1",
        "columns": [["n", "{n:,}"], ["u", "{u:.1%}"]], "rows": [{"n": 1234, "u": 0.5}, {"n": 7}]})
    assert lines[:4] == ["| n | u |", "|---|---|", "| 1,234 | 50.0% |", "| 7 | - |"]
    assert "Made by `bertforge bench x` on 2026-01-02, m1." in lines


def test_docs_command_rebuilds_over_a_previous_build(built, capsys):
    """``bertforge docs --out DIR`` over a manual built before: replaced, and
    the path of its index printed."""
    (built.parent / "stale.html").write_text("old")
    assert main(["docs", "--out", str(built.parent)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote the manual: {built.resolve()}"
    assert built.is_file() and not (built.parent / "stale.html").exists()
    assert not [p for p in built.parent.parent.iterdir() if p.name.startswith(".html-")]


def test_docs_command_refuses_a_bad_out(tmp_path):
    (tmp_path / "file").write_text("x")
    assert_one_line_error(run_cli("docs", "--out", str(tmp_path / "file")), "is not a directory")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert_one_line_error(run_cli("docs", "--out", str(tmp_path / "mine")), "holds other files")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert_one_line_error(run_cli("docs", "--out", str(tmp_path / "no" / "such")), "does not exist")


EXAMPLES = [(path, line, code) for path in [README, *PAGES] for line, code in fenced(path, "python")]


@pytest.mark.parametrize("path, line, code", EXAMPLES,
                         ids=[f"{path.name}:{line}" for path, line, _ in EXAMPLES])
def test_python_example_runs(path, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{path}:{line}", "exec"), {"__name__": "__example__"})


def _tour():
    """The README's tour: the commands of its ```sh blocks after "## Tour"."""
    text = README.read_text()
    tour = text[text.index("## Tour"):]
    tour = tour[:tour.index("\n## ", 1)]
    commands = []
    for line in re.findall(r"```sh\n(.*?)```", tour, re.S):
        for command in line.splitlines():
            command = command.split("#")[0].strip()
            if command.startswith("bertforge "):
                commands.append(shlex.split(command)[1:])
    return commands


#: Tour commands that finish in a few seconds without Verilator or a board: run as they are.
FAST = {"presets", "boards", "analyze", "generate"}


@pytest.mark.parametrize("argv", _tour(), ids=lambda argv: " ".join(argv)[:60])
def test_tour_command(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if argv[0] in FAST:
        assert main(argv) == 0
        return
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    assert "usage: bertforge" in capsys.readouterr().out


def test_tour_has_fast_and_slow_commands():
    argvs = _tour()
    assert any(argv[0] in FAST for argv in argvs) and any(argv[0] not in FAST for argv in argvs)


def test_sim_help_shows_examples_and_what_gemm_needs():
    result = run_cli("sim", "--help")
    assert result.returncode == 0 and "examples:\n  bertforge sim systolic" in result.stdout
    gemm = run_cli("sim", "gemm", "--help").stdout
    assert re.search(r"--m M\s+rows of A and C \(needed without --a/--b\)", gemm)


def _sim_parsers():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    sims = next(a for a in commands["sim"]._actions if a.dest == "block").choices
    return parser, sims


#: The least each ``sim BLOCK`` needs besides its config flags.
NEEDS = {"systolic": ["--k", "4", "--tiles", "1"], "gemm": ["--m", "4", "--k", "4", "--n", "4"],
         "sparse": ["--pattern", "2:4", "--m", "4", "--k", "8", "--n", "4"],
         "butterfly": ["--n", "8"]}


def test_no_help_shows_a_default_the_simulator_refuses():
    """Every config flag of every ``sim BLOCK`` whose help shows a default:
    that value given explicitly passes the command's checks (config and
    stimulus, before Verilator)."""
    from bertforge.generators.simulate import block_config
    parser, sims = _sim_parsers()
    checked = 0
    for name, sub in sims.items():
        block = BLOCKS.get(name)
        if block is None or not block.simulates:
            continue
        for action in sub._actions:
            if not action.dest.startswith("cfg_"):
                continue
            assert "default None" not in (action.help or ""), (name, action.option_strings)
            match = re.fullmatch(r"default (\S+)", action.help or "")
            if not match:
                continue
            argv = ["sim", name, action.option_strings[0], match.group(1).strip("'"), *NEEDS.get(name, [])]
            args = parser.parse_args(argv)
            config = block_config(block, args)
            block.random_stimulus(config, args, np.random.default_rng(0))
            checked += 1
    assert checked > 40


def test_no_build_help_shows_a_default_the_board_top_refuses():
    """``build``'s config flags: each value its help shows (the generic
    default for the designs it names, the per-family value for gemm) is
    taken by the board top config of every board it applies to."""
    from bertforge.boards.targets import BOARDS, board
    from bertforge.generators.board_cli import board_designs
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    families = {"iCE40": "ice40", "ECP5": "ecp5"}
    designs, checked = board_designs(), 0
    for action in commands["build"]._actions:
        if not action.dest.startswith("cfg_") or not action.help:
            continue
        flag, text = action.option_strings[0], action.help
        cases = []
        generic = re.match(r"default (\S+) \(([\w, ]+)\)", text)
        if generic:
            cases += [(name, generic.group(1).strip("'"), None) for name in generic.group(2).split(", ")]
        cases += [("gemm", value, family) for value, family in
                  re.findall(r"(\S+) on (iCE40|ECP5|other boards)", text.split("gemm:")[-1])
                  if "gemm:" in text]
        for design, value, family in cases:
            for name in BOARDS:
                target = board(name)
                if family == "other boards" and target.family in families.values():
                    continue
                if family in families and target.family != families[family]:
                    continue
                args = parser.parse_args(["build", "--board", name, "--design", design, flag, value])
                designs[design].top_config(BLOCKS[design], args, target.clock_mhz, target)
                checked += 1
    assert checked > 100
