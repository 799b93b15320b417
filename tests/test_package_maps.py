"""Each package's ``__init__`` docstring maps its folder: every module of
rtl, sim, boards and generators is named there (as ``name.py``)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def unmapped(package):
    folder = ROOT / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    return sorted(path.name for path in folder.glob("*.py")
                  if path.name != "__init__.py" and f"``{path.name}``" not in doc)


@pytest.mark.parametrize("package", ["rtl", "sim", "boards", "generators"])
def test_every_module_is_in_the_package_map(package):
    assert unmapped(package) == []
