"""Idle ranks poll MPI rarely, and a sender on their host rings them awake:
the back-off's deep tier (``wait.Backoff``), the doorbell (``wait.Doorbell``)
and when a ``comm.Sender`` rings it. Measured in benchmarks/idle.py."""
from __future__ import annotations

import os
import select
import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

from hpc_ray.transport import comm, wait
from hpc_ray.transport.comm import RING_AFTER, CommThreadBell, Sender
from hpc_ray.transport.wait import (DEEP_AFTER, DEEP_AFTER_ONE_HOST, DEEP_CAP,
                                    DEEP_CAP_ONE_HOST, HEAD_DEEP_CAP, REPOLLS, RUNG_POLLS,
                                    SLEEP_FIRST, Backoff, Doorbell, loop_backoff)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _with_clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(comm, "monotonic", clock)    # Sender's rings
    monkeypatch.setattr(wait, "monotonic", clock)    # Backoff
    return clock


def test_a_long_idle_loop_sleeps_up_to_the_deep_cap(monkeypatch):
    clock = _with_clock(monkeypatch)
    backoff = Backoff(cap=0.001, deep_after=1.0, deep_cap=0.01)
    backoff.reset()
    # Right after activity it polls again at once (the repoll), then sleeps.
    assert [backoff.next_timeout() for _ in range(REPOLLS)] == [0.0] * REPOLLS
    assert backoff.next_timeout() == SLEEP_FIRST
    clock.now += 0.5
    assert max(backoff.next_timeout() for _ in range(20)) == 0.001
    clock.now += 0.6                                          # 1.1 s without activity
    deep = [backoff.next_timeout() for _ in range(10)]
    assert deep == sorted(deep) and deep[0] == 0.002 and deep[-1] == 0.01
    assert backoff.next_timeout(deep=False) == 0.001          # a message is due
    backoff.reset()                                           # activity
    assert [backoff.next_timeout() for _ in range(REPOLLS)] == [0.0] * REPOLLS
    assert backoff.next_timeout() == SLEEP_FIRST


def test_without_a_deep_tier_the_cap_holds(monkeypatch):
    clock = _with_clock(monkeypatch)
    backoff = Backoff(cap=0.001)
    clock.now += 100.0
    assert max(backoff.next_timeout() for _ in range(30)) == 0.001


def test_rank_loops_have_the_deep_tier():
    for head, cap in ((False, DEEP_CAP), (True, HEAD_DEEP_CAP)):
        backoff = loop_backoff(head, rung=False, flagged=False)
        assert backoff.deep_after == DEEP_AFTER and backoff.deep_cap == cap
        assert backoff.cap <= cap
        # Every sender on the rank's host rings it: it sleeps deep much sooner.
        backoff = loop_backoff(head, rung=True, flagged=False)
        assert backoff.deep_after == DEEP_AFTER_ONE_HOST
        assert backoff.deep_cap == DEEP_CAP_ONE_HOST > cap


def test_a_deep_cap_the_user_set_wins(monkeypatch):
    monkeypatch.setattr(wait, "IDLE_POLL_MS", 600000.0)
    monkeypatch.setattr(wait, "HEAD_IDLE_POLL_MS", 7.0)
    for rung in (False, True):
        assert loop_backoff(False, rung, False).deep_cap == 600.0
        assert loop_backoff(True, rung, False).deep_cap == 0.007


def test_a_ring_leaves_a_deep_sleeper_deep(monkeypatch):
    clock = _with_clock(monkeypatch)
    backoff = Backoff(cap=0.001, deep_after=1.0, deep_cap=0.01)
    backoff.reset()
    clock.now += 2.0
    while backoff.next_timeout() < 0.01:
        pass
    backoff.rung()                          # e.g. a caller's summary for the head
    # Two polls at once for the message the ring announced, then as deep as
    # before: no climb from 20 us again.
    assert [backoff.next_timeout() for _ in range(RUNG_POLLS)] == [0.0] * RUNG_POLLS
    assert backoff.next_timeout() == 0.01


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("wait"), st.booleans()),
    st.tuples(st.just("reset")),
    st.tuples(st.just("advance"), st.floats(0.0, 2.0))), max_size=80))
def test_backoff_bounds_hold_after_every_event(events):
    clock = Clock()
    real = comm.monotonic
    comm.monotonic = wait.monotonic = clock
    try:
        backoff = Backoff(cap=0.001, deep_after=1.0, deep_cap=0.01)
        last_active = clock.now
        polls = 0                                  # since the last activity
        for event in events:
            if event[0] == "advance":
                clock.now += event[1]
            elif event[0] == "reset":
                backoff.reset()
                last_active = clock.now
                polls = 0
            else:
                _, deep = event
                t = backoff.next_timeout(deep)
                quiet = clock.now - last_active
                polls += 1
                if polls <= REPOLLS:
                    assert t == 0.0                # the repoll after activity
                elif deep and quiet > 1.0:
                    assert SLEEP_FIRST <= t <= 0.01
                else:
                    assert SLEEP_FIRST <= t <= 0.001   # never past cap unless long idle
    finally:
        comm.monotonic = wait.monotonic = real


class _Rings:
    """A Sender's bell that counts rings instead of sending them."""

    def __init__(self) -> None:
        self.count = 0

    def sendto(self, data, address) -> None:
        self.count += 1


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(st.one_of(st.floats(0.0, 0.003), st.floats(0.0, 0.05)),
                     min_size=1, max_size=60),
       head=st.booleans())
def test_on_one_host_no_message_waits_past_the_cap_for_a_deep_sleeper(gaps, head):
    """The ring rule against the back-off of a rank whose job is on one host:
    messages from one sender at the given gaps; the rank polls MPI, takes what
    came, sleeps ``next_timeout()`` unless rung. A message must never wait
    longer than the rank's plain ``cap`` (what it waited before the rank slept
    deep this soon): the sender rang, or the rank was polling anyway."""
    assert RING_AFTER < DEEP_AFTER_ONE_HOST
    clock = Clock()
    real = comm.monotonic
    comm.monotonic = wait.monotonic = clock
    sender = Sender(MPI.COMM_SELF)
    sender.bell = rings = _Rings()
    sender.session_id = "model"
    try:
        backoff = loop_backoff(head, rung=True, flagged=False)
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
            wake = now + backoff.next_timeout()
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
        comm.monotonic = wait.monotonic = real


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


def _sleep_in_thread(bell: CommThreadBell) -> tuple:
    """``bell.sleep(60)`` in a thread; returns (thread, result list)."""
    got: list = []
    sleeper = threading.Thread(target=lambda: got.append(bell.sleep(60.0)))
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
        sleeper, got = _sleep_in_thread(bell)
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
    try:
        bell.wake()                         # nobody sleeps: no ring is left behind,
        assert bell.sleep(60.0) is False    # and the sleep after it does not wait
        assert bell.sleep(0.05) is False
        sleeper, got = _sleep_in_thread(bell)
        bell.wake()                         # HeadLoop.wake()
        sleeper.join(10)
        assert not sleeper.is_alive() and got == [True]
        # A short sleep (a back-off's) wakes too, and one woken before it does not wait.
        napper = threading.Thread(target=bell.nap, args=(60.0,))
        napper.start()
        while not bell.napping and napper.is_alive():
            threading.Event().wait(0.001)
        bell.wake()
        napper.join(10)
        assert not napper.is_alive()
        bell.wake()
        started = time.monotonic()
        bell.nap(60.0)
        assert time.monotonic() - started < 30
    finally:
        bell.close()


def test_the_comm_threads_bell_without_a_name_still_wakes_for_the_driver():
    # Off Linux (no abstract sockets) the bell is a socket pair: the ranks cannot
    # ring it, the driver's threads can.
    bell = CommThreadBell(None)
    try:
        assert not bell.usable and bell.bell.fileno() >= 0
        sleeper, got = _sleep_in_thread(bell)
        bell.wake()
        sleeper.join(10)
        assert not sleeper.is_alive() and got == [True]
    finally:
        bell.close()


# --- sleep flags (one-host jobs): a sender rings exactly the loops that sleep ---

def _flags_in_child(pid: int, fd: int, ranks: int, rank: int) -> int:
    """Raise ``rank``'s flag from another process; its exit status says done."""
    import subprocess
    import sys
    code = ("import sys; from hpc_ray.transport.comm import SleepFlags; "
            "f = SleepFlags.open(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])); "
            "f.up(int(sys.argv[4]))")
    return subprocess.run([sys.executable, "-c", code, str(pid), str(fd), str(ranks),
                           str(rank)], timeout=60).returncode


def test_sleep_flags_are_shared_with_other_processes():
    flags, fd = comm.SleepFlags.create(8)
    try:
        assert not any(flags.asleep(r) for r in range(8))
        assert _flags_in_child(os.getpid(), fd, 8, 5) == 0
        assert [flags.asleep(r) for r in range(8)] == [False] * 5 + [True] + [False] * 2
        flags.down(5)
        assert not flags.asleep(5)
    finally:
        os.close(fd)
        flags.close()


def test_a_sender_with_flags_rings_only_a_loop_whose_flag_is_up():
    session = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    flags, fd = comm.SleepFlags.create(2)
    os.close(fd)
    bell = Doorbell(session, 1)
    sender = Sender(MPI.COMM_SELF, session, flags)

    def rung():
        got = select.select([bell.fileno()], [], [], 0.2)[0] == [bell.fileno()]
        bell.drain()
        return got

    try:
        sender.ring(1)
        assert not rung()                   # awake (polling): no ring, even the first time
        flags.up(1)
        sender.ring(1)
        assert rung()                       # asleep: rung, however recent the last send
        sender.ring(1)
        assert rung()
        flags.down(1)
        sender.ring(1)
        assert not rung()
    finally:
        bell.close()
        sender.close_bell()
        flags.close()


def test_a_loops_last_look_sees_a_message_whose_send_has_returned(run):
    # Real MPI, two ranks: what the flag protocol assumes of the library (a
    # single MPICH Iprobe missed every such message).
    values = run("probe_after_isend.py", 2, mode="mpiexec", timeout=60).assert_ok(
        "probe_after_isend")
    assert values["missed"] == 0, values


def test_a_flagged_backoff_climbs_fast_to_the_deep_cap(monkeypatch):
    _with_clock(monkeypatch)
    backoff = loop_backoff(False, rung=True, flagged=True)
    backoff.reset()
    assert [backoff.next_timeout() for _ in range(REPOLLS)] == [0.0] * REPOLLS
    sleeps = [backoff.next_timeout() for _ in range(8)]
    assert backoff.flagged_sleep
    # From 1 ms, doubling: a message that showed in MPI only after the last look
    # waits about as long again as it took, not the whole deep cap.
    assert sleeps[0] == wait.FLAGGED_FIRST
    assert sleeps == sorted(sleeps) and sleeps[-1] == DEEP_CAP_ONE_HOST
    assert all(b <= 2 * a + 1e-12 for a, b in zip(sleeps, sleeps[1:]))
    # A ring (the message it announces may not be in MPI yet) starts the climb again.
    backoff.rung()
    assert [backoff.next_timeout() for _ in range(RUNG_POLLS)] == [0.0] * RUNG_POLLS
    assert backoff.next_timeout() == wait.FLAGGED_FIRST
    # Bytes on their way need the loop's polls: no flagged sleep then.
    assert backoff.next_timeout(deep=False) <= backoff.cap and not backoff.flagged_sleep


def test_rank_0s_comm_thread_raises_its_flag_only_while_it_sleeps():
    session = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    flags, fd = comm.SleepFlags.create(2)
    os.close(fd)
    bell = CommThreadBell(session, flags)
    sender = Sender(MPI.COMM_SELF, session, flags)
    try:
        # A message already waits when it raises its flag: it does not sleep.
        assert bell.sleep(60.0, lambda: True) is False
        assert not flags.asleep(0)
        got: list = []
        sleeper = threading.Thread(
            target=lambda: got.append(bell.sleep(60.0, lambda: False)))
        sleeper.start()
        while not flags.asleep(0) and sleeper.is_alive():
            threading.Event().wait(0.001)
        sender.ring(0)                      # a worker rank's message: the flag is up
        sleeper.join(10)
        assert not sleeper.is_alive() and got == [True] and not flags.asleep(0)
    finally:
        bell.close()
        sender.close_bell()
        flags.close()


class _FlagProtocol:
    """One sender and one receiving loop, step by step, with the real flags and
    ``Sender.ring``; the MPI queue and the doorbell are counters.

    Sender, per message: send (the message is in the queue), then ``ring``.
    Receiver: poll (take every message), raise its flag, look once more
    (``Iprobe``), then sleep unless something came; a ring wakes it, and it
    lowers its flag and polls again."""

    def __init__(self, messages: int) -> None:
        self.flags, fd = comm.SleepFlags.create(2)
        os.close(fd)
        self.sender = Sender(MPI.COMM_SELF, None, self.flags)
        self.sender.bell = self.rings = _Rings()
        self.sender.session_id = "model"
        self.to_send = messages
        self.sent_unrung = False     # between a send and its ring
        self.queue = 0
        self.received = 0
        self.state = "poll"          # poll -> flag_up -> look -> asleep -> poll

    def step_sender(self) -> None:
        if self.sent_unrung:
            self.sender.ring(1)
            self.sent_unrung = False
        elif self.to_send:
            self.to_send -= 1
            self.queue += 1
            self.sent_unrung = True

    def step_receiver(self) -> None:
        if self.state == "poll":
            self.received += self.queue
            self.queue = 0
            self.state = "flag_up"
        elif self.state == "flag_up":
            self.flags.up(1)
            self.state = "look"
        elif self.state == "look":
            if self.queue:
                self.flags.down(1)
                self.state = "poll"
            else:
                self.state = "asleep"
        elif self.state == "asleep" and self.rings.count:
            self.rings.count = 0          # drain: woken
            self.flags.down(1)
            self.state = "poll"

    def check(self) -> None:
        # No message waits on a sleeper that nobody will ring.
        if self.state == "asleep" and self.queue:
            assert self.rings.count or self.sent_unrung, "a message waits on a sleeper, unrung"
        assert self.flags.asleep(1) == (self.state in ("look", "asleep"))


@settings(max_examples=300, deadline=None)
@given(messages=st.integers(1, 6), schedule=st.lists(st.booleans(), max_size=120))
def test_no_message_waits_on_a_sleeper_nobody_rings(messages, schedule):
    """Every interleaving of one sender's steps with the receiving loop's: after
    each step, a sleeping loop with a message waiting has a ring on its way or
    coming; and once the sender is done and the loop has run on, every message
    was received."""
    model = _FlagProtocol(messages)
    try:
        for sender_moves in schedule:
            if sender_moves:
                model.step_sender()
            else:
                model.step_receiver()
            model.check()
        while model.to_send or model.sent_unrung:
            model.step_sender()
            model.check()
        for _ in range(8):
            model.step_receiver()
            model.check()
        assert model.received == messages
    finally:
        model.flags.close()
