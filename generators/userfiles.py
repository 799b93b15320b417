"""Files a user names, read defensively: one line naming the file for a
missing, unreadable, binary or truncated one, never a traceback."""

import json
from pathlib import Path

from bertforge.rtl.errors import BertforgeError

__all__ = ["UserFileError", "read_text", "read_json", "check_output"]


class UserFileError(BertforgeError, ValueError):
    """A file the user named cannot be read or written as asked."""


#: The largest text file (TOML, JSON) bertforge reads.
MAX_TEXT_BYTES = 16 << 20


def read_text(path, what):
    """The UTF-8 text of ``path`` (``what`` names it in errors: "hardware
    config", ...)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_dir() and not path.is_file():
            raise UserFileError(f"{what} {path} is not a regular file")
        if path.is_file() and path.stat().st_size > MAX_TEXT_BYTES:
            raise UserFileError(f"{what} {path} has {path.stat().st_size:,} bytes; a text file "
                                f"bertforge reads has at most {MAX_TEXT_BYTES:,}")
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserFileError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise UserFileError(f"{what} {path} is a directory, not a file") from None
    except OSError as error:
        raise UserFileError(f"cannot read {what} {path}: {error.strerror or error}") from None
    if b"\0" in data:
        raise UserFileError(f"{what} {path} is a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserFileError(f"{what} {path} is not UTF-8 text (byte {error.start}: "
                            f"{data[error.start:error.start + 1]!r})") from None


def read_json(path, what):
    """The JSON value in ``path``; a truncated or foreign file is one line."""
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as error:
        raise UserFileError(f"{what} {path} is not valid JSON: {error}") from None


def check_output(path, flag, *, directory):
    """Check, before any work, that the output ``path`` of ``flag`` (a
    ``directory`` to create or fill, else a file to write) can be written:
    not empty, no existing file where a directory must be (or the reverse),
    and its first existing ancestor a writable directory."""
    if path is None:
        return
    text = str(path)
    if not text.strip():
        raise UserFileError(f"{flag} must name a {'directory' if directory else 'file'}, not an "
                            "empty string")
    path = Path(text)
    if path.exists():
        if directory and not path.is_dir():
            raise UserFileError(f"{flag} {path} exists and is not a directory")
        if not directory and path.is_dir():
            raise UserFileError(f"{flag} {path} is a directory; name a file")
    ancestor = path if directory and path.exists() else path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserFileError(f"{flag} {path}: {ancestor} is a file, not a directory")
    import os
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UserFileError(f"{flag} {path}: {ancestor} is not writable")
