"""An actor moves off the CPU of driver threads that busy-poll for its answers
(``transport/placement.py``), and keeps the CPU mask it had."""
from __future__ import annotations

import itertools
import os
import threading
import time

import pytest

from hpc_ray.runtime.peer_calls import DIRECT, PeerCaller
from hpc_ray.runtime.peer_server import PeerServer
from hpc_ray.transport import messages as m
from hpc_ray.transport import placement
from hpc_ray.transport.serialization import RAW

needs_two_cpus = pytest.mark.skipif(
    placement.current_cpu is None or len(os.sched_getaffinity(0)) < 2,
    reason="needs sched_getcpu and two CPUs in this process's mask")

ACTOR = 0xCA11
_ids = itertools.count(1)
#: The CPU the rule tests say the thread is on. The real one can change between a
#: report and its check (a preemption), and the thread really moves after a nudge.
HERE = 0


class _FixedCpu:
    def __enter__(self):
        self.real = placement.current_cpu
        placement.current_cpu = lambda: HERE
        return self

    def __exit__(self, *exc):
        placement.current_cpu = self.real
        return False


@needs_two_cpus
def test_a_nudge_moves_the_thread_and_keeps_its_mask():
    mask = os.sched_getaffinity(0)
    moved = []
    for _ in range(5):      # a preemption right after a move may bring it back
        before = placement.current_cpu()
        assert placement.nudge()
        moved.append(placement.current_cpu() != before)
        assert os.sched_getaffinity(0) == mask
        if moved[-1]:
            break
    assert any(moved), moved


def test_no_nudge_without_another_cpu():
    if placement.current_cpu is None:
        pytest.skip("no sched_getcpu here")
    mask = os.sched_getaffinity(0)

    def pinned():
        me = placement.current_cpu()
        os.sched_setaffinity(0, {me})
        got.append((placement.nudge(), placement.current_cpu() == me,
                    os.sched_getaffinity(0) == {me}))

    got: list = []
    t = threading.Thread(target=pinned)      # the pin stays with that thread
    t.start()
    t.join()
    assert got == [(False, True, True)]
    assert os.sched_getaffinity(0) == mask


@needs_two_cpus
def test_the_actor_moves_after_reports_in_a_row_at_most_once_an_interval():
    n = placement.Neighbour()
    with _FixedCpu():
        for _ in range(placement.SAME_IN_A_ROW - 1):
            n.caller_at(HERE)
        assert n.nudges == 0
        n.caller_at(HERE)
        assert n.nudges == 1
        for _ in range(placement.SAME_IN_A_ROW):          # again at once: too soon
            n.caller_at(HERE)
        assert n.nudges == 1
        time.sleep(placement.MIN_INTERVAL)
        for _ in range(placement.SAME_IN_A_ROW):
            n.caller_at(HERE)
        assert n.nudges == 2


@needs_two_cpus
def test_a_report_from_another_cpu_breaks_the_row():
    n = placement.Neighbour()
    with _FixedCpu():
        for _ in range(3 * placement.SAME_IN_A_ROW):
            n.caller_at(HERE)
            n.caller_at(HERE + 1)
    assert n.nudges == 0


@needs_two_cpus
def test_reports_read_by_another_thread_of_the_actor_are_ignored():
    n = placement.Neighbour()

    def read():
        for _ in range(4 * placement.SAME_IN_A_ROW):
            n.caller_at(HERE)
    with _FixedCpu():
        t = threading.Thread(target=read)
        t.start()
        t.join()
    assert n.nudges == 0


# --- the caller's side, over a real socket ---------------------------------------------

class Reports(placement.Neighbour):
    """The actor's neighbour, keeping every CPU reported to it."""

    __slots__ = ("cpus",)

    def __init__(self) -> None:
        super().__init__()
        self.cpus: list = []

    def caller_at(self, cpu: int) -> None:
        self.cpus.append(cpu)


def _spec() -> list:
    s = [None] * 13
    s[m.T_ID] = next(_ids)
    s[m.T_FN] = "f"
    s[m.T_NAME] = "A.f"
    s[m.T_PAYLOAD] = (RAW, ())
    s[m.T_DEPS] = []
    s[m.T_RETURNS] = [next(_ids)]
    s[m.T_RETRIES] = 0
    s[m.T_ACTOR] = ACTOR
    return s


@pytest.fixture
def pair():
    session = f"test-placement-{os.getpid()}-{next(_ids)}"
    lock = threading.Lock()
    caller = PeerCaller(session, {}, {}, lock)
    s_readers: dict = {}
    server = PeerServer.open(session, ACTOR, s_readers, {}, lock)
    assert server is not None
    server.neighbour = Reports()

    def call_from(threads: int, calls: int) -> list:
        """``calls`` calls, the threads taking turns; the calls the actor read."""
        turn = threading.Condition()
        sent = [0]

        def send(k):
            for i in range(k, calls, threads):
                with turn:
                    turn.wait_for(lambda: sent[0] == i)
                    spec = _spec()
                    how, link = caller.route(spec, True)
                    assert how == DIRECT
                    caller.send(link, spec, None)
                    sent[0] += 1
                    turn.notify_all()
        ts = [threading.Thread(target=send, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        got = []
        deadline = time.monotonic() + 10
        while len(got) < calls and time.monotonic() < deadline:
            for fd, reader in list(s_readers.items()):
                got.extend(reader())
            time.sleep(0.001)
        return got

    yield call_from, server.neighbour
    for link in list(caller.links.values()):
        caller.close(link)
    for ch in list(server.callers.values()):
        server._drop(ch)
    server.listener.close()


def test_a_lone_calling_thread_does_not_tell(pair):
    call_from, reports = pair
    calls = call_from(1, 4 * placement.TELL_EVERY)
    assert len(calls) == 4 * placement.TELL_EVERY
    assert all(msg[0] == m.EXECUTE for msg in calls)
    assert reports.cpus == []


@pytest.mark.skipif(placement.current_cpu is None, reason="no sched_getcpu here")
def test_threads_that_share_the_caller_tell_their_cpu_once_in_a_while(pair):
    call_from, reports = pair
    calls = call_from(2, 4 * placement.TELL_EVERY)
    assert len(calls) == 4 * placement.TELL_EVERY      # the reports are not calls
    assert all(msg[0] == m.EXECUTE for msg in calls)
    assert len(reports.cpus) == 4
    assert set(reports.cpus) <= os.sched_getaffinity(0)


# --- the actor's rule, as a sequence of events ------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


EVENTS = st.lists(st.one_of(st.just("here"), st.just("elsewhere"),
                            st.sampled_from([f * placement.MIN_INTERVAL
                                             for f in (0.25, 0.5, 0.75, 1.0, 2.0)])),
                  max_size=60)


@needs_two_cpus
@settings(max_examples=200, deadline=None)
@given(events=EVENTS)
def test_the_actor_moves_exactly_when_the_rule_says(events):
    # Events: a report from a caller on this thread's CPU, one from elsewhere,
    # time passing. Model: a row of SAME_IN_A_ROW reports from here moves the
    # thread, unless the last move was under MIN_INTERVAL ago (the row starts
    # over either way); a report from elsewhere breaks the row.
    clock = _Clock()
    real_time = placement.time
    placement.time = clock
    mask = os.sched_getaffinity(0)
    try:
        with _FixedCpu():
            _replay(events, clock, mask)
    finally:
        placement.time = real_time


def _replay(events, clock, mask):
    n = placement.Neighbour()
    row, last, moves = 0, None, 0
    for ev in events:
        if ev == "here":
            n.caller_at(HERE)
            row += 1
            if row == placement.SAME_IN_A_ROW:
                row = 0
                if last is None or clock.now - last >= placement.MIN_INTERVAL:
                    last = clock.now
                    moves += 1
        elif ev == "elsewhere":
            n.caller_at(HERE + 1)
            row = 0
        else:
            clock.now += ev
        assert n.nudges == moves
        assert n.same == row
        assert os.sched_getaffinity(0) == mask


def test_idle_cores_reads_the_cpus_of_this_process_between_two_looks():
    """``IdleCores`` (when a rank starts its next actor's executor): nothing on
    the first look, then the idle CPUs of this process's mask since the last
    look; a thread that spins the whole time keeps one of them busy."""
    from hpc_ray.transport.idle_cores import IdleCores
    cores = len(os.sched_getaffinity(0))
    looks = IdleCores()
    try:
        assert looks.since_last() is None
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass
        idle = looks.since_last()
        assert idle is not None and 0.0 <= idle <= cores - 0.5, (idle, cores)
        time.sleep(0.3)
        idle = looks.since_last()
        assert idle is not None and 0.0 <= idle <= cores, (idle, cores)
    finally:
        looks.close()
    assert looks.since_last() is None   # closed: no reading
