"""A short busy-poll before a process blocks on its sockets, kept only while it pays off.

A sync actor call is two processes waking each other: the caller sends and waits,
the actor wakes, answers and waits for the next call. On this kind of VM a wake-up
from a blocking ``poll`` costs tens of microseconds, as much as the rest of the
call. Polling without blocking for up to ``BUDGET`` first catches an answer (or a
next call) that comes that soon, with no wake-up at all: a 1:1 sync loop ran 2x
faster (benchmarks/README.md). The budget must outlast the peer's side of a
round trip (its Python work between reading a message and writing the next,
about 100-150 us per side here): at 30 us the actor had gone to sleep before
each next call came, and a 1:1 sync loop ran 4,400 calls/s against 6,700 at
300 us (benchmarks/README.md).

Spinning takes a core from whoever else could run, so a process spins only while
its recent spins found something (``score``, a moving average of hits): with more
busy processes than cores the peer cannot answer within the spin, the spins miss,
and the process stops spinning; one wait in ``PROBE_EVERY`` spins anyway, to find
out when it pays again.

Between two polls the process yields its core (``sched_yield``): a process that
is ready to run on the same core, often the very peer whose answer the spin
waits for, runs at once instead of at the spinner's next preemption, and the
two hand the core to each other with no sleep and no wake-up. Where nothing
else is ready to run, the yield returns at once and the spin is as before. Two
caller tasks making sync calls to their own actors on 2 cores (four processes)
ran 15-25% more calls a second with the yield, 1:1 calls and tasks the same
(benchmarks/README.md, "Stop 27").

A spin that finds its answer still costs a core where none is spare: where
more threads are ready to run than the process has cores, it takes the time of
a thread that had work, such as another caller's actor. Those spins "pay" by
their hits all the same, so a task's process (``look``) also looks, on one wait
in ``LOOK_EVERY``, at how many threads the machine has ready to run
(``/proc/loadavg``), and does not spin while there are more than its cores
(``crowded``). A 1:1 loop (two threads ready at most) keeps its spin. Measured
in benchmarks/README.md, "Stop 29", on 2 cores: two caller tasks with two
actors ran 21-35% more calls a second, sync tasks 43-68% more (an idle
executor spinning for its next task took the core of the driver and the rank
that send it), bursts of async tasks within noise. Actors' and the driver's
spinners do not look: two driver threads calling two actors ran at half the
rate with every spinner looking, and 17-30% slower with the actors' looking.
"""
from __future__ import annotations

import os
import time

from .. import _config
from .placement import usable_cores

#: Longest busy-poll before blocking, seconds (``HPC_RAY_SPIN_US``; 0 turns it off).
BUDGET = _config.os_environ_get("SPIN_US", 300.0, float) * 1e-6
#: Spin while the moving average of hits is above this.
KEEP = 0.3
#: When not spinning, spin on one wait in this many to see whether it pays again.
PROBE_EVERY = 32
#: A spinner looks at how many threads are ready to run on one wait in this many.
LOOK_EVERY = 16


def _loadavg_fd() -> int:
    try:
        return os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


_LOADAVG = _loadavg_fd()


def ready_threads() -> int | None:
    """How many threads the machine has running or ready to run now (the fourth
    field of ``/proc/loadavg``, this one included), or None where it cannot tell."""
    if _LOADAVG < 0:
        return None
    try:
        return int(os.pread(_LOADAVG, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def crowded(cores: int) -> bool:
    """Whether more threads are ready to run than ``cores``."""
    ready = ready_threads()
    return ready is not None and ready > cores


class Spinner:
    __slots__ = ("score", "waits", "look", "cores", "crowded")

    def __init__(self, look: bool = False) -> None:
        self.score = 1.0
        self.waits = 0
        #: Whether to look for a crowd of ready threads (``crowded``) at all.
        self.look = look
        self.cores = usable_cores()
        #: Whether the machine had more threads ready than ``cores`` at the last look.
        self.crowded = False

    def due(self) -> bool:
        """Whether this wait should spin: recent spins paid, or it is a probe;
        and, for a spinner that looks, no crowd."""
        waits = self.waits = self.waits + 1
        if self.look:
            if not waits % LOOK_EVERY:
                self.crowded = crowded(self.cores)
            if self.crowded:
                return False
        return self.score > KEEP or not waits % PROBE_EVERY

    def scored(self, hit: bool) -> None:
        """A spin ended: ``hit`` if it found what it waited for."""
        self.score = self.score * 0.9 + 0.1 if hit else self.score * 0.9

    def poll(self, poller, timeout_ms: float | None) -> list:
        """``poller.poll(timeout_ms)``, after up to BUDGET of non-blocking polls."""
        if BUDGET and timeout_ms != 0 and self.due():
            end = time.perf_counter() + BUDGET
            while True:
                events = poller.poll(0)
                if events:
                    self.scored(True)
                    return events
                if time.perf_counter() > end:
                    break
                os.sched_yield()
            self.scored(False)
        return poller.poll(timeout_ms)
