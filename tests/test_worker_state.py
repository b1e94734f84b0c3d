"""A worker rank's state (``runtime/worker_state.py``) as a state machine, driven
directly (no MPI, no processes) by random events: tasks (some ``num_cpus=0``,
some under ``max_calls``) and actor calls arriving, executors starting, finishing
tasks, blocking in ``get``, closing (UNBLOCK) and resuming, lending CPUs from
other threads or from a wait at the nesting limit (DEEP), which gives back what
was sent to it nested (RETURNED), asking the head (get, wait, alloc) and getting its answers, dying at any step, actors created (on the standby executor or a new one), killed
or ending (their executor then cleans up until its EOF, or is killed), the head
taking queued tasks back, idle executors retiring.

The test plays the loop: after every step it starts what ``starts`` lists and
reads every outbox and every message for the head; it stops what ``retire``
lists as a step of its own, so dispatches may come between. Invariants
after every step:

- every task is in exactly one place: queued, on one live executor, finished,
  reported lost, given back to the head, or with an actor that was killed;
- nothing goes to an executor that is gone; CPU tasks only to CPU executors that
  are up, nested ones only to an executor waiting in ``get`` below the nesting
  limit at a level not closing; a dispatch starts
  no more CPU tasks than the CPUs that neither tasks nor actors hold;
- the CPUs lent (BLOCKED sent, less what PROCESS_ENDED gave back) equal what the
  live CPU executors lend; the refs held at the head equal the live executors';
- one CPU executor per CPU (besides spares), at most one standby, and the CPUs
  the actors hold add up;
- an answer from the head reaches the executor that asked while it lives; a
  dead one's requests are forgotten, except an ALLOC, whose block is given back.

Failing examples it found are kept as plain tests in
``test_worker_state_regressions.py``.
"""
from __future__ import annotations

import collections
import itertools
import math

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant,  # noqa: E402
                                 precondition, rule)

from hpc_ray.runtime.executor_record import cpus_lent, takes_nested, thread_lent  # noqa: E402
from hpc_ray.runtime.worker_state import (EXECUTOR_BATCH, MAX_EXTRA_EXECUTORS,  # noqa: E402
                                          WorkerState)
from hpc_ray.transport import messages as m  # noqa: E402

_ids = itertools.count(1)


def spec(cpus=1.0, fn="f", max_calls=0, actor=None) -> list:
    s = [None] * 13
    s[m.T_ID] = next(_ids)
    s[m.T_FN] = fn
    s[m.T_NAME] = fn
    s[m.T_BLOB] = b"blob-" + fn.encode()
    s[m.T_DEPS] = ()
    s[m.T_RETURNS] = [s[m.T_ID]]
    s[m.T_RES] = ((), {"CPU": cpus} if cpus else {})
    s[m.T_MAX_CALLS] = max_calls
    s[m.T_ACTOR] = actor
    return s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class WorkerStateMachine(RuleBasedStateMachine):
    @initialize(cpus=st.integers(1, 3), standby=st.booleans())
    def start(self, cpus, standby):
        self.clock = Clock()
        self.state = WorkerState(cpus, rank=1, node=0, extra_idle=10.0, actor_standby=standby,
                                 clock=self.clock)
        self.tasks: dict[int, list] = {}          #: every task and call that arrived
        self.finished: set[int] = set()
        self.lost: set[int] = set()
        self.returned: set[int] = set()
        self.with_killed: set[int] = set()        #: calls on an actor that was killed
        self.head_lent = 0                        #: CPUs the head counts as lent
        self.head_holds: collections.Counter = collections.Counter()
        self.ended: set[int] = set()              #: serials reported in PROCESS_ENDED
        self.actor_ids = itertools.count(1)
        self.known_actors: list[int] = []
        self.oids = itertools.count(10_000)
        #: What the head owes: rank's request id -> (kind, executor, its own id).
        self.at_head: dict[int, tuple] = {}
        self.reqs = itertools.count(1)
        self.state.open()
        self.loop()

    # --- the loop's part ---------------------------------------------------------

    def loop(self) -> None:
        st_ = self.state
        for ex in st_.starts:
            assert ex.proc is None and not ex.gone
            ex.proc = "process"
            ex.pid = 1000 + ex.serial
        st_.starts = []
        for ex in st_.to_write:
            assert not ex.gone, "a message for an executor that is gone"
            for msg in ex.outbox:
                if msg[0] == m.EXECUTE:
                    assert msg[1][m.T_ID] in ex.assigned
            ex.outbox = []
        st_.to_write = []
        self.read_out()

    def read_out(self) -> None:
        for msg in self.state.out:
            kind = msg[0]
            if kind in (m.TASK_DONE, m.TASK_FAILED):
                assert msg[1] not in self.finished
                self.finished.add(msg[1])
            elif kind == m.RETURNED:
                self.returned.update(msg[1])
            elif kind == m.BLOCKED:
                self.head_lent += msg[1]
            elif kind == m.HOLD:
                self.head_holds.update(msg[1])
            elif kind == m.RELEASE:
                self.head_holds.subtract(msg[1])
            elif kind == m.PROCESS_ENDED:
                _, pid, holds, _blocks, reqs, lent, lost, _code, _actor = msg
                serial = pid - 1000
                assert serial not in self.ended, "one executor's end reported twice"
                self.ended.add(serial)
                self.head_holds.subtract(holds)
                self.head_lent -= lent
                for rreq in reqs:
                    self.at_head.pop(rreq)        # the head forgets them
                assert not (set(lost) & self.lost)
                self.lost.update(lost)
        self.state.out = []

    def live(self, pred=lambda ex: True) -> list:
        return [ex for ex in self.state.all_executors() if pred(ex)]

    # --- the head's side ---------------------------------------------------------

    @rule(cpus=st.sampled_from([0, 0.25, 1.0, 1.0]), fn=st.sampled_from("fgh"),
          max_calls=st.sampled_from([0, 0, 1, 2]))
    def task_arrives(self, cpus, fn, max_calls):
        # A fraction of a CPU runs beside the CPU executors, as num_cpus=0 does
        # (the head sends one only where that fraction is free).
        s = spec(cpus, fn, max_calls)
        self.tasks[s[m.T_ID]] = s
        self.state.task_arrived(s)
        self.loop()

    @rule()
    def dispatch(self):
        st_ = self.state
        before = {ex.serial: dict(ex.assigned) for ex in st_.all_executors()}
        retiring = {ex.serial for ex in st_.all_executors() if ex.retiring}
        cpu = [ex for ex in st_.executors if ex.assigned]
        lent = sum(ex.deep + thread_lent(ex) for ex in cpu)
        room = max(0, math.ceil(st_.cpus - st_.actor_cpus - 1e-9) - len(cpu) + lent)
        st_.dispatch()
        newly_busy = 0
        for ex in st_.all_executors():
            old = before.get(ex.serial, {})
            new = [tid for tid in ex.assigned if tid not in old]
            if not new:
                continue
            assert ex.serial not in retiring, "a task for an executor whose max_calls are done"
            assert len(new) <= EXECUTOR_BATCH
            if old:                                       # nested in a task waiting in get
                assert ex.blocked > ex.closing and not ex.deep and len(new) == 1
            if ex in st_.executors:
                assert ex.ready and all(not _zero(self.tasks[t]) for t in new)
                if not old:
                    newly_busy += 1
            else:
                assert ex in st_.extras and all(_zero(self.tasks[t]) for t in new)
        assert newly_busy <= room
        assert len(st_.extras) <= MAX_EXTRA_EXECUTORS
        self.loop()

    @rule(n=st.integers(0, 3))
    def head_steals(self, n):
        queued = len(self.state.queue)
        self.state.steal(n)
        assert len(self.state.queue) == max(0, queued - n)
        self.loop()

    @rule(cpus=st.sampled_from([0, 1, 0.5]), standby_alive=st.booleans())
    def actor_created(self, cpus, standby_alive):
        aid = next(self.actor_ids)
        self.known_actors.append(aid)
        s = spec(cpus, "Actor", actor=aid)
        had_standby = list(self.state.standby)
        ex = self.state.start_actor(s, standby_alive)
        if had_standby and standby_alive:
            assert ex is had_standby[-1]
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.known_actors)
    def actor_called(self, data):
        aid = data.draw(st.sampled_from(self.known_actors))
        s = spec(0, "method", actor=aid)
        self.tasks[s[m.T_ID]] = s
        self.state.actor_call(s)
        self.loop()

    @rule(data=st.data(), graceful=st.booleans())
    @precondition(lambda self: self.state.actors)
    def actor_killed(self, data, graceful):
        aid = data.draw(st.sampled_from(sorted(self.state.actors)))
        self._kill_actor(aid, graceful)
        self.loop()

    @rule(cpus=st.sampled_from([0, 1]), standby_alive=st.booleans(), graceful=st.booleans())
    def actor_killed_in_the_turn_that_created_it(self, cpus, standby_alive, graceful):
        # KILL_ACTOR read in the same turn of the loop as the creation: the
        # executor's start may still be queued (ray.kill(A.remote())).
        aid = next(self.actor_ids)
        self.known_actors.append(aid)
        self.state.start_actor(spec(cpus, "Actor", actor=aid), standby_alive)
        self._kill_actor(aid, graceful)
        self.loop()

    def _kill_actor(self, aid: int, graceful: bool) -> None:
        """As ``WorkerLoop`` carries out KILL_ACTOR."""
        ex = self.state.forget_actor(aid)
        if graceful and ex.ready:
            # Its last handle is gone: the loop sends SHUTDOWN and watches it
            # until its EOF (leaving_executor_ends).
            self.state.send(ex, [(m.SHUTDOWN,)])
            self.state.leaving[ex] = self.clock()
        elif self.state.cancel_start(ex):
            assert ex.gone and not ex.assigned   # never started: nothing to report
        else:
            self.with_killed.update(ex.assigned)
            self.state.executor_ended(ex)       # killed, its last messages read

    @rule(data=st.data())
    @precondition(lambda self: self.live(lambda ex: ex.actor_id is not None and ex.ready))
    def actor_ends(self, data):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.actor_id is not None
                                                 and ex.ready)))
        aid = ex.actor_id
        self.state.on_executor(ex, [(m.ACTOR_DIED, aid, "exit", False)])
        assert aid not in self.state.actors and ex in self.state.leaving
        self.loop()

    @rule(data=st.data(), killed=st.booleans(), code=st.sampled_from([0, -9]))
    @precondition(lambda self: self.state.leaving)
    def leaving_executor_ends(self, data, killed, code):
        # Its EOF once its clean-up is done (or it crashed in it), or the loop kills
        # it (LEAVE_TIMEOUT). The head failed the calls it still held.
        ex = data.draw(st.sampled_from(list(self.state.leaving)))
        self.with_killed.update(ex.assigned)
        if killed:
            self.state.executor_ended(ex)
        else:
            self.state.executor_died(ex, code)
        assert ex not in self.state.leaving and ex.gone
        self.loop()

    @rule()
    @precondition(lambda self: self.state.standby_due)
    def standby_starts(self):
        self.state.standby_started()
        assert len(self.state.standby) <= 1
        self.loop()

    # --- executors' side ---------------------------------------------------------

    @rule(data=st.data())
    @precondition(lambda self: self.live(lambda ex: not ex.ready))
    def executor_up(self, data):
        ex = data.draw(st.sampled_from(self.live(lambda ex: not ex.ready)))
        self.state.on_executor(ex, [(m.EXEC_READY,)])
        self.loop()

    @rule(data=st.data(), failed=st.booleans())
    @precondition(lambda self: self.live(lambda ex: ex.assigned and ex.ready))
    def task_ends(self, data, failed):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.assigned and ex.ready)))
        tid = data.draw(st.sampled_from(list(ex.assigned)))
        if failed:
            msg = (m.TASK_FAILED, tid, ("error",), 1.0, 1.001, ex.pid)
        else:
            msg = (m.TASK_DONE, tid, [], None, 1.0, 1.001, ex.pid)
        self.state.on_executor(ex, [msg])
        assert tid not in ex.assigned
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.live(lambda ex: ex.assigned and ex.ready))
    def executor_blocks(self, data):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.assigned and ex.ready)))
        self.state.on_executor(ex, [(m.BLOCKED, 1)])
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.live(lambda ex: ex.blocked > ex.closing))
    def executor_unblocks(self, data):
        # A waiting level's answer came: it closes (runs what was sent before the
        # rank heard) with its CPU still lent, then resumes (executor_resumes).
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.blocked > ex.closing)))
        lent = cpus_lent(ex)
        self.state.on_executor(ex, [(m.UNBLOCK, 77)])
        assert (m.REPLY, 77, None) in ex.outbox
        assert cpus_lent(ex) == lent
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.live(lambda ex: ex.closing))
    def executor_resumes(self, data):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.closing)))
        levels = (ex.blocked, ex.closing)
        self.state.on_executor(ex, [(m.BLOCKED, -1)])
        assert (ex.blocked, ex.closing) == (levels[0] - 1, levels[1] - 1)
        self.loop()

    @rule(data=st.data(), lend=st.booleans())
    @precondition(lambda self: self.live(lambda ex: ex.assigned and ex.ready))
    def thread_lends(self, data, lend):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.assigned and ex.ready)))
        if lend:
            self.state.on_executor(ex, [(m.LEND, 1)])
        elif ex.lending:
            self.state.on_executor(ex, [(m.LEND, -1)])
        self.loop()

    @rule(data=st.data(), deep=st.booleans())
    @precondition(lambda self: self.live(lambda ex: ex.blocked))
    def executor_waits_deep(self, data, deep):
        # Only a main thread that already waits (nested tasks on its stack) goes deep.
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.blocked)))
        if deep:
            # What was sent nested before the rank hears comes back (RETURNED).
            nested = [tid for tid, (was_nested, _) in ex.assigned.items() if was_nested]
            back = data.draw(st.lists(st.sampled_from(nested), unique=True)) if nested else []
            self.state.on_executor(ex, [(m.DEEP, 1)] + ([(m.RETURNED, back)] if back else []))
            assert not set(back) & set(ex.assigned)
        elif ex.deep:
            self.state.on_executor(ex, [(m.DEEP, -1)])
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.live(lambda ex: ex.blocked > ex.closing and not ex.deep))
    def waiting_level_goes_deep(self, data):
        # A level that lent its CPU for nested tasks was sent one that waits for a
        # task below it on the stack (nested_state.waits_for_outer): the level
        # lends its CPU to other executors from then on, and gives that task back.
        ex = data.draw(st.sampled_from(self.live(
            lambda ex: ex.blocked > ex.closing and not ex.deep)))
        lent = cpus_lent(ex)
        nested = [tid for tid, (was_nested, _) in ex.assigned.items() if was_nested]
        back = [data.draw(st.sampled_from(nested))] if nested else []
        self.state.on_executor(ex, [(m.BLOCKED, -1), (m.DEEP, 1)]
                               + ([(m.RETURNED, back)] if back else []))
        assert cpus_lent(ex) == lent and not takes_nested(ex)
        assert not set(back) & set(ex.assigned)
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.live(_deep_with_nested))
    def deep_executor_gives_back(self, data):
        # Tasks sent nested before the rank heard DEEP: the deep wait returns them.
        ex = data.draw(st.sampled_from(self.live(_deep_with_nested)))
        tid = data.draw(st.sampled_from([t for t, (nested, _) in ex.assigned.items()
                                         if nested]))
        self.state.on_executor(ex, [(m.RETURNED, [tid])])
        assert tid not in ex.assigned
        assert tid in [s[m.T_ID] for s in (*self.state.queue, *self.state.zero_cpu_queue)]
        self.loop()

    @rule(data=st.data(), release=st.booleans())
    @precondition(lambda self: self.live(lambda ex: ex.ready))
    def executor_holds(self, data, release):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.ready)))
        if release and ex.holds:
            self.state.on_executor(ex, [(m.RELEASE, [next(iter(ex.holds))])])
        else:
            self.state.on_executor(ex, [(m.HOLD, [next(self.oids)])])
        self.loop()

    @rule(data=st.data(), kind=st.sampled_from([m.GET, m.WAIT, m.ALLOC]))
    @precondition(lambda self: self.live(lambda ex: ex.ready))
    def executor_asks(self, data, kind):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.ready)))
        req = next(self.reqs)
        self.state.on_executor(ex, [(kind, req, 900 if kind == m.ALLOC else [next(self.oids)])])
        rreq = self.state.out[-1][1]
        assert rreq not in self.at_head
        self.at_head[rreq] = (kind, ex, req)
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.at_head)
    def head_answers(self, data):
        rreq = data.draw(st.sampled_from(sorted(self.at_head)))
        kind, ex, req = self.at_head.pop(rreq)
        off = next(self.oids)
        payload = ("block", off) if kind == m.ALLOC else [("raw", 1)]
        assert self.state.head_replied(rreq, payload) is None
        if ex.gone:                     # only an ALLOC's answer is still due: given back
            assert kind == m.ALLOC and not ex.outbox
            assert (m.FREE_BLOCKS, [(off, 900)]) in self.state.out
        else:
            assert (m.REPLY, req, payload) in ex.outbox
            assert kind != m.ALLOC or ex.unsealed[off] == 900
        self.loop()

    @rule(data=st.data())
    @precondition(lambda self: self.live(lambda ex: ex.proc is not None
                                         and ex not in self.state.leaving))
    def executor_dies(self, data):
        ex = data.draw(st.sampled_from(self.live(lambda ex: ex.proc is not None
                                                 and ex not in self.state.leaving)))
        held = list(ex.assigned)
        running = [tid for i, (tid, (nested, _)) in enumerate(ex.assigned.items())
                   if i == 0 or nested]
        actor = ex.actor_id is not None and self.state.actors.get(ex.actor_id) is ex
        self.state.executor_died(ex, -9)
        self.read_out()
        if actor:
            assert set(held) <= self.lost            # an actor's calls all go with it
        else:
            assert set(running) <= self.lost
        self.loop()

    @rule()
    @precondition(lambda self: self.state.retire)
    def loop_retires(self):
        # (The loop stops them after a pass's dispatch: nothing may reach them first.)
        st_ = self.state
        while st_.retire:
            ex = st_.retire[0]
            assert ex.retiring and not ex.assigned
            st_.retire_begin(ex)
            st_.executor_ended(ex)
        self.loop()

    @rule(seconds=st.sampled_from([1.0, 11.0]))
    def time_passes(self, seconds):
        self.clock.now += seconds
        for ex in self.state.idle_executors():
            assert (ex.extra or ex.spare) and not ex.assigned
            self.state.retire_begin(ex)
            self.state.executor_ended(ex)
        self.loop()

    # --- invariants --------------------------------------------------------------

    @invariant()
    def every_task_is_in_one_place(self):
        st_ = self.state
        places = collections.Counter()
        for s in st_.queue:
            assert not _zero(s)
            places[s[m.T_ID]] += 1
        for s in st_.zero_cpu_queue:
            assert _zero(s)
            places[s[m.T_ID]] += 1
        for ex in st_.all_executors():
            for tid in ex.assigned:
                places[tid] += 1
        for done in (self.finished, self.lost, self.returned, self.with_killed):
            for tid in done:
                places[tid] += 1
        assert set(places) == set(self.tasks)
        assert all(n == 1 for n in places.values()), \
            {tid: n for tid, n in places.items() if n != 1}

    @invariant()
    def executors_are_listed_once_and_alive(self):
        st_ = self.state
        listed = st_.all_executors()
        assert len({ex.serial for ex in listed}) == len(listed)
        for ex in listed:
            assert not ex.gone and ex.serial not in self.ended
        assert sum(1 for ex in st_.executors if not ex.spare) == st_.cpus
        assert all(not ex.extra and ex.actor_id is None for ex in st_.executors)
        assert all(ex.extra for ex in st_.extras)
        assert len(st_.standby) <= 1
        assert not (st_.standby_due and st_.standby)
        assert st_.actor_cpus == sum(ex.cpus for ex in st_.actors.values())

    @invariant()
    def lent_cpus_and_holds_agree_with_the_head(self):
        live = self.state.all_executors()
        assert self.head_lent == sum(map(cpus_lent, live))
        held = collections.Counter()
        for ex in live:
            held.update({oid: n for oid, n in ex.holds.items()})
        assert +self.head_holds == held


def _deep_with_nested(ex) -> bool:
    return ex.deep and any(nested for nested, _ in ex.assigned.values())


def _zero(s: list) -> bool:
    """A task for extra executors: no whole CPU (``worker_state.no_cpu``)."""
    return s[m.T_RES][1].get("CPU", 0) < 1


WorkerStateMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_worker_state_machine = WorkerStateMachine.TestCase
