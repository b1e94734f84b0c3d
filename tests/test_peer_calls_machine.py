"""Direct calls between executors (``runtime/peer_calls.py``) as a state machine.

Hypothesis plays one caller's process against one actor, with the caller's real
``PeerCaller`` and the actor's real ``PeerServer`` talking over a real abstract
Unix socket in this process. The head is a FIFO that delivers the calls routed
through it (and fences: a collective group or a function the head sends the
actor's rank, which the caller's later calls must not overtake) to the actor
whenever hypothesis likes. Events: calls that may go
direct and calls that must go through the head, deliveries, the actor reading
and running its next call, the actor sending the answers it queued, the caller
reading answers, gets, dropped refs, a new task in the caller's process, and the
actor's process dying (answers it had not sent are lost) and coming back; the
caller may call again before it has read of the death.

After every step it checks:

- a task's calls run in the order the task made them, whichever path each took,
  and the calls made after a fence run after it;
- a call is never both in flight and answered, and every call in flight is on
  the link it was sent on;
- no caller has calls through the head outstanding while direct ones are in
  flight to the same actor (the rule that keeps the order);
- no direct call is lost: each is in flight, answered (a value, or
  ActorDiedError once the actor died), or its ref was dropped.
"""
from __future__ import annotations

import itertools
import os
import threading

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition,  # noqa: E402
                                 rule)

from hpc_ray.runtime.peer_calls import DIRECT, DRAIN, PeerCaller  # noqa: E402
from hpc_ray.runtime.peer_server import PeerServer  # noqa: E402
from hpc_ray.transport import messages as m  # noqa: E402
from hpc_ray.transport.serialization import RAW  # noqa: E402

ACTOR = 0x5EED
_sessions = itertools.count()
_ids = itertools.count(1)


def call_spec(direct_ok: bool) -> list:
    s = [None] * 13
    tid = next(_ids)
    s[m.T_ID] = tid
    s[m.T_FN] = "add"
    s[m.T_NAME] = "Box.add"
    s[m.T_PAYLOAD] = (RAW, (1,))
    s[m.T_DEPS] = []
    s[m.T_RETURNS] = [next(_ids)]
    # A call with retries must go through the head, which retries it.
    s[m.T_RETRIES] = 0 if direct_ok else 1
    s[m.T_ACTOR] = ACTOR
    return s


class PeerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.session = f"test-{os.getpid()}-{next(_sessions)}"
        lock = threading.Lock()
        self.c_readers: dict = {}
        self.c_channels: dict = {}
        self.caller = PeerCaller(self.session, self.c_readers, self.c_channels, lock)
        self.s_readers: dict = {}
        self.s_channels: dict = {}
        self.lock = lock
        self.server = PeerServer.open(self.session, ACTOR, self.s_readers, self.s_channels, lock)
        assert self.server is not None
        self.head_fifo: list = []       # specs routed through the head, not at the actor yet
        self.inbox: list = []           # (path, spec) in the order the actor got them
        self.made: dict = {}            # return id -> (task, seq, path)
        self.executed: list = []        # (task, seq) in the order the actor ran them
        self.finished_at_head: set = set()
        self.dropped: set = set()
        self.task = 0
        self.seq = 0

    def teardown(self):
        self._close_server()
        for link in list(self.caller.links.values()):
            self.caller.close(link)

    # --- the actor's side ------------------------------------------------------

    def _close_server(self):
        for fd in list(self.server.callers):
            self.server._drop(self.server.callers[fd])
        self.s_readers.pop(self.server.listener.fileno(), None)
        self.server.listener.close()

    def _actor_read(self):
        seen: set = set()
        while self.s_readers.keys() - seen:      # a connection accepted is read at once
            for fd in list(self.s_readers.keys() - seen):
                seen.add(fd)
                reader = self.s_readers.get(fd)
                if reader is not None:
                    self.inbox.extend(("direct", msg[1]) for msg in reader())

    def _actor_step(self):
        path, spec = self.inbox.pop(0)
        oid = spec[m.T_RETURNS][0]
        task, seq, kind = self.made[oid]
        self.executed.append((task, seq, kind))
        if path == "direct":
            tid = spec[m.T_ID]
            answered = self.server.answer(tid, (m.TASK_DONE, tid, [(RAW, oid)], None,
                                                0.0, 0.0, 0), None)
            assert answered
        else:
            self.finished_at_head.add(oid)

    def _caller_read(self):
        for fd in list(self.c_readers):
            reader = self.c_readers.get(fd)
            if reader is not None:
                reader()

    # --- rules -----------------------------------------------------------------

    @rule(direct_ok=st.booleans())
    def call(self, direct_ok):
        spec = call_spec(direct_ok)
        how, link = self.caller.route(spec)
        if how == DRAIN:
            # What the executor's _await does: run until the link's calls are answered.
            for _ in range(1000):
                if not link.inflight:
                    break
                self._actor_read()
                if self.inbox:
                    self._actor_step()
                elif self.head_fifo:
                    self.inbox.append(("head", self.head_fifo.pop(0)))
                self.server.send_answers()
                self._caller_read()
            assert not link.inflight, "a drain never ended"
        oid = spec[m.T_RETURNS][0]
        self.seq += 1
        if how == DIRECT and self.caller.send(link, spec, None):
            self.made[oid] = (self.task, self.seq, "direct")
        else:
            # (A direct call the dead actor's socket refused goes through the head.)
            self.caller.note_head_call(ACTOR, spec[m.T_RETURNS])
            self.head_fifo.append(spec)
            self.made[oid] = (self.task, self.seq, "head")

    @precondition(lambda self: self.head_fifo)
    @rule()
    def head_delivers(self):
        self.inbox.append(("head", self.head_fifo.pop(0)))

    @rule()
    def actor_reads(self):
        self._actor_read()

    @precondition(lambda self: self.inbox)
    @rule()
    def actor_runs_next_call(self):
        self._actor_step()

    @rule()
    def actor_flushes(self):
        self.server.send_answers()

    @rule()
    def caller_reads(self):
        self._caller_read()

    @precondition(lambda self: self.made)
    @rule(data=st.data())
    def get(self, data):
        oid = data.draw(st.sampled_from(sorted(self.made)))
        if oid in self.finished_at_head:
            self.caller.seen_finished([oid])

    @precondition(lambda self: self.made)
    @rule(data=st.data())
    def drop_ref(self, data):
        oid = data.draw(st.sampled_from(sorted(self.made)))
        if self.made[oid][2] == "direct" and oid not in self.dropped:
            self.dropped.add(oid)
            self.caller.forget(oid)

    @precondition(lambda self: self.caller.pending)
    @rule(data=st.data(), died=st.booleans())
    def drop_ref_while_its_answer_is_filed(self, data, died):
        """Another thread's last ref to a call's result dies while this thread
        files the call's answer (``died``: the actor's death), between the
        filer's look at the dropped refs and the filing (the GIL may switch
        threads there)."""
        oid = data.draw(st.sampled_from(sorted(self.caller.pending)))
        caller, dropped = self.caller, self.dropped

        class DropBeforeFiling(dict):
            def __setitem__(self, key, value):
                if key == oid and oid not in dropped:
                    dropped.add(oid)
                    assert caller.forget(oid)
                super().__setitem__(key, value)

        caller.results = DropBeforeFiling(caller.results)
        try:
            if died:
                self.actor_dies_and_restarts()
            else:
                self._actor_read()
                while self.inbox:
                    self._actor_step()
                self.server.send_answers()
            self._caller_read()
        finally:
            caller.results = dict(caller.results)
        if oid not in dropped:      # its answer did not come yet: the ref dies now
            dropped.add(oid)
            assert caller.forget(oid)

    @rule(everyone=st.booleans())
    def fence(self, everyone):
        # A collective group (or a function run on all workers) the head sends the
        # actor's rank: this caller's later calls must run after it.
        if everyone:
            self.caller.fence("run_function", (b"fn",))
        else:
            self.caller.fence("collective_create", ("group", [ACTOR]))
        spec = call_spec(False)
        self.seq += 1
        self.made[spec[m.T_RETURNS][0]] = (self.task, self.seq, "fence")
        self.head_fifo.append(spec)

    @rule()
    def time_passes(self):
        self.caller.refused.clear()     # RETRY_CONNECT is over: the caller may connect again

    @rule()
    def new_task(self):
        self.caller.new_task()
        self.task += 1
        self.seq = 0

    @rule()
    def actor_dies_and_restarts(self):
        self._close_server()
        # Calls queued in the dead process never run; those that came through the
        # head fail there (no retries).
        for path, spec in self.inbox:
            if path == "head":
                self.finished_at_head.add(spec[m.T_RETURNS][0])
        self.inbox.clear()
        self.s_readers.clear()
        self.s_channels.clear()
        self.server = PeerServer.open(self.session, ACTOR, self.s_readers, self.s_channels,
                                      self.lock)
        assert self.server is not None
        # The caller learns of the death when it next reads, or when its next
        # call's write is refused (``PeerCaller.send``), whichever comes first.

    # --- invariants ------------------------------------------------------------

    @invariant()
    def each_tasks_calls_run_in_order(self):
        # A fence promises that the calls made after it run after it; a direct
        # call made before it may still sit in the actor's socket when it comes.
        last_call: dict = {}
        last_fence: dict = {}
        for task, seq, kind in self.executed:
            after = last_call.get(task, 0)
            assert seq > after, f"task {task} ran {kind} {seq} after call {after}"
            if kind == "fence":
                assert seq > last_fence.get(task, 0), (task, seq, last_fence)
                last_fence[task] = seq
            else:
                last_call[task] = seq

    @invariant()
    def a_call_is_in_flight_or_answered_not_both(self):
        caller = self.caller
        assert not (caller.pending.keys() & caller.results.keys())
        assert caller.dropped <= caller.pending.keys()
        for link in caller.links.values():
            for tid, oid in link.inflight.items():
                assert caller.pending[oid][0] is link and caller.pending[oid][1] == tid

    @invariant()
    def no_head_calls_outstanding_beside_direct_ones(self):
        link = self.caller.links.get(ACTOR)
        if link is not None and link.inflight:
            assert not self.caller.head_calls.get(ACTOR)

    @invariant()
    def a_dropped_ref_leaves_no_result_behind(self):
        assert not (self.dropped & self.caller.results.keys())

    @invariant()
    def no_direct_call_is_lost(self):
        caller = self.caller
        for oid, (_, _, path) in self.made.items():
            if path != "direct" or oid in self.dropped:
                continue
            assert oid in caller.pending or oid in caller.results, oid
            res = caller.results.get(oid)
            if res is not None:
                # A value, or lost with the actor's process (worded on get).
                assert res.record == (RAW, oid) or res.record is None and res.lost, res.record


PeerMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40,
                                         deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
TestPeerMachine = PeerMachine.TestCase


def test_a_restarted_actor_fails_the_calls_in_flight_and_takes_new_ones():
    machine = PeerMachine()
    try:
        machine.call(True)
        machine.call(True)
        machine.actor_reads()
        machine.actor_runs_next_call()       # the first call runs, the second is queued
        machine.actor_flushes()
        machine.actor_dies_and_restarts()
        machine.caller_reads()               # the answer that was sent
        machine.caller_reads()               # then the end of the socket
        results = machine.caller.results
        first, second = sorted(results)
        assert results[first].record == (RAW, first)
        assert results[second].record is None and results[second].lost[0] == ACTOR
        machine.time_passes()
        machine.call(True)                   # a new link to the new process
        machine.actor_reads()
        machine.actor_runs_next_call()
        machine.actor_flushes()
        machine.caller_reads()
        third = max(results)
        assert results[third].record == (RAW, third)
    finally:
        machine.teardown()


def test_a_ref_that_dies_while_its_answer_is_filed_leaves_nothing():
    """Its ref dies in another thread after the reading thread looked for it
    among the dropped refs and before it filed the answer: the answer is let go
    of, as a ref dropped earlier is (the result stayed in ``results``, and the
    id in ``dropped``, until the process ended)."""
    for died in (False, True):
        machine = PeerMachine()
        try:
            machine.call(True)
            machine.call(True)
            first = min(machine.made)
            data = _Drawn(first)
            machine.drop_ref_while_its_answer_is_filed(data, died)
            machine.a_dropped_ref_leaves_no_result_behind()
            machine.a_call_is_in_flight_or_answered_not_both()
            assert first not in machine.caller.results and not machine.caller.dropped
            assert max(machine.made) in machine.caller.results     # the other call's
        finally:
            machine.teardown()


class _Drawn:
    """``st.data()``'s stand-in in a test that calls a rule itself: draws ``value``."""

    def __init__(self, value) -> None:
        self.value = value

    def draw(self, strategy):
        return self.value


def test_a_fence_may_run_before_a_direct_call_made_earlier():
    """Found by hypothesis: a direct call still in the actor's socket when the
    fence made after it arrives through the head runs after the fence; the
    calls made after the fence run after both."""
    machine = PeerMachine()
    try:
        machine.call(True)
        machine.fence(False)
        machine.head_delivers()
        machine.call(False)      # drains the first call: the actor runs the fence, then it
        machine.each_tasks_calls_run_in_order()
        assert [kind for _, _, kind in machine.executed] == ["fence", "direct"]
    finally:
        machine.teardown()


def test_a_call_after_the_actors_death_goes_through_the_head():
    """The caller has not read of the death: the dead socket refuses the call,
    which then goes through the head instead of being lost; the call in flight
    at the death is lost."""
    machine = PeerMachine()
    try:
        machine.call(True)
        machine.actor_dies_and_restarts()
        machine.call(True)
        lost, rerouted = sorted(machine.made)
        assert machine.made[rerouted][2] == "head"
        assert machine.caller.results[lost].lost[0] == ACTOR
        machine.head_delivers()
        machine.actor_runs_next_call()
        assert rerouted in machine.finished_at_head
    finally:
        machine.teardown()


def test_threads_noting_and_clearing_head_calls_lose_none():
    """Two caller threads, each with its own actor, note calls through the head
    and clear the finished ones at once (what two driver threads getting batches
    do). A thread's entry dropped while the other emptied its own set raised
    KeyError in the driver's thread (CI, test_calls_between_executors), and one
    dropped just after another thread added a call to it would let a later
    direct call overtake that call."""
    import sys
    caller = PeerCaller("race", {}, {}, threading.Lock())
    errors = []
    lost = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def loop(actor_id: int, base: int) -> None:
        try:
            for i in range(3000):
                oid = base + 2 * i
                caller.note_head_call(actor_id, [oid])
                if oid not in caller.head_calls_of(actor_id):
                    lost.append(oid)     # noted, not yet seen finished: must be there
                caller.seen_finished([oid])
        except Exception as err:          # noqa: BLE001 (the test reports it)
            errors.append(repr(err))

    try:
        threads = [threading.Thread(target=loop, args=(a, a * 10**6)) for a in (1, 2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    finally:
        sys.setswitchinterval(switch)
    assert errors == []
    assert lost == []
    assert caller.head_calls == {}


def test_an_actors_calls_to_itself_go_through_the_head():
    """Direct, a call an actor makes to itself would queue behind the method
    making it, and the ref it returns would wait for that answer (promote)."""
    from hpc_ray.runtime.peer_calls import HEAD
    caller = PeerCaller("self", {}, {}, threading.Lock())
    caller.own_actor = ACTOR
    assert caller.route(call_spec(True)) == (HEAD, None)
