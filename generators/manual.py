"""``bertforge docs``: build the manual (``generators/docs/``, a Sphinx
project shipped as package data) into HTML, offline, and say where it is.

    bertforge docs                   # ./bertforge-docs/index.html
    bertforge docs --out /tmp/manual
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .cli_common import CliError
from .userfiles import check_output

__all__ = ["DOCS", "add_parser", "build_manual", "run_docs", "store_bench"]

#: The manual's Sphinx source folder (conf.py, the MyST pages, results/).
DOCS = Path(__file__).resolve().parent / "docs"


def add_parser(commands):
    """The ``docs`` command and its ``--out DIR``."""
    docs = commands.add_parser("docs", help="build the manual (HTML, offline) and print where it is",
                               description="Build the bertforge manual (Sphinx, offline) as HTML.",
                               epilog="example: bertforge docs --out /tmp/manual")
    docs.add_argument("--out", default="bertforge-docs", metavar="DIR",
                      help="output directory, new or a previous manual build (default bertforge-docs)")


def _check_out(out):
    """``out`` may be new, empty, or a previous build (Sphinx's ``.buildinfo``);
    its parent must exist (the build is swapped in from beside it)."""
    check_output(out, "--out", directory=True)
    if out.is_dir() and any(out.iterdir()) and not (out / ".buildinfo").is_file():
        raise CliError(f"--out {out} is a directory that holds other files and no manual; "
                       "give a new or empty directory")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise CliError(f"--out {out}: its parent directory {parent} does not exist")


def build_manual(out, *, warnings_are_errors=False):
    """Build the HTML manual into ``out`` (a temporary directory beside it,
    swapped in once complete, so no half-built manual is left); return the
    path of its ``index.html``. Raises ``RuntimeError`` with Sphinx's output
    if the build fails."""
    out = Path(out)
    _check_out(out)
    parent = out.resolve().parent
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=parent))
    try:
        command = [sys.executable, "-m", "sphinx", "-q", "-b", "html",
                   "-d", str(work / ".doctrees"), *(["-W"] if warnings_are_errors else []),
                   str(DOCS), str(work / "html")]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"sphinx failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        if out.exists():
            shutil.rmtree(out)
        (work / "html").replace(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out / "index.html"


def run_docs(args):
    index = build_manual(args.out)
    print(f"wrote the manual: {index.resolve()}")
    return 0


def store_bench(bench_dir, name, command, *, title=None, columns=None, notes=None, machine=None):
    """Store ``bench_dir/bench.json`` (what ``bertforge bench`` wrote) as
    the manual's ``results/NAME.json``: its rows, with the ``command`` that
    made it, today's date, the ``machine`` (default: this one's CPU count,
    processor and system) and the commit of this checkout. ``title``,
    ``columns`` (``[header, format template]`` pairs) and ``notes`` default
    to those of the stored file being replaced, so a rerun of a bench
    updates its table with ``store_bench(DIR, NAME, COMMAND)``."""
    import datetime
    import json
    import platform
    path = DOCS / "results" / f"{name}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    rows = json.loads((Path(bench_dir) / "bench.json").read_text())["results"]
    if machine is None:
        cpu = platform.processor() or platform.machine()
        machine = f"{os.cpu_count()} CPUs, {cpu}, {platform.system()} {platform.release()}"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=DOCS, capture_output=True,
                            text=True).stdout.strip()
    result = {"title": title or old.get("title", name), "command": command,
              "date": datetime.date.today().isoformat(), "machine": machine, "commit": commit,
              "columns": columns or old["columns"], "rows": rows,
              "notes": list(notes if notes is not None else old.get("notes", []))}
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path
