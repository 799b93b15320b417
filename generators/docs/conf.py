"""Sphinx configuration of the bertforge manual (``bertforge docs`` builds it).

Pages are MyST Markdown; the API pages use autodoc. Measured tables are not
typed into the pages: a page names a stored result with

    ```{bench-table} results/NAME.json
    ```

and the table is rendered from that file at build time (its rows, the
columns it names, the command that made it, the date and the machine).
"""

import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

project = "bertforge"
author = "the bertforge authors"
copyright = "the bertforge authors"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "results"]
html_theme = "furo"
html_title = "bertforge manual"
myst_heading_anchors = 3
autodoc_default_options = {"members": True}
autodoc_member_order = "bysource"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
# The manual builds offline: nothing is fetched (no intersphinx).
suppress_warnings = ["myst.xref_missing"]

HERE = Path(__file__).resolve().parent


def _cell(template, row):
    """``template.format(**row)``; "-" when the row lacks a field or it is None."""
    try:
        return template.format(**row)
    except (KeyError, TypeError, ValueError, IndexError):
        return "-"


def bench_table_markdown(result):
    """A stored result (``results/*.json``) as Markdown: its table, then
    where it comes from (command, date, machine, commit) and its notes.

    The file holds ``title``, ``command``, ``date``, ``machine``,
    ``commit`` (optional), ``columns`` (``[header, format template]``
    pairs, the template formatted with a row's fields), ``rows`` and
    ``notes`` (optional)."""
    columns = result["columns"]
    lines = ["| " + " | ".join(header for header, _ in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    for row in result["rows"]:
        cells = (_cell(template, row).replace("|", "\\|") for _, template in columns)
        lines.append("| " + " | ".join(cells) + " |")
    source = f"Made by `{result['command']}` on {result['date']}, {result['machine']}"
    if result.get("commit"):
        source += f" (commit {result['commit']})"
    lines += ["", source + "."]
    lines += [""] + [f"- {note}" for note in result.get("notes", ())]
    return lines


class BenchTable(Directive):
    """``{bench-table} results/NAME.json``: the stored result as a table."""
    required_arguments = 1
    has_content = False

    def run(self):
        env = self.state.document.settings.env
        relative, path = env.relfn2path(self.arguments[0])
        env.note_dependency(relative)
        try:
            result = json.loads(Path(path).read_text())
            text = bench_table_markdown(result)
        except (OSError, ValueError, KeyError) as error:
            raise self.error(f"bench-table {self.arguments[0]}: {error}")
        container = nodes.container(classes=["bench-table"])
        if result.get("title"):
            container += nodes.paragraph("", "", nodes.strong("", result["title"]))
        self.state.nested_parse(StringList(text), self.content_offset, container)
        return [container]


def setup(app):
    app.add_directive("bench-table", BenchTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
