"""Idle ranks poll MPI rarely, and a sender on their host rings them awake:
the back-off's deep tier (``comm.Backoff``), the doorbell (``comm.Doorbell``)
and when a ``Sender`` rings it. Measured in benchmarks/idle.py."""
from __future__ import annotations

import os
import select
import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

from hpc_ray.transport import comm
from hpc_ray.transport.comm import (DEEP_AFTER_ONE_HOST, DEEP_CAP_ONE_HOST, RING_AFTER,
                                    RUNG_POLLS, Backoff, CommThreadBell, Doorbell, Sender)
from hpc_ray.runtime.worker import DEEP_AFTER, DEEP_CAP, polling_backoff


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _with_clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(comm, "monotonic", clock)
    return clock


def test_a_long_idle_loop_sleeps_up_to_the_deep_cap(monkeypatch):
    clock = _with_clock(monkeypatch)
    backoff = Backoff(cap=0.001, spin_limit=2, warm=0.01, deep_after=1.0, deep_cap=0.01)
    backoff.reset()
    assert [backoff.next_timeout() for _ in range(2)] == [0.0, 0.0]
    assert backoff.next_timeout() == backoff.short            # warm
    clock.now += 0.5
    assert max(backoff.next_timeout() for _ in range(20)) == 0.001
    clock.now += 0.6                                          # 1.1 s without activity
    deep = [backoff.next_timeout() for _ in range(10)]
    assert deep == sorted(deep) and deep[0] == 0.002 and deep[-1] == 0.01
    assert backoff.next_timeout(deep=False) == 0.001          # a message is due
    backoff.reset()                                           # activity
    assert backoff.next_timeout() == 0.0


def test_without_a_deep_tier_the_cap_holds(monkeypatch):
    clock = _with_clock(monkeypatch)
    backoff = Backoff(cap=0.001, spin_limit=0)
    clock.now += 100.0
    assert max(backoff.next_timeout() for _ in range(30)) == 0.001


def test_worker_ranks_have_the_deep_tier_however_crowded():
    for ranks in (3, 8, 32):
        backoff = polling_backoff(ranks_on_node=ranks, cores=2)
        assert backoff.deep_after == DEEP_AFTER and backoff.deep_cap == DEEP_CAP
        assert backoff.cap <= DEEP_CAP
        # Every sender on the rank's host rings it: it sleeps deep much sooner.
        backoff = polling_backoff(ranks_on_node=ranks, cores=2, one_host=True)
        assert backoff.deep_after == DEEP_AFTER_ONE_HOST
        assert backoff.deep_cap == DEEP_CAP_ONE_HOST > DEEP_CAP


def test_a_ring_polls_at_once_but_leaves_a_deep_sleeper_deep(monkeypatch):
    clock = _with_clock(monkeypatch)
    backoff = Backoff(cap=0.001, spin_limit=20, warm=0.01, deep_after=1.0, deep_cap=0.01)
    backoff.reset()
    clock.now += 2.0
    while backoff.next_timeout() < 0.01:
        pass
    backoff.rung()                          # e.g. a caller's summary for the head
    assert [backoff.next_timeout() for _ in range(RUNG_POLLS)] == [0.0] * RUNG_POLLS
    assert backoff.next_timeout() == 0.01   # no warm phase, no climb from 20 us again


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("wait"), st.booleans(), st.booleans()),
    st.tuples(st.just("reset")),
    st.tuples(st.just("advance"), st.floats(0.0, 2.0))), max_size=80))
def test_backoff_bounds_hold_after_every_event(events):
    clock = Clock()
    real = comm.monotonic
    comm.monotonic = clock
    try:
        backoff = Backoff(cap=0.001, spin_limit=3, warm=0.01, deep_after=1.0, deep_cap=0.01)
        last_active = clock.now
        spins = 0
        for event in events:
            if event[0] == "advance":
                clock.now += event[1]
            elif event[0] == "reset":
                backoff.reset()
                last_active, spins = clock.now, 0
            else:
                _, reply_soon, deep = event
                t = backoff.next_timeout(reply_soon, deep)
                quiet = clock.now - last_active
                if spins < 3:
                    assert t == 0.0                 # spins right after activity
                    spins += 1
                elif reply_soon and quiet < 0.01:
                    assert t == backoff.short       # warm: a reply is due soon
                elif deep and quiet > 1.0:
                    assert backoff.short <= t <= 0.01
                else:
                    assert backoff.short <= t <= 0.001   # never past cap unless long idle
    finally:
        comm.monotonic = real


class _Rings:
    """A Sender's bell that counts rings instead of sending them."""

    def __init__(self) -> None:
        self.count = 0

    def sendto(self, data, address) -> None:
        self.count += 1


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(st.one_of(st.floats(0.0, 0.003), st.floats(0.0, 0.05)),
                     min_size=1, max_size=60),
       ranks_on_node=st.sampled_from([2, 3, 8, 32]), reply_soon=st.booleans())
def test_on_one_host_no_message_waits_past_the_cap_for_a_deep_sleeper(gaps, ranks_on_node,
                                                                      reply_soon):
    """The ring rule against the back-off of a rank whose job is on one host:
    messages from one sender at the given gaps; the rank polls MPI, takes what
    came, sleeps ``next_timeout()`` unless rung. A message must never wait
    longer than the rank's plain ``cap`` (what it waited before the rank slept
    deep this soon): the sender rang, or the rank was polling anyway."""
    assert RING_AFTER < DEEP_AFTER_ONE_HOST
    clock = Clock()
    real = comm.monotonic
    comm.monotonic = clock
    sender = Sender(MPI.COMM_SELF)
    sender.bell = rings = _Rings()
    sender.session_id = "model"
    try:
        backoff = polling_backoff(ranks_on_node, cores=2, one_host=True)
        start = clock.now
        sends, t = [], start
        for gap in gaps:
            t += gap
            sends.append(t)
        now, taken = start, 0
        backoff.reset()
        while taken < len(sends):
            clock.now = now
            if sends[taken] <= now:                    # the poll: take what came
                while taken < len(sends) and sends[taken] <= now:
                    taken += 1
                backoff.reset()
                continue
            wake = now + backoff.next_timeout(reply_soon)
            # Senders act during the sleep (not before: this poll saw nothing).
            nxt = taken
            while nxt < len(sends) and sends[nxt] <= wake:
                clock.now = sends[nxt]
                before = rings.count
                sender.ring(1)
                if rings.count > before:
                    wake = sends[nxt]                  # the doorbell wakes the rank
                    break
                assert wake - sends[nxt] <= backoff.cap + 1e-12, (
                    f"a message waits {wake - sends[nxt]:.4f} s unrung")
                nxt += 1
            now = wake
    finally:
        comm.monotonic = real


def test_a_ring_wakes_the_doorbell_and_drain_empties_it():
    session = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    bell = Doorbell(session, 5)
    sender = Sender(MPI.COMM_SELF, session)
    try:
        assert bell.fileno() >= 0
        assert select.select([bell.fileno()], [], [], 0)[0] == []
        sender.ring(5)
        assert select.select([bell.fileno()], [], [], 1.0)[0] == [bell.fileno()]
        bell.drain()
        assert select.select([bell.fileno()], [], [], 0)[0] == []
    finally:
        bell.close()
        sender.close_bell()


def test_a_sender_rings_only_after_a_pause(monkeypatch):
    clock = _with_clock(monkeypatch)
    session = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    bells = {r: Doorbell(session, r) for r in (0, 1)}
    sender = Sender(MPI.COMM_SELF, session)

    def rung(rank):
        fd = bells[rank].fileno()
        got = select.select([fd], [], [], 0.2)[0] == [fd]
        bells[rank].drain()
        return got

    try:
        sender.ring(1)
        assert rung(1)                      # the first message: ring
        clock.now += RING_AFTER / 2
        sender.ring(1)
        assert not rung(1)                  # it just had one: it is not asleep
        clock.now += RING_AFTER * 1.01
        sender.ring(1)
        assert rung(1)                      # after a pause: ring again
        sender.ring(0)
        assert rung(0)                      # rank 0's comm thread has one too
    finally:
        for bell in bells.values():
            bell.close()
        sender.close_bell()


def test_a_taken_doorbell_name_leaves_the_rank_polling():
    session = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    first = Doorbell(session, 2)
    second = Doorbell(session, 2)
    try:
        assert first.fileno() >= 0 and second.fileno() == -1
    finally:
        first.close()
        second.close()


def _sleep_in_thread(bell: CommThreadBell, event: threading.Event) -> tuple:
    """``bell.sleep(60, event)`` in a thread; returns (thread, result list)."""
    got: list = []
    sleeper = threading.Thread(target=lambda: got.append(bell.sleep(60.0, event)))
    sleeper.start()
    while not bell.sleeping and sleeper.is_alive():
        threading.Event().wait(0.001)
    return sleeper, got


def test_rank_0s_sleeping_comm_thread_wakes_on_a_worker_ranks_ring():
    session = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    bell = CommThreadBell(session)
    sender = Sender(MPI.COMM_SELF, session)
    try:
        assert bell.usable
        sleeper, got = _sleep_in_thread(bell, threading.Event())
        sender.ring(0)                      # a worker rank sends to rank 0 after a pause
        sleeper.join(10)
        assert not sleeper.is_alive() and got == [True]
        assert not bell.sleeping
    finally:
        bell.close()
        sender.close_bell()


def test_rank_0s_sleeping_comm_thread_wakes_when_a_driver_thread_wakes_it():
    session = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    bell = CommThreadBell(session)
    event = threading.Event()
    try:
        bell.ring_if_sleeping()             # nobody sleeps: no ring is left behind
        assert bell.sleep(0.05, event) is False
        sleeper, got = _sleep_in_thread(bell, event)
        event.set()                         # HeadLoop.wake(): the event, then the ring
        bell.ring_if_sleeping()
        sleeper.join(10)
        assert not sleeper.is_alive() and got == [True]
        # A wake-up that came before the sleep: no wait at all.
        assert bell.sleep(60.0, event) is False
    finally:
        bell.close()
