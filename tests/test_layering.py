"""Imports run one way: rtl <- sim <- boards <- generators (each package
imports only the floors below it), and cocotb is imported only by testbench
modules. Checked on the source with ``ast`` (no module is imported), every
import statement at any depth (module level, in functions, in ``try``),
absolute (``bertforge.X``) and relative (``.X``, ``..X``) forms.

Testbench modules: ``sim/*_tb.py`` (``sim/stream_tb.py`` among them),
``boards/*_board_tb.py``, ``boards/uart_model.py``. One more module may
import ``cocotb_tools``: ``sim/runner.py`` is the Verilator runner and
imports ``cocotb_tools.runner`` inside its functions (never at module
level), so importing it loads no cocotb.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ["rtl", "sim", "boards", "generators"]          # ground floor first
TESTBENCH_GLOBS = {"sim": ["*_tb.py"], "boards": ["*_board_tb.py", "uart_model.py"]}
RUNNER = ("sim", "runner.py")


def _modules():
    for package in FLOORS:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


def _is_testbench(package, path):
    return any(path.match(pattern) and path.parent == ROOT / package
               for pattern in TESTBENCH_GLOBS.get(package, []))


def _imports(path):
    """``(line, module name, in a function)`` per import; relative imports
    resolved against the file's package (``bertforge.<folder>...``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = ["bertforge", *path.relative_to(ROOT).parent.parts]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[:len(package) - (child.level - 1)]
                    names = [".".join(base + ([child.module] if child.module else []))]
                    if not child.module:                    # from . import x, from .. import y
                        names = [f"{names[0]}.{alias.name}" for alias in child.names]
                else:
                    names = [child.module]
                found.extend((child.lineno, name, in_function) for name in names)
            visit(child, nested)

    visit(tree, False)
    return found


def _floor(name):
    """The floor a module name is on (``bertforge.sim.x`` -> ``sim``), or None."""
    parts = name.split(".")
    if parts[0] == "bertforge" and len(parts) > 1 and parts[1] in FLOORS:
        return parts[1]
    return None


def _violations():
    problems = []
    for package, path in _modules():
        where = path.relative_to(ROOT)
        level = FLOORS.index(package)
        testbench = _is_testbench(package, path)
        for line, name, in_function in _imports(path):
            target = _floor(name)
            if target is not None and FLOORS.index(target) > level:
                problems.append(f"{where}:{line}: imports {name}: {package} may import only "
                                f"{', '.join(FLOORS[:level + 1])} (rtl <- sim <- boards <- "
                                f"generators; nothing imports a floor above it)")
            top = name.split(".")[0]
            if top in ("cocotb", "cocotb_tools") and not testbench:
                if (package, path.name) == RUNNER and name == "cocotb_tools.runner" and in_function:
                    continue
                problems.append(f"{where}:{line}: imports {name}: cocotb only in testbench "
                                f"modules (sim/*_tb.py, boards/*_board_tb.py, "
                                f"boards/uart_model.py; sim/runner.py may import "
                                f"cocotb_tools.runner inside functions)")
    return problems


def test_no_upward_imports_and_cocotb_only_in_testbenches():
    problems = _violations()
    assert not problems, "\n".join(problems)


def test_the_checker_sees_every_form(tmp_path, monkeypatch):
    """The rule bites: upward imports at module level, in a function,
    absolute and relative, and cocotb outside a testbench are all found."""
    fake = tmp_path / "root"
    for package in FLOORS:
        (fake / package).mkdir(parents=True)
    (fake / "rtl" / "a.py").write_text("from ..sim import golden\n"
                                       "def f():\n    import bertforge.boards.host\n")
    (fake / "sim" / "b.py").write_text("from bertforge.generators.cli import main\n"
                                       "import cocotb\n")
    (fake / "sim" / "runner.py").write_text("def run():\n    from cocotb_tools.runner import get_runner\n")
    (fake / "sim" / "x_tb.py").write_text("import cocotb\nfrom bertforge.rtl import payload\n")
    (fake / "boards" / "c.py").write_text("try:\n    from bertforge.generators import blocks\n"
                                          "except ImportError:\n    pass\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    problems = _violations()
    assert [p.split(": ")[0] for p in problems] == [
        "rtl/a.py:1", "rtl/a.py:3", "sim/b.py:1", "sim/b.py:2", "boards/c.py:2"], problems
    assert "imports bertforge.sim: rtl may import only rtl" in problems[0]
    assert "cocotb only in testbench modules" in problems[3]


@pytest.mark.parametrize("module", ["bertforge.boards.host", "bertforge.boards.protocol",
                                    "bertforge.boards.build", "bertforge.generators.cli"])
def test_host_code_loads_no_cocotb(module):
    """Talking to a real board (or running the command line) never loads
    cocotb (each design's host side, ``boards/*_host.py``, imported too)."""
    hosts = "".join(f", bertforge.boards.{path.stem}"
                    for path in sorted((ROOT / "boards").glob("*_host.py")))
    code = f"import {module}{hosts}, sys; assert 'cocotb' not in sys.modules, sorted(sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _cycles(package):
    """The import cycles among the modules of ``package`` (each a sorted
    list of module names; imports at any depth count, as above)."""
    names = {path.stem for path in (ROOT / package).glob("*.py")}
    graph = {}
    for path in sorted((ROOT / package).glob("*.py")):
        targets = set()
        for _, name, _ in _imports(path):
            parts = name.split(".")
            if parts[:2] == ["bertforge", package] and len(parts) > 2 and parts[2] in names:
                targets.add(parts[2])
        graph[path.stem] = sorted(targets - {path.stem})
    # Tarjan's strongly connected components.
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", FLOORS)
def test_no_import_cycle_inside_a_package(package):
    """Inside a package too, imports run one way: the low modules
    (``generators``' ``cli_common``, ``presets``, ``emit``) are given the
    block, they never import the registry back."""
    assert _cycles(package) == []


def test_the_cycle_check_bites(tmp_path, monkeypatch):
    fake = tmp_path / "root"
    (fake / "generators").mkdir(parents=True)
    (fake / "generators" / "a.py").write_text("from .b import x\n")
    (fake / "generators" / "b.py").write_text("def f():\n"
                                              "    from bertforge.generators.c import y\n")
    (fake / "generators" / "c.py").write_text("from . import a\n")
    (fake / "generators" / "d.py").write_text("from .a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    assert _cycles("generators") == [["a", "b", "c"]]


def test_rtl_imports_no_numpy():
    """rtl is hardware only: the payload codec's numpy side is sim/payload_np.py."""
    found = [f"{path.relative_to(ROOT)}:{line}" for package, path in _modules() if package == "rtl"
             for line, name, _ in _imports(path) if name.split(".")[0] == "numpy"]
    assert found == []


#: Third-party packages only some floors may import: the LiteX SoC's
#: (Migen and LiteX are board-level dependencies) by package -> floors.
RESTRICTED = {name: ("boards",) for name in ("migen", "litex", "litedram", "litex_boards")}


def _restricted_imports(root):
    return [f"{path.relative_to(root)}:{line}: imports {name}" for package, path in _modules()
            for line, name, _ in _imports(path)
            if package not in RESTRICTED.get(name.split(".")[0], (package,))]


def test_litex_and_migen_only_in_boards():
    """Migen, LiteX, LiteDRAM and litex-boards are imported only by
    ``boards`` (the SoC); rtl, sim and generators never load them."""
    assert _restricted_imports(ROOT) == []


def test_the_litex_check_bites(tmp_path, monkeypatch):
    fake = tmp_path / "root"
    for package in FLOORS:
        (fake / package).mkdir(parents=True)
    (fake / "rtl" / "a.py").write_text("from migen import Module\n")
    (fake / "generators" / "b.py").write_text("def f():\n    import litex.soc.integration\n")
    (fake / "boards" / "c.py").write_text("from litedram.frontend.axi import LiteDRAMAXI2Native\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    assert _restricted_imports(fake) == ["rtl/a.py:1: imports migen",
                                         "generators/b.py:2: imports litex.soc.integration"]
