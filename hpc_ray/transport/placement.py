"""Keep an actor off the CPU of callers that busy-poll for its answers from several threads.

A caller of a direct actor call busy-polls for the answer (``wait.py``). That
pays while the actor runs on another CPU; on the caller's own CPU the actor
cannot answer until the caller stops polling. Threads of one process also share
a GIL, which then passes between CPUs at every socket call. Two driver threads
calling two actors on 2 cores (``benchmarks/placement.py``, medians): 25,000-27,000
calls/s with both actors on one CPU and the threads on the other, 23,000 with
each thread beside the other's actor, 11,000 with each thread beside its own
actor; unpinned, a run landed on the slow placement or a fast one.

So a caller whose process has several threads calling actors tells each actor,
with one call in ``TELL_EVERY``, which CPU it is on; an actor that finds its
main thread (the one that runs calls) on that CPU ``SAME_IN_A_ROW`` times in a
row moves it elsewhere (``nudge``): it narrows the thread's CPU mask to the
other CPUs and at once restores it, so the kernel moves the thread and it keeps
the mask it had (the user's, or the launcher's binding). At most one nudge per
``MIN_INTERVAL``: where every CPU is busy, moving does not help for long.

A lone calling thread does not tell: with a CPU free the kernel keeps it and its
actor apart by itself, and caller tasks (one thread each, as many processes as
cores) measured slower with their actors moved.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time

#: A caller sends its CPU with one call in this many on a link.
TELL_EVERY = 32
#: Reports in a row that find the caller on the actor's CPU before it moves.
SAME_IN_A_ROW = 2
#: Seconds between two nudges of one process at least.
MIN_INTERVAL = 0.02


def _sched_getcpu():
    """libc's ``sched_getcpu`` (the CPU the calling thread runs on), or None."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn if fn() >= 0 else None


#: The calling thread's CPU now (an int), or None where it cannot be read.
current_cpu = _sched_getcpu()


def cpu_ids() -> list[int] | None:
    """The CPUs this process may run on (its affinity mask), or None where that
    cannot be read."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cores() -> int:
    """How many CPUs this process may run on (its affinity mask where there is one)."""
    ids = cpu_ids()
    return len(ids) if ids else os.cpu_count() or 1


def nudge() -> bool:
    """Move the calling thread off the CPU it runs on, keeping its CPU mask.
    False where it has no other CPU."""
    if current_cpu is None:
        return False
    try:
        allowed = os.sched_getaffinity(0)
        others = allowed - {current_cpu()}
        if not others:
            return False
        os.sched_setaffinity(0, others)
        os.sched_setaffinity(0, allowed)
    except OSError:
        return False
    return True


class Neighbour:
    """The actor's side: reports of its callers' CPUs, and when to move."""

    __slots__ = ("same", "last", "nudges")

    def __init__(self) -> None:
        self.same = 0
        self.last = 0.0
        self.nudges = 0

    def caller_at(self, cpu: int) -> None:
        """A caller runs on ``cpu``; move if this thread keeps running there too.

        Only the main thread (the one that runs the calls) looks and moves; a
        report read by another thread of the actor's is ignored."""
        if current_cpu is None or threading.current_thread() is not threading.main_thread():
            return
        if current_cpu() != cpu:
            self.same = 0
            return
        self.same += 1
        if self.same < SAME_IN_A_ROW:
            return
        self.same = 0
        now = time.monotonic()
        if now - self.last < MIN_INTERVAL:
            return
        self.last = now
        if nudge():
            self.nudges += 1
