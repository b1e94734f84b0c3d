"""How every loop and every wait of the runtime waits: one policy, read once.

A process of hpc_ray waits for one of three things: a message in MPI (which
cannot wake anyone, so it is polled), bytes on a socket (which can: ``poll``),
or a condition another process or thread makes true (a request completes, a
counter in shared memory moves). Each wait is one of:

    Backoff      a loop polling MPI: poll again at once a few times, short
                 sleeps while a reply is due, then sleeps doubling to a cap
                 (and to a deep cap after long quiet, where a Doorbell wakes it)
    Spinner      a wait on sockets: busy-poll up to SPIN_BUDGET, then block in
                 poll(); spin only while recent spins found something
    wait_until   any other wait on a condition: spin, then sleeps doubling from
                 SLEEP_FIRST to SLEEP_CAP, with a deadline and a liveness check
                 that runs every CHECK_EVERY, so no wait outlives a dead peer
    Doorbell     a loop's one wake-up file descriptor, rung by processes on its
                 host (``comm.Sender``) so that a sleeping loop need not poll

The numbers come from the environment once, at import (``_config``):

    HPC_RAY_SPIN_US        SPIN_BUDGET, the longest busy-poll before blocking
    HPC_RAY_SLEEP_CAP_US   SLEEP_CAP, the longest sleep of a wait whose answer
                           is due (a loop's back-off cap, wait_until's cap)
    HPC_RAY_WAIT_OFF       mechanisms turned off, comma-separated, for A/B runs
                           (``benchmarks/mechanisms.py``): see MECHANISMS

Each mechanism that takes a core on the bet that an answer comes soon (a spin,
a yield, a warm phase, a hand-over) can be turned off here, so that a run with
and without it on a node with a core per process shows whether it pays.
"""
from __future__ import annotations

import os
import socket
import time
from time import monotonic
from typing import Callable

from .. import _config
from .placement import usable_cores

# --- the policy -----------------------------------------------------------------------

#: What ``HPC_RAY_WAIT_OFF`` can turn off, and what each one is.
MECHANISMS = {
    "spin": "busy-poll sockets before blocking (Spinner; the driver's own rounds)",
    "yield": "sched_yield between the polls of a spin, instead of polling again at once",
    "look": "a task's process does not spin while /proc/loadavg shows more ready threads "
            "than cores",
    "repoll": "a loop polls MPI again at once a few times after activity (Backoff.spin_limit)",
    "warm": "a loop sleeps only SLEEP_FIRST at a time while a reply is due (Backoff.warm)",
    "handover": "rank 0's comm thread blocks until a driver thread it woke has the GIL",
}


def _names(text: str) -> frozenset:
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - set(MECHANISMS))
    if unknown:
        raise ValueError(f"unknown mechanism(s) {unknown} (known: {sorted(MECHANISMS)})")
    return names


#: Longest busy-poll before blocking, seconds (``HPC_RAY_SPIN_US``; 0 turns it off).
SPIN_BUDGET = max(0.0, _config.os_environ_get("SPIN_US", 300.0, float)) * 1e-6
#: Longest sleep between two polls while an answer is due (``HPC_RAY_SLEEP_CAP_US``).
#: An idle rank polls about this often: at 1 ms, ~2% of a core at ~20 us a poll.
SLEEP_CAP = max(1.0, _config.os_environ_get("SLEEP_CAP_US", 1000.0, float)) * 1e-6
#: First sleep of a back-off, and the warm phase's sleep. Below about 20 us a
#: sleep is a wake-up with no time slept (timer slack: ``comm.tighten_timer_slack``).
SLEEP_FIRST = min(2e-5, SLEEP_CAP)
#: Mechanisms turned off (``HPC_RAY_WAIT_OFF``).
OFF: frozenset = _config.os_environ_get("WAIT_OFF", frozenset(), _names)
#: wait_until runs its liveness check at most this often.
CHECK_EVERY = 0.02


def enabled(mechanism: str) -> bool:
    """Whether ``mechanism`` (a key of MECHANISMS) is on."""
    return mechanism not in OFF


def pause() -> None:
    """Between two polls of a spin: give the core to a thread ready to run on it
    (often the peer whose answer the spin waits for), unless ``yield`` is off."""
    if "yield" not in OFF:
        os.sched_yield()


class WaitTimeout(TimeoutError):
    """A wait_until passed its deadline."""


def wait_until(done: Callable[[], bool], timeout: float | None = None,
               alive: Callable[[], None] | None = None, spin: float | None = None,
               what: str = "a condition") -> None:
    """Return once ``done()`` is true.

    It polls ``done()`` back to back (``pause()`` between) for ``spin`` seconds
    (default SPIN_BUDGET), then sleeps between polls, from SLEEP_FIRST doubling
    to SLEEP_CAP. ``alive()`` runs every CHECK_EVERY and raises when what the
    wait depends on is gone (a peer process died); past ``timeout`` seconds it
    raises WaitTimeout naming ``what``. A wait with neither must be one whose
    answer cannot depend on another process (the caller says why)."""
    if done():
        return
    now = monotonic()
    deadline = None if timeout is None else now + timeout
    check = now + CHECK_EVERY
    spin_until = now + (SPIN_BUDGET if spin is None else spin) if enabled("spin") else now
    nap = SLEEP_FIRST
    polls = 0
    while not done():
        polls += 1
        if polls & 15 and now < spin_until:
            pause()
            continue
        now = monotonic()
        if now >= check:
            if alive is not None:
                alive()
            check = now + CHECK_EVERY
        if deadline is not None and now >= deadline:
            raise WaitTimeout(f"gave up waiting for {what} after {timeout:g} s")
        if now >= spin_until:
            time.sleep(nap)
            nap = min(2 * nap, SLEEP_CAP)
        else:
            pause()


# --- Backoff: a loop that polls MPI -------------------------------------------------

#: Polls at once after a ring (``Backoff.rung``).
RUNG_POLLS = 2
#: The warm phase of a loop whose every sender rings it (``Backoff.warm``, with
#: ``comm.SleepFlags``): after activity where a reply is due, it polls every
#: SLEEP_FIRST this long before its flagged sleeps. Waking a loop asleep on its
#: doorbell costs more than a 20 us poll on a VM (an idle vCPU halts): with no
#: warm phase, sync tasks under mpiexec ran at 1,300-3,100 a second against
#: 3,400-5,000 with a 10 ms one, and with 1 ms at 3,700-5,600
#: (benchmarks/results/flags-ab-2026-11-26.md).
FLAGGED_WARM = 0.001
#: The warm phase of other loops.
WARM = 0.01
#: A flagged loop's first sleep; the next ones double up to its deep cap. Each
#: costs one wake-up (about 6 per quiet spell up to 50 ms).
FLAGGED_FIRST = 0.001
#: Immediate polls after activity (``Backoff.spin_limit``).
REPOLLS = 20


class Backoff:
    """How long an idle loop should block before polling again.

    Right after activity the loop polls again at once ``spin_limit`` times (a
    sync round trip should not pay a sleep); for ``warm`` seconds after the
    last activity it sleeps only ``short`` seconds at a time, because the next
    message of a request/reply exchange is due within a round trip; after that
    the sleep doubles up to ``cap``. After ``deep_after`` seconds without
    activity (0: never) the sleep goes on doubling up to ``deep_cap``: a rank
    idle that long is woken by its Doorbell where its sender is on its host,
    and otherwise waits at most ``deep_cap`` for the next message.

    A loop whose every sender rings it whenever it sleeps (``flagged``: the
    whole job on one host, with ``comm.SleepFlags``) climbs fast: once its
    polls (and its warm phase, where a reply is due) are done it sleeps from
    FLAGGED_FIRST up, doubling to ``deep_cap`` (``flagged_sleep`` says so, and
    the loop raises its flag for those sleeps), unless ``deep`` is False
    (bytes on their way that need its polls). It climbs rather than sleeping
    ``deep_cap`` at once because a message sent just before its flag went up
    may reach MPI's queues only after its last look (over a netmod, between
    spawned ranks and rank 0): the climb finds it within about twice that
    delay; a ring starts the climb again for the same reason.

    The defaults come from the policy above (SLEEP_CAP, SLEEP_FIRST, REPOLLS,
    WARM), with ``repoll`` and ``warm`` off where HPC_RAY_WAIT_OFF says so.
    """

    __slots__ = ("tval", "cap", "spins", "spin_limit", "short", "warm", "last_active",
                 "deep_after", "deep_cap", "flagged", "flagged_sleep")

    def __init__(self, cap: float | None = None, spin_limit: int | None = None,
                 short: float | None = None, warm: float | None = None,
                 deep_after: float = 0.0, deep_cap: float = 0.0,
                 flagged: bool = False) -> None:
        self.tval = 0.0
        self.cap = SLEEP_CAP if cap is None else cap
        self.spins = 0
        if spin_limit is None:
            spin_limit = REPOLLS if enabled("repoll") else 0
        self.spin_limit = spin_limit
        self.short = SLEEP_FIRST if short is None else short
        if warm is None:
            warm = (FLAGGED_WARM if flagged else WARM) if enabled("warm") else 0.0
        self.warm = warm
        self.deep_after = deep_after
        self.deep_cap = max(self.cap, deep_cap)
        self.flagged = flagged
        #: Whether the last ``next_timeout`` was a sleep every sender rings.
        self.flagged_sleep = False
        self.last_active = monotonic()

    def reset(self) -> None:
        self.tval = 0.0
        self.spins = 0
        self.last_active = monotonic()

    def rung(self) -> None:
        """A doorbell rang: a message is on its way (sent before the ring). Poll
        at once, twice, but it is no activity yet: a message that needs no
        quick follow-up (a caller's summary for the head) leaves the loop where
        it was in its back-off, deep sleep included."""
        self.spins = min(self.spins, self.spin_limit - RUNG_POLLS)
        if self.flagged:
            self.tval = 0.0   # the message may not be in MPI yet: climb again

    def next_timeout(self, reply_soon: bool = True, deep: bool = True) -> float:
        """How long the caller should block now (0 while still spinning).
        ``reply_soon=False`` skips the warm phase: the caller knows that no
        message it could act on sooner is due. ``deep=False`` stays at ``cap``
        however long the quiet: a message is due some time (a task's result)."""
        self.flagged_sleep = False
        if self.spins < self.spin_limit:
            self.spins += 1
            return 0.0
        quiet = monotonic() - self.last_active
        if reply_soon and quiet < self.warm:
            return self.short
        if self.flagged and deep:
            self.flagged_sleep = True
            self.tval = min(self.deep_cap, max(FLAGGED_FIRST, self.tval * 2))
            return self.tval
        cap = self.deep_cap if deep and self.deep_after and quiet > self.deep_after else self.cap
        self.tval = min(cap, max(self.short, self.tval * 2))
        return self.tval


# --- Spinner: a wait on sockets -----------------------------------------------------
#
# A sync actor call is two processes waking each other: the caller sends and
# waits, the actor wakes, answers and waits for the next call. A wake-up from a
# blocking ``poll`` costs tens of microseconds on a VM, as much as the rest of
# the call. Polling without blocking for up to SPIN_BUDGET first catches an
# answer that comes that soon, with no wake-up at all: a 1:1 sync loop ran 2x
# faster (benchmarks/README.md). The budget must outlast the peer's side of a
# round trip (about 100-150 us per side on the 2-vCPU VM): at 30 us, 4,400
# calls/s against 6,700 at 300 us.
#
# Spinning takes a core from whoever else could run, so a process spins only
# while its recent spins found something (``score``, a moving average of hits);
# one wait in PROBE_EVERY spins anyway, to find out when it pays again. Between
# polls it yields its core (``pause``). A task's process (``look``) also looks,
# on one wait in LOOK_EVERY, at how many threads the machine has ready to run,
# and does not spin while there are more than its cores (benchmarks/README.md,
# "Stop 27" and "Stop 29", both on 2 vCPUs with more processes than cores:
# whether either pays with a core per process is what benchmarks/mechanisms.py
# measures).

#: Spin while the moving average of hits is above this.
KEEP = 0.3
#: When not spinning, spin on one wait in this many to see whether it pays again.
PROBE_EVERY = 32
#: A spinner that looks counts ready threads on one wait in this many.
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
    """Whether and how long one waiter on sockets busy-polls before it blocks."""

    __slots__ = ("score", "waits", "look", "cores", "crowded", "budget")

    def __init__(self, look: bool = False, budget: float | None = None) -> None:
        self.score = 1.0
        self.waits = 0
        #: Whether to look for a crowd of ready threads (``crowded``) at all.
        self.look = look and enabled("look")
        self.cores = usable_cores()
        #: Whether the machine had more threads ready than ``cores`` at the last look.
        self.crowded = False
        #: Longest busy-poll, seconds (0 where ``spin`` is off).
        self.budget = (SPIN_BUDGET if budget is None else budget) if enabled("spin") else 0.0

    def due(self) -> bool:
        """Whether this wait should spin: recent spins paid, or it is a probe;
        and, for a spinner that looks, no crowd."""
        if not self.budget:
            return False
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
        """``poller.poll(timeout_ms)``, after up to ``budget`` of non-blocking polls."""
        if timeout_ms != 0 and self.due():
            end = time.perf_counter() + self.budget
            while True:
                events = poller.poll(0)
                if events:
                    self.scored(True)
                    return events
                if time.perf_counter() > end:
                    break
                pause()
            self.scored(False)
        return poller.poll(timeout_ms)


# --- Doorbell: a loop's wake-up file descriptor -------------------------------------

def doorbell_address(session_id: str, rank: int) -> str:
    return f"hpc_ray-{session_id}-rank-{rank}"


class Doorbell:
    """A rank's wake-up: an abstract Unix datagram socket its loop selects on.

    MPI cannot wake a blocked process, so an idle rank polls it; one idle for
    ``Backoff.deep_after`` polls only every ``deep_cap``. A process on the same
    host that sends it a message after a pause rings first (``comm.Sender``),
    so the message is read at once instead. Worker ranks and rank 0's comm
    thread each have one. The socket has no file to clean up, and off Linux (or
    when the name is taken) there is none: the rank just polls.
    """

    def __init__(self, session_id: str, rank: int) -> None:
        self.sock: socket.socket | None = None
        if not hasattr(socket, "AF_UNIX") or not session_id:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind("\0" + doorbell_address(session_id, rank))
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def drain(self) -> None:
        """Read every ring that came (they carry nothing but the wake-up)."""
        while True:
            try:
                self.sock.recv(64)
            except OSError:   # BlockingIOError: none left
                return

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
