"""The command line as the CLI tests drive it: in its own process, its
one-line errors, and the user's ``.npy`` files (``from cli_helpers import``)."""

import subprocess
import sys

import numpy as np


def run_cli(*args, cwd=None):
    """``bertforge ARGS`` in a new Python process: the finished process."""
    return subprocess.run([sys.executable, "-m", "bertforge.generators.cli", *args],
                          capture_output=True, text=True, cwd=cwd)


def assert_one_line_error(result, message):
    """``result`` (of :func:`run_cli`) ended with exit code 2 and one line
    ``bertforge: error: ...`` holding ``message``, no traceback."""
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bertforge: error: ")
    assert message in lines[0]
    assert "Traceback" not in result.stderr


def npy_flags(directory, out="c.npy", **arrays):
    """Each array saved as ``directory/<name>.npy``: the flags ``--<name> PATH``
    for them, then ``--out directory/<out>``."""
    flags = []
    for name, array in arrays.items():
        np.save(directory / f"{name}.npy", array)
        flags += [f"--{name}", str(directory / f"{name}.npy")]
    return flags + ["--out", str(directory / out)]
