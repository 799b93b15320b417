"""Long simulations say how long, before they start.

:func:`watch` wraps a simulation whose cycle count the cycle model predicts.
The time is estimated from the design's measured speed (simulated cycles
per second, stored in the cache after each run of at least 1,000 cycles:
:func:`bertforge.sim.cache.store_speed`) or, for a design never run here,
:data:`COLD_SPEED` (conservative). Then:

- an estimate over the limit (:data:`DEFAULT_LIMIT` s; ``--max-minutes N``
  or ``BERTFORGE_MAX_MINUTES=N`` lifts it) is refused with one line, before
  anything runs;
- an estimate over :data:`PROGRESS_AFTER` s says so on stderr and shows a
  progress bar with the time left (from the estimate; a line every 30 s when
  stderr is not a terminal), unless the caller is quiet (``--json``).
"""

import contextlib
import os
import sys
import threading
import time

from . import cache
from .runner import SimulationError

__all__ = ["COLD_SPEED", "DEFAULT_LIMIT", "PROGRESS_AFTER", "limit", "set_limit", "estimate",
           "check", "watch", "timed", "progress", "record"]

#: Cycles per second assumed for a design never simulated on this machine
#: (a 4 x 4 GEMM harness measures about 58,000 on a shared 2-core
#: machine; larger designs run slower).
COLD_SPEED = 20_000
#: Estimates longer than this (seconds) are refused unless the limit is raised.
DEFAULT_LIMIT = 30 * 60
#: Estimates longer than this (seconds) show a progress bar.
PROGRESS_AFTER = 60

_LIMIT = []


def set_limit(minutes):
    """The limit for this process (``--max-minutes``); None: the default."""
    _LIMIT[:] = [] if minutes is None else [float(minutes) * 60]


def limit():
    """The limit in seconds: ``--max-minutes``, else ``BERTFORGE_MAX_MINUTES``, else the default."""
    if _LIMIT:
        return _LIMIT[0]
    text = os.environ.get("BERTFORGE_MAX_MINUTES", "").strip()
    if text:
        try:
            minutes = float(text)
        except ValueError:
            minutes = -1
        if not minutes > 0:
            raise SimulationError(f"BERTFORGE_MAX_MINUTES must be a positive number, not {text!r}")
        return minutes * 60
    return DEFAULT_LIMIT


#: Seconds a simulation takes to start (the simulator, Python, cocotb).
STARTUP = 1.5


def estimate(design, cycles):
    """(seconds, cycles per second, measured?) for ``cycles`` of ``design``."""
    own, _ = cache.speed(design)
    speed = own or COLD_SPEED
    return STARTUP + cycles / speed, speed, own is not None


def _clock(seconds):
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _words(seconds):
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 60:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} s"


def check(design, cycles):
    """Refuse ``cycles`` of ``design`` if the estimate passes the limit;
    return the estimate (seconds) and what it is based on."""
    seconds, speed, measured = estimate(design, cycles)
    basis = (f"{cycles:,} cycles at {speed:,.0f} cycles/s"
             f"{' measured' if measured else ', the cold-start assumption'}")
    if seconds > limit():
        raise SimulationError(
            f"simulating {design} would take about {_words(seconds)} ({basis}); the limit is "
            f"{_words(limit())}: give --max-minutes {int(seconds // 60) + 1} (or set "
            f"BERTFORGE_MAX_MINUTES) to run it, or a smaller size")
    return seconds, basis


@contextlib.contextmanager
def watch(design, cycles, *, quiet=False):
    """Around the simulation of ``cycles`` (the cycle model's) of ``design``:
    refuse it past the limit, show progress past :data:`PROGRESS_AFTER`."""
    if not cycles:
        yield
        return
    seconds, basis = check(design, cycles)
    with progress(f"simulating {design}", seconds, basis, quiet=quiet):
        yield


@contextlib.contextmanager
def timed(key, what, default, *, quiet=False, bar=True):
    """Around work (a proof run, a board build) that has no cycle model:
    estimated from the time the same ``key`` took here last (stored when it
    finishes), else ``default`` seconds; progress as :func:`watch`."""
    last = cache.duration(key)
    seconds = last or default
    basis = "as long as it took here last" if last else "a first run's rough guess"
    start = time.monotonic()
    with progress(what, seconds, basis, quiet=quiet, bar=bar):
        yield
    cache.store_duration(key, time.monotonic() - start)


@contextlib.contextmanager
def progress(what, seconds, basis, *, quiet=False, bar=True):
    """Past :data:`PROGRESS_AFTER` (estimated ``seconds``), one line with the
    estimate, then (``bar``) a progress bar with the time left on stderr."""
    if seconds <= PROGRESS_AFTER or quiet:
        yield
        return
    print(f"bertforge: {what}: about {_words(seconds)} ({basis})", file=sys.stderr, flush=True)
    if not bar:
        yield
        return
    done = threading.Event()
    start = time.monotonic()
    tty = sys.stderr.isatty()

    def show():
        last = 0.0
        while not done.wait(1.0):
            elapsed = time.monotonic() - start
            if not tty and elapsed - last < 30:
                continue
            last = elapsed
            fraction = min(elapsed / seconds, 0.99)
            bar = "#" * int(fraction * 30)
            left = max(seconds - elapsed, 0)
            line = (f"[{bar:<30}] {fraction:4.0%}  {_clock(elapsed)} elapsed, about "
                    f"{_clock(left)} left" + ("" if left else " (over the estimate)"))
            print(("\r" if tty else "") + line, end="" if tty else "\n", file=sys.stderr,
                  flush=True)

    thread = threading.Thread(target=show, daemon=True, name="bertforge-progress")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if tty:
            print(file=sys.stderr, flush=True)


def record(design, result, seconds):
    """Store ``design``'s measured speed from a run's ``result`` (its cycles)."""
    cycles = result.get("cycles") if isinstance(result, dict) else None
    if isinstance(cycles, int) and cycles > 0 and seconds > 2 * STARTUP:
        cache.store_speed(design, cycles, seconds - STARTUP)
