"""bertforge's on-disk caches: entries that check themselves, bounded in size.

Everything lives under ``$BERTFORGE_CACHE`` (default ``~/.cache/bertforge``),
one folder per kind (``verilator``: built simulators, ``verilog``: emitted
Verilog, ``models``, ``sweep``). A cache *entry* is a directory; it is
valid only when its ``manifest.json`` -- written last, atomically (a
temporary file renamed over it) -- matches what is on disk: every file's
name, size and SHA-256, the tool versions and the source key the entry was
made from. An entry that does not match is removed and rebuilt, with one
line on stderr saying why (:func:`check`).

Size. Past ``BERTFORGE_CACHE_MAX`` (bytes, or with a suffix K, M, G, T;
default :data:`DEFAULT_MAX`, 4G; ``0`` or ``none``: unbounded) the least
recently used entries are removed (:func:`prune`, run after each new entry).
An entry's last use is its manifest's modification time (:func:`touch`).
An entry in use is never removed: users hold a shared lock on
``<entry>.use`` while they use it (:func:`lease`), builders an exclusive
lock on ``<entry>.lock``; eviction takes both without waiting and skips the
entry when it cannot.

``bertforge cache`` shows the entries and their sizes; ``bertforge cache
prune`` and ``bertforge cache clear`` remove the least recently used ones
(down to the limit) or all that are not in use.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from bertforge.rtl.errors import BertforgeError

__all__ = ["CacheError", "DEFAULT_MAX", "EVICTABLE", "root", "cache_root", "max_bytes", "seal", "check",
           "touch", "invalidate", "lease", "entries", "prune", "clear", "format_size",
           "store_speed", "speed", "duration", "store_duration"]

#: The default size limit (bytes) when ``BERTFORGE_CACHE_MAX`` is not set.
DEFAULT_MAX = 4 << 30

MANIFEST = "manifest.json"

#: The kinds of entries eviction may remove: the ones bertforge rebuilds by
#: itself. Fetched checkpoints (``models``) and sweep results (``sweep``)
#: are removed only by ``bertforge cache clear``.
EVICTABLE = ("verilator", "verilog")
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class CacheError(BertforgeError, ValueError):
    """A bad cache setting (``BERTFORGE_CACHE_MAX``)."""


def root():
    """``$BERTFORGE_CACHE`` (default ``~/.cache/bertforge``)."""
    value = os.environ.get("BERTFORGE_CACHE")
    return Path(value) if value else Path.home() / ".cache" / "bertforge"


def cache_root(name):
    """``$BERTFORGE_CACHE/name``: the one place bertforge's caches of kind
    ``name`` (Verilator builds, Verilog, model files) live."""
    return root() / name


def max_bytes():
    """The size limit from ``BERTFORGE_CACHE_MAX`` (None: unbounded)."""
    text = os.environ.get("BERTFORGE_CACHE_MAX", "").strip()
    if not text:
        return DEFAULT_MAX
    if text.lower() in ("0", "none", "unlimited"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?", text, re.IGNORECASE)
    if not match:
        raise CacheError(f"BERTFORGE_CACHE_MAX must be a size such as 4G, 500M or 1000000 "
                         f"(bytes), not {text!r}")
    return int(float(match.group(1)) * _SUFFIXES[match.group(2).upper()])


def format_size(size):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _say(message):
    print(f"bertforge: {message}", file=sys.stderr, flush=True)


def _hash(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(directory):
    return sorted(path for path in directory.rglob("*")
                  if path.is_file() and path.name != MANIFEST and not path.name.endswith(".tmp"))


def seal(directory, *, tools, source):
    """Write ``directory``'s manifest (last, atomically): its files with
    their sizes and hashes, ``tools`` (versions) and ``source`` (the key it
    was made from). The entry is valid from here on."""
    directory = Path(directory)
    files = {path.relative_to(directory).as_posix(): {"size": path.stat().st_size, "sha256": _hash(path)}
             for path in _files(directory)}
    manifest = {"tools": tools, "source": source, "files": files}
    tmp = directory / f"{MANIFEST}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(directory / MANIFEST)
    _checked.add(str(directory))


#: Entries checked by this process (a check hashes every file once).
_checked = set()


def _problem(directory, tools, source):
    """Why ``directory`` is not a valid entry (None if it is)."""
    manifest_path = directory / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return "no manifest (an interrupted build?)"
    except (OSError, ValueError) as error:
        return f"unreadable manifest ({type(error).__name__})"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return "malformed manifest"
    if manifest.get("tools") != tools:
        return f"built with other tools ({manifest.get('tools')})"
    if manifest.get("source") != source:
        return "built from another source"
    expected = manifest["files"]
    present = {path.relative_to(directory).as_posix(): path for path in _files(directory)}
    for name in expected:
        if name not in present:
            return f"{name} is missing"
    for name, path in present.items():
        if name not in expected:
            return f"{name} was added"
        if path.stat().st_size != expected[name].get("size"):
            return f"{name} has {path.stat().st_size} bytes, not {expected[name].get('size')}"
    for name, path in present.items():
        if _hash(path) != expected[name].get("sha256"):
            return f"{name} was changed"
    return None


def check(directory, *, tools, source, what, repair=True):
    """True if ``directory`` is a valid entry (its use recorded). A damaged
    one is removed, with one line naming ``what`` and the reason; False
    then, and when there is none. With ``repair`` false (a look without the
    entry's build lock), an entry with no manifest yet is left alone: it may
    be a build another process is making right now (the manifest is
    written last)."""
    directory = Path(directory)
    if not directory.exists():
        return False
    if not repair and not (directory / MANIFEST).exists():
        return False
    if str(directory) in _checked and (directory / MANIFEST).exists():
        touch(directory)
        return True
    problem = _problem(directory, tools, source)
    if problem is None:
        _checked.add(str(directory))
        touch(directory)
        return True
    _say(f"the cached {what} in {directory} is damaged ({problem}); rebuilding it")
    invalidate(directory)
    return False


def touch(directory):
    """Record a use of the entry ``directory`` (for least-recently-used eviction)."""
    with contextlib.suppress(OSError):
        os.utime(Path(directory) / MANIFEST)


def invalidate(directory):
    """Remove the entry ``directory`` (its manifest first, so that a
    removal cut short leaves no entry that looks valid)."""
    directory = Path(directory)
    _checked.discard(str(directory))
    with contextlib.suppress(FileNotFoundError):
        (directory / MANIFEST).unlink()
    shutil.rmtree(directory, ignore_errors=True)


def _lock_path(directory, kind):
    return directory.parent / f"{directory.name}.{kind}"


@contextlib.contextmanager
def lease(directory):
    """Hold a shared lock on ``directory`` while it is used: eviction
    (:func:`prune`, :func:`clear`) leaves it alone meanwhile."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(directory, "use"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            yield directory
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _exclusive(directory):
    """Both locks of ``directory`` without waiting; yields False if it is in use."""
    handles = []
    try:
        for kind in ("lock", "use"):
            handle = open(_lock_path(directory, kind), "a")
            handles.append(handle)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
        yield True
    finally:
        for handle in handles:
            handle.close()


def _size(directory):
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


def entries(kinds=None):
    """Every entry under the cache (of ``kinds``, default all): dicts with
    ``kind``, ``name``, ``path``, ``size`` (bytes), ``used`` (last use,
    seconds since the epoch) and ``sealed`` (has a manifest)."""
    found = []
    base = root()
    if not base.is_dir():
        return found
    for kind in sorted(p for p in base.iterdir() if p.is_dir()):
        if kinds is not None and kind.name not in kinds:
            continue
        for path in sorted(kind.iterdir()):
            if path.suffix in (".lock", ".use", ".tmp"):
                continue
            manifest = path / MANIFEST
            sealed = manifest.exists()
            try:
                used = (manifest if sealed else path).stat().st_mtime
                size = _size(path) if path.is_dir() else path.stat().st_size
            except OSError:
                continue
            found.append({"kind": kind.name, "name": path.name, "path": path, "size": size,
                          "used": used, "sealed": sealed})
    return found


def _remove(entry):
    """Remove ``entry`` unless it is in use; True if removed."""
    path = entry["path"]
    with _exclusive(path) as free:
        if not free:
            return False
        if path.is_dir():
            invalidate(path)
        else:       # a file an older bertforge left (its entries were files)
            with contextlib.suppress(OSError):
                path.unlink()
        for kind in ("lock", "use"):
            with contextlib.suppress(OSError):
                _lock_path(path, kind).unlink()
    return True


def prune(limit=None, *, quiet=True):
    """Remove least recently used entries (of the :data:`EVICTABLE` kinds)
    until they hold at most ``limit`` bytes (default: :func:`max_bytes`), skipping entries in use and
    entries being built. Returns the removed entries."""
    limit = max_bytes() if limit is None else limit
    if limit is None:
        return []
    found = entries(EVICTABLE)
    total = sum(entry["size"] for entry in found)
    removed = []
    # Unsealed entries younger than an hour may be builds under way (their
    # lock protects them too); older ones are leftovers and go first.
    stale = time.time() - 3600
    order = sorted(found, key=lambda e: (e["sealed"] or e["used"] > stale, e["used"]))
    for entry in order:
        if total <= limit:
            break
        if _remove(entry):
            total -= entry["size"]
            removed.append(entry)
            if not quiet:
                _say(f"evicted {entry['kind']}/{entry['name']} ({format_size(entry['size'])}; "
                     f"BERTFORGE_CACHE_MAX is {format_size(limit)})")
    return removed


def clear():
    """Remove every entry not in use; returns (removed, kept in use)."""
    removed, kept = [], []
    for entry in entries():
        (removed if _remove(entry) else kept).append(entry)
    return removed, kept


# ---- measured simulation speed (cycles per second), per design

_SPEED = "speed.json"


def speed(design):
    """Measured simulated cycles per second of ``design`` (None if never
    measured); of any design as a fallback (the slowest measured)."""
    try:
        data = json.loads((root() / _SPEED).read_text())
    except (OSError, ValueError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    values = [v for v in data.values() if isinstance(v, (int, float)) and v > 0]
    own = data.get(design)
    return (own if isinstance(own, (int, float)) and own > 0 else None,
            min(values) if values else None)


def store_speed(design, cycles, seconds):
    """Record that ``design`` simulated ``cycles`` in ``seconds``."""
    if cycles < 1000 or seconds <= 0.5:
        return     # start-up dominates: says nothing about the speed
    _update(_SPEED, design, cycles / seconds)


def _update(name, key, value):
    """Set ``key`` to ``value`` in the JSON object ``$BERTFORGE_CACHE/name``
    (written atomically; an unwritable cache only loses the record)."""
    path = root() / name
    with contextlib.suppress(OSError, ValueError):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        data[key] = value
        tmp = path.with_name(f"{name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        tmp.replace(path)


_DURATIONS = "durations.json"


def duration(key):
    """Seconds the work ``key`` (a proof, a board build) last took here (None: never)."""
    try:
        value = json.loads((root() / _DURATIONS).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, (int, float)) and value > 0 else None


def store_duration(key, seconds):
    """Record that the work ``key`` took ``seconds``."""
    _update(_DURATIONS, key, seconds)
