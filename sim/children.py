"""Child processes die with bertforge.

:func:`guard` wraps the ``bertforge`` command line (not library calls: a
test's or a notebook's process is left alone):

- SIGTERM and SIGHUP raise :class:`Terminated` (a ``KeyboardInterrupt``), so
  ``kill PID`` unwinds like Ctrl-C: ``subprocess.run`` kills the child it
  waits for, work directories are removed, no partial output is left;
- bertforge becomes a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a
  grandchild whose parent died (``make`` -> ``g++``, ``sby`` -> a solver) is
  re-parented to bertforge instead of ``init``, so it stays findable;
- every child started through :mod:`subprocess` gets a parent-death signal
  (Linux ``PR_SET_PDEATHSIG``, SIGKILL): even ``kill -9`` of bertforge ends
  its direct children;
- on every exit every descendant still running gets SIGTERM, then SIGKILL
  after a grace period, and is reaped;
- after the first interrupt, further ones are ignored while bertforge
  cleans up (a third one exits at once, quietly).
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

__all__ = ["Terminated", "guard", "descendants", "end_descendants"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class Terminated(KeyboardInterrupt):
    """bertforge was sent SIGTERM or SIGHUP (``signum``)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _parent_death_signal():
    """Run in the child between fork and exec: die with the parent."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def descendants(pid=None):
    """Process ids of every living descendant of ``pid`` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _reap():
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def end_descendants(grace=2.0):
    """SIGTERM every descendant, SIGKILL those alive after ``grace`` s; reap."""
    pids = descendants()
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap()
        pids = descendants()
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    _reap()


def _single_threaded():
    """True if no thread but the main one (and a progress bar's) runs."""
    main = threading.main_thread()
    return all(t is main or t.name == "bertforge-progress" for t in threading.enumerate())


class _Popen(subprocess.Popen):
    """``subprocess.Popen`` whose children die with bertforge (a parent-death
    signal), unless the caller set its own ``preexec_fn`` or threads run
    (``preexec_fn`` is unsafe then)."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("preexec_fn") is None and _single_threaded():
            kwargs["preexec_fn"] = _parent_death_signal
        super().__init__(*args, **kwargs)


@contextlib.contextmanager
def guard():
    """Around the command line: see the module docstring. Yields; the caller
    turns :class:`Terminated` / ``KeyboardInterrupt`` into its exit code."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        yield
        return
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    interrupts = []

    def handler(signum, frame):
        interrupts.append(signum)
        if len(interrupts) == 1:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated(signum)
        if len(interrupts) > 2:
            os._exit(128 + signum)
        # the second: ignored while cleaning up

    saved = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    popen = subprocess.Popen
    subprocess.Popen = _Popen
    try:
        yield interrupts
    finally:
        subprocess.Popen = popen
        try:
            end_descendants()
        finally:
            for sig, previous in saved.items():
                signal.signal(sig, previous)
