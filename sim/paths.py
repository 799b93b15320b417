"""Where bertforge keeps its files on disk: the one cache root that the
Verilator builds (:mod:`bertforge.sim.runner`), the emitted Verilog
(:mod:`bertforge.generators.emit`), model files and sweeps share."""

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root(name):
    """``$BERTFORGE_CACHE/name`` (default ``~/.cache/bertforge/name``): the one
    place bertforge's caches (Verilator builds, Verilog, model files) live."""
    root = os.environ.get("BERTFORGE_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "bertforge") / name
