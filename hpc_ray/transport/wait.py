"""How every loop and every wait of the runtime waits: one policy, read once.

A process of hpc_ray waits for one of three things: a message in MPI (which
cannot wake anyone, so it is polled), bytes on a socket (which can: ``poll``),
or a condition another process or thread makes true (a request completes, a
counter in shared memory moves). Each wait is one of:

    Backoff      a loop polling MPI: sleeps doubling to a cap (and to a deep
                 cap after long quiet, where a Doorbell wakes it); a rank's
                 loop gets its Backoff from ``loop_backoff``
    Spinner      a wait on sockets: busy-poll up to SPIN_BUDGET, then block in
                 poll(); spin only while recent spins found something
    wait_until   any other wait on a condition: spin, then sleeps doubling from
                 SLEEP_FIRST to SLEEP_CAP, with a deadline and a liveness check
                 that runs every CHECK_EVERY, so no wait outlives a dead peer
    Doorbell     a loop's one wake-up file descriptor, rung by processes on its
                 host (``comm.Sender``) so that a sleeping loop need not poll

The numbers come from the environment once, at import (``_config``):

    HPC_RAY_SPIN_US            SPIN_BUDGET, the longest busy-poll before blocking
    HPC_RAY_SLEEP_CAP_US       SLEEP_CAP, the longest sleep of a wait whose answer
                               is due (a loop's back-off cap, wait_until's cap)
    HPC_RAY_IDLE_POLL_MS       the deep cap of a worker rank's loop
    HPC_RAY_HEAD_IDLE_POLL_MS  the deep cap of rank 0's comm thread
    HPC_RAY_WAIT_OFF           mechanisms turned off, comma-separated, for A/B runs
                               (``benchmarks/mechanisms.py``): see MECHANISMS

The mechanisms left that bet a core on an answer coming soon (the spin, the
look at the machine's load that stops a task's spin, the repoll, and the yield
of wait_until's spin) can be turned off here, so that a run with and without
each shows whether it pays (others did not:
``benchmarks/results/mechanisms-removal-2026-11-27.md``; the repoll and the
yield did: ``benchmarks/results/repoll-2026-11-27.md``).
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
    "repoll": "a loop polls MPI again at once a few times after activity (Backoff.repolls)",
    "yield": "sched_yield every 16 polls of wait_until's spin (the collectives' waits)",
    "look": "a task's process does not spin while /proc/loadavg shows more ready threads "
            "than cores",
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
#: First sleep of a back-off. Below about 20 us a sleep is a wake-up with no
#: time slept (timer slack: ``comm.tighten_timer_slack``).
SLEEP_FIRST = min(2e-5, SLEEP_CAP)
#: Mechanisms turned off (``HPC_RAY_WAIT_OFF``).
OFF: frozenset = _config.os_environ_get("WAIT_OFF", frozenset(), _names)
#: wait_until runs its liveness check at most this often.
CHECK_EVERY = 0.02


def enabled(mechanism: str) -> bool:
    """Whether ``mechanism`` (a key of MECHANISMS) is on."""
    return mechanism not in OFF


#: Whether wait_until's spin yields the core every 16 polls. Without it, three
#: members of a collective on 2 cores took 4 ms per 1 KB allreduce instead of
#: 0.05 ms: a member that spins through its time slice keeps the one it waits
#: for off the core (benchmarks/results/repoll-2026-11-27.md). Once per 16 polls
#: rather than at every poll: where each member has a core the syscall only
#: delays the poll that sees the answer (2 members on 16 cores, 1-64 KB: 1.05-1.25x
#: faster; benchmarks/results/sixteen-cores-2026-11-28b.md).
YIELD = enabled("yield")


class WaitTimeout(TimeoutError):
    """A wait_until passed its deadline."""


def wait_until(done: Callable[[], bool], timeout: float | None = None,
               alive: Callable[[], None] | None = None, spin: float | None = None,
               what: str = "a condition", cap: float | None = None) -> None:
    """Return once ``done()`` is true.

    It polls ``done()`` for ``spin`` seconds (default SPIN_BUDGET), giving
    the core to a thread ready to run on it every 16 polls (``sched_yield``:
    often the peer the wait is for, where members outnumber cores), then
    sleeps between polls, from SLEEP_FIRST doubling to SLEEP_CAP (or ``cap``,
    for a poll that costs another process work). ``alive()``
    runs every CHECK_EVERY and raises when what the wait depends on is gone (a
    peer process died); past ``timeout`` seconds it raises WaitTimeout naming
    ``what``. A wait with neither must be one whose answer cannot depend on
    another process (the caller says why)."""
    if done():
        return
    now = monotonic()
    deadline = None if timeout is None else now + timeout
    check = now + CHECK_EVERY
    spin_until = now + (SPIN_BUDGET if spin is None else spin) if enabled("spin") else now
    nap = SLEEP_FIRST
    cap = SLEEP_CAP if cap is None else cap
    polls = 0
    while not done():
        polls += 1
        if polls & 15 and now < spin_until:
            continue
        if YIELD and now < spin_until:
            os.sched_yield()
        now = monotonic()
        if now >= check:
            if alive is not None:
                alive()
            check = now + CHECK_EVERY
        if deadline is not None and now >= deadline:
            raise WaitTimeout(f"gave up waiting for {what} after {timeout:g} s")
        if now >= spin_until:
            time.sleep(nap)
            nap = min(2 * nap, cap)


# --- Backoff: a loop that polls MPI -------------------------------------------------

#: A loop with no activity for DEEP_AFTER seconds polls MPI only every deep cap:
#: DEEP_CAP on a worker rank, HEAD_DEEP_CAP on rank 0's comm thread (which also
#: sleeps that long while tasks run: a task's result from a rank on its host
#: rings it). An idle poll costs 50-150 us of CPU on a VM, most of it the
#: wake-up itself: at 1 ms, 5-15% of a core per idle rank. A sender on the same
#: host rings a sleeping loop's doorbell (``comm.Sender``); a message from
#: another host waits up to the deep cap.
DEEP_AFTER = 1.0
DEEP_CAP = 0.01
HEAD_DEEP_CAP = 0.005
#: The ``deep_after`` of a loop whose senders all ring it after a pause (every
#: rank of the job on its host, without ``comm.SleepFlags``): after this much
#: quiet it sleeps on its doorbell up to DEEP_CAP_ONE_HOST instead of polling
#: MPI every ~1 ms. Those polls took 35-55 us of CPU per call between the head
#: and two ranks from two caller tasks' direct actor calls on 2 cores.
DEEP_AFTER_ONE_HOST = 0.01
#: The deep cap of such a loop, and of a flagged one: every message rings, so
#: the cap is only what a missed ring costs (a loop descheduled between its
#: last poll and its sleep). An idle job of 4 ranks used 0.125 CPU-seconds a
#: second with 10 ms (5 ms for the head), 0.030 with 50 ms (benchmarks/idle.py).
DEEP_CAP_ONE_HOST = 0.05
#: A flagged loop's first sleep; the next ones double up to its deep cap. Each
#: costs one wake-up (about 6 per quiet spell up to 50 ms).
FLAGGED_FIRST = 0.001
#: Deep caps the user set, in milliseconds (None: the defaults above).
IDLE_POLL_MS = _config.os_environ_get("IDLE_POLL_MS", None, float)
HEAD_IDLE_POLL_MS = _config.os_environ_get("HEAD_IDLE_POLL_MS", None, float)


#: Immediate polls after activity (``Backoff.repolls``): the next message of a
#: sync round trip (a task's result, the next submission) comes within tens of
#: microseconds, and a sleep of even SLEEP_FIRST costs a wake-up. Removed with
#: the warm phase (which covers for it), sync tasks ran at 0.42-0.56x,
#: embedded and under mpiexec -n 2; with it back, as before
#: (benchmarks/results/repoll-2026-11-27.md).
REPOLLS = 20
#: Polls at once after a ring (``Backoff.rung``).
RUNG_POLLS = 2


class Backoff:
    """How long an idle loop should block before polling again.

    Right after activity the loop polls again at once REPOLLS times. After
    that the sleep starts at SLEEP_FIRST and doubles up to ``cap``.
    After ``deep_after`` seconds without activity (0: never) it goes on
    doubling up to ``deep_cap``: a loop idle that long is woken by its
    Doorbell where its sender is on its host, and otherwise waits at most
    ``deep_cap`` for the next message.

    A loop whose every sender rings it whenever it sleeps (``flagged``: the
    whole job on one host, with ``comm.SleepFlags``) sleeps from FLAGGED_FIRST
    up, doubling to ``deep_cap`` (``flagged_sleep`` says so, and the loop
    raises its flag for those sleeps), unless ``deep`` is False (bytes on their
    way that need its polls). It climbs rather than sleeping ``deep_cap`` at
    once because a message sent just before its flag went up may reach MPI's
    queues only after its last look (over a netmod, between spawned ranks and
    rank 0): the climb finds it within about twice that delay; a ring starts
    the climb again for the same reason.
    """

    __slots__ = ("tval", "cap", "polls", "repolls", "last_active", "deep_after", "deep_cap",
                 "flagged", "flagged_sleep")

    def __init__(self, cap: float | None = None, deep_after: float = 0.0,
                 deep_cap: float = 0.0, flagged: bool = False) -> None:
        self.tval = 0.0
        self.cap = SLEEP_CAP if cap is None else cap
        self.polls = 0
        self.repolls = REPOLLS if enabled("repoll") else 0
        self.deep_after = deep_after
        self.deep_cap = max(self.cap, deep_cap)
        self.flagged = flagged
        #: Whether the last ``next_timeout`` was a sleep every sender rings.
        self.flagged_sleep = False
        self.last_active = monotonic()

    def reset(self) -> None:
        self.tval = 0.0
        self.polls = 0
        self.last_active = monotonic()

    def rung(self) -> None:
        """A doorbell rang: a message is on its way (sent before the ring): poll
        at once, twice. It is no activity yet: a message that needs no quick follow-up (a caller's
        summary for the head) leaves the loop where it was in its back-off,
        deep sleep included; a flagged loop climbs again."""
        if self.flagged:
            self.tval = 0.0   # the message may not be in MPI yet: climb again
        self.polls = min(self.polls, self.repolls - RUNG_POLLS)

    def next_timeout(self, deep: bool = True) -> float:
        """How long the caller should block now. ``deep=False`` stays at ``cap``
        however long the quiet: a message is due some time (a task's result)."""
        self.flagged_sleep = False
        if self.polls < self.repolls:
            self.polls += 1
            return 0.0
        if self.flagged and deep:
            self.flagged_sleep = True
            self.tval = min(self.deep_cap, max(FLAGGED_FIRST, self.tval * 2))
            return self.tval
        quiet = monotonic() - self.last_active
        cap = self.deep_cap if deep and self.deep_after and quiet > self.deep_after else self.cap
        self.tval = min(cap, max(SLEEP_FIRST, self.tval * 2))
        return self.tval


def idle_cap() -> float:
    """The longest a worker rank with nothing to do sleeps between polls of MPI:
    DEEP_CAP, or the user's HPC_RAY_IDLE_POLL_MS."""
    return DEEP_CAP if IDLE_POLL_MS is None else IDLE_POLL_MS / 1000.0


def loop_backoff(head: bool, rung: bool, flagged: bool) -> Backoff:
    """The Backoff of a rank's loop: rank 0's comm thread (``head``) or a worker
    rank's. Where every sender rings it after a pause (``rung``: the whole job
    on its host, and a doorbell to ring) it sleeps deep after
    DEEP_AFTER_ONE_HOST up to DEEP_CAP_ONE_HOST, otherwise after DEEP_AFTER up
    to its role's deep cap; a cap the user set wins either way. ``flagged``:
    every sender rings it whenever it sleeps (``comm.SleepFlags``)."""
    if rung:
        deep_after, deep_cap = DEEP_AFTER_ONE_HOST, DEEP_CAP_ONE_HOST
    else:
        deep_after, deep_cap = DEEP_AFTER, HEAD_DEEP_CAP if head else DEEP_CAP
    cap_ms = HEAD_IDLE_POLL_MS if head else IDLE_POLL_MS
    if cap_ms is not None:
        deep_cap = cap_ms / 1000.0
    return Backoff(deep_after=deep_after, deep_cap=deep_cap, flagged=flagged)


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
# one wait in PROBE_EVERY spins anyway, to find out when it pays again. A task's
# process (``look``) also looks, on one wait in LOOK_EVERY, at how many threads
# the machine has ready to run, and does not spin while there are more than its
# cores (benchmarks/README.md, "Stop 29"; benchmarks/mechanisms.py measures
# whether it pays with a core per process).

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
