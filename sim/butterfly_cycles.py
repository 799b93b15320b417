"""Cycle model of :class:`~bertforge.rtl.butterfly.ButterflyEngine`.

Counted from the first ``x`` handshake to the last ``y`` handshake, both
included, with every command queued on ``cmd`` from the start, ``x`` and
``w`` always valid and ``y`` always ready.

:func:`butterfly_timeline` follows each group of ``lanes`` vectors through
the engine's three stages (load, compute, drain) and the ``SLOTS`` buffers
between them, cycle-exact for any queue of commands (weight loads, rejected
commands, mixed lengths and modes). :func:`butterfly_cycles` is its closed
form for one command, or for commands of one length back to back.
"""

from bertforge.rtl.butterfly import MODES, SLOTS, command_is_valid, stage_period
from .butterfly_golden import butterfly_groups, log2_length

__all__ = ["PIPELINE_CYCLES", "butterfly_groups", "butterfly_cycles", "butterfly_ideal_cycles",
           "butterfly_timeline", "butterfly_queue_cycles"]

#: Fixed cycles around the stream: compute start after the last load beat,
#: result writes, drain read and output queue.
PIPELINE_CYCLES = 8

#: Cycles from a group's last issue until the drain may take it (3 pipeline
#: registers, then the ready count).
_DRAIN_AFTER_ISSUE = 4

#: Cycles from a drain read until its ``y`` handshake (read, queue, buffer).
_OUTPUT_DELAY = 3


def butterfly_cycles(config, n, batch):
    """Cycles of one command of ``batch`` vectors of length ``n``:
    ``2n + G m T - (T - n/2) + PIPELINE_CYCLES`` with ``G`` groups, ``m =
    log2 n`` stages of ``T = max(n/2, n/4 + 4)`` cycles (the last stage of the
    last group needs only its ``n/2`` issues). The first ``n`` are loading the
    first group, the other ``n`` draining the last; compute of one group
    overlaps loading the next and draining the previous.

    Compute is the bottleneck at every length (``m T >= n``, and a free slot
    always comes in time), so commands of one length ``n`` back to back take
    the same formula with ``G`` the sum of their groups: the loader's one idle
    cycle between two commands stays hidden. :func:`butterfly_queue_cycles`
    gives the same number for such a queue (a test checks it for every ``n``
    from 2 to 1024)."""
    m = log2_length(config, n)
    groups = butterfly_groups(config, batch)
    period = stage_period(n)
    return 2 * n + groups * m * period - (period - n // 2) + PIPELINE_CYCLES


def butterfly_ideal_cycles(config, n, batch):
    """``batch * (n/2) * log2(n) / lanes``: every lane busy every cycle."""
    return batch * (n // 2) * log2_length(config, n) / config.lanes


def _job_groups(config, job):
    if "groups" in job:
        return job["groups"]
    return butterfly_groups(config, job.get("batch", 0))


def butterfly_timeline(config, jobs):
    """Cycle of the first ``x`` handshake and of the last ``y`` handshake of
    each job in ``jobs`` (dicts with ``mode``, ``n`` and ``batch`` or
    ``groups``, as in :mod:`bertforge.sim.butterfly_tb`), all sent back to back;
    ``None`` for a weight load or a rejected command. Cycle 0 is the one in
    which the engine takes the first command.

    The engine's rules, per group ``g`` (numbered over all commands):

    * the loader takes a command in one cycle; a rejected one costs only that
      cycle, a weight load then waits until compute is idle and takes its
      ``(n/2) log2 n`` beats, a compute command loads its groups, ``n`` beats
      each, back to back; group ``g`` starts once group ``g - SLOTS`` has
      drained;
    * compute takes group ``g`` the cycle after its last beat or in the cycle
      group ``g - 1`` finishes (``log2 n`` stages of ``T`` cycles), whichever
      is later; its last issue is ``(log2 n - 1) T + n/2`` cycles after that;
    * the drain takes it 4 cycles after that last issue or when group
      ``g - 1`` has drained (``n`` cycles), whichever is later; each drain read
      reaches ``y`` 3 cycles later.
    """
    accept = 0              # cycle in which the loader takes the next command
    compute_free = None     # cycle the previous group's compute finishes
    drain_free = None       # cycle the previous group's drain finishes
    drained = []            # per group: cycle its drain finishes
    timeline = []
    for job in jobs:
        mode, n = MODES[job["mode"]], job["n"]
        groups = _job_groups(config, job)
        if not command_is_valid(config, mode, n, groups):
            timeline.append(None)
            accept += 1
            continue
        m = n.bit_length() - 1
        if mode == MODES["weights"]:
            first = accept + 1 if compute_free is None else max(accept + 1, compute_free + 1)
            accept = first + (n // 2) * m
            timeline.append(None)
            continue
        period = stage_period(n)
        start = accept + 1
        first_x = None
        for _ in range(groups):
            if len(drained) >= SLOTS:
                start = max(start, drained[-SLOTS] + 1)
            first_x = start if first_x is None else first_x
            loaded = start + n - 1
            take = loaded + 1 if compute_free is None else max(loaded + 1, compute_free)
            compute_free = take + m * period
            last_issue = take + (m - 1) * period + n // 2
            drain_take = last_issue + _DRAIN_AFTER_ISSUE
            if drain_free is not None:
                drain_take = max(drain_take, drain_free)
            drain_free = drain_take + n
            drained.append(drain_free)
            start = loaded + 1
        accept = start
        timeline.append((first_x, drain_free + _OUTPUT_DELAY))
    return timeline


def butterfly_queue_cycles(config, jobs):
    """Cycles of ``jobs`` back to back, from the first ``x`` handshake of the
    first compute job to the last ``y`` handshake of the last one
    (:func:`butterfly_timeline`); ``None`` if no job computes. Exact for
    any mix of lengths, modes and weight loads; for one length it equals
    :func:`butterfly_cycles` of the total groups."""
    spans = [span for span in butterfly_timeline(config, jobs) if span is not None]
    if not spans:
        return None
    return spans[-1][1] - spans[0][0] + 1
