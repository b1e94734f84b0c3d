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
"""
from __future__ import annotations

import os
import time

#: Longest busy-poll before blocking, seconds (``HPC_RAY_SPIN_US``; 0 turns it off).
BUDGET = float(os.environ.get("HPC_RAY_SPIN_US", "300")) * 1e-6
#: Spin while the moving average of hits is above this.
KEEP = 0.3
#: When not spinning, spin on one wait in this many to see whether it pays again.
PROBE_EVERY = 32


class Spinner:
    __slots__ = ("score", "waits")

    def __init__(self) -> None:
        self.score = 1.0
        self.waits = 0

    def due(self) -> bool:
        """Whether this wait should spin: recent spins paid, or it is a probe."""
        self.waits += 1
        return self.score > KEEP or self.waits % PROBE_EVERY == 0

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
