"""A worker rank's state: its queues, which executor runs what, and the decisions
of what to run where. No MPI, no sockets, no processes: ``WorkerLoop``
(``worker.py``) feeds it events and carries out what it asks.

    head ──EXECUTE──▶ loop ──task_arrived / actor_call──▶ WorkerState
    executor ──TASK_DONE/BLOCKED/HOLD/...──▶ loop ──on_executor──▶ WorkerState
    WorkerState ──out (messages for the head)──▶ loop ──MPI──▶ head
    WorkerState ──starts (executors to start), outboxes (messages for each)──▶ loop ──▶ pipes

An ``Executor`` is the rank's record of one executor process; its ``proc`` is
the loop's handle on the process (``executor_procs.ExecutorProc``), never used
here. ``tests/test_worker_state.py`` drives this object with hypothesis:
tasks and actor calls arriving, executors finishing, blocking in ``get``,
lending, dying at any step, standby executors, retirement.

Tasks that hold a CPU queue in ``queue`` and run on the rank's CPU executors,
one per CPU, so at most that many run at once (plus nested ones while an
executor waits in ``get``). A ``num_cpus=0`` task holds no CPU and does not wait
for one (as in Ray), and a task that holds a fraction of one (``num_cpus=0.25``)
was sent by the head only when that fraction is free (``scheduler.capacity_ok``),
so several pack onto one CPU: either queues in ``zero_cpu_queue`` and runs on an extra
executor, started when none is idle (at most ``MAX_EXTRA_EXECUTORS``) and
stopped after ``extra_idle`` seconds without work. An extra executor's ``get``
lends no CPU, so its BLOCKED count stays on this rank.
"""
from __future__ import annotations

import collections
import itertools
import math
import time
from typing import Any, Callable

from ..transport import messages as m
from ..transport.serialization import SHM
from .batch_sizing import EXECUTOR_BATCH, FunctionTimes, batch_length
from .executor_record import Executor, cpus_lent, takes_nested, thread_lent
from .rank_requests import ALLOC, CALL, GET, WAIT, RankRequests, Request

#: Most extra executors a rank runs at once for num_cpus=0 tasks. Each is a
#: Python process (tens of MB); beyond this many, num_cpus=0 tasks wait for one
#: to be idle, or run nested in one that waits in ``get``.
MAX_EXTRA_EXECUTORS = 32
#: Default of ``extra_idle`` (``HPC_RAY_EXTRA_EXECUTOR_IDLE``): seconds an extra
#: executor waits for another num_cpus=0 task before it stops. Longer keeps a
#: process (tens of MB) around; shorter pays a start-up (~0.3 s) more often.
EXTRA_IDLE_DEFAULT = 10.0

#: Executors' requests the rank passes on to the head (``rank_requests.py``), and
#: what each is called there.
_REQUEST_KINDS = {m.GET: GET, m.WAIT: WAIT, m.ALLOC: ALLOC, m.CONTROL_CALL: CALL}


def no_cpu(spec: list) -> bool:
    """Whether a task holds no whole CPU (``num_cpus=0``, or a fraction):
    ``T_RES`` is (GPU ids, resources)."""
    return spec[m.T_RES][1].get("CPU", 0) < 1 - 1e-9


class WorkerState:
    """A worker rank's queues, executors and dispatch decisions.

    What it decides comes out in three lists the loop empties: ``out``
    (messages for the head), ``starts`` (records of executors to start a
    process for) and ``to_write`` (executors with messages in their ``outbox``).
    ``retire`` lists executors whose last task under max_calls ended: the loop
    stops them (``retire_begin``, then ``executor_ended``).
    """

    def __init__(self, cpus: int, rank: int = 1, node: int = 0,
                 extra_idle: float = EXTRA_IDLE_DEFAULT, actor_standby: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cpus = cpus
        self.rank = rank
        #: This rank's node: results stored here seal the blocks they were given.
        self.node = node
        #: Seconds an extra or spare executor may stay idle before it is stopped.
        self.extra_idle = extra_idle
        self.actor_standby = actor_standby
        self.clock = clock
        self.queue: collections.deque = collections.deque()
        self.zero_cpu_queue: collections.deque = collections.deque()
        self.executors: list[Executor] = []
        self.extras: list[Executor] = []
        self.actors: dict[int, Executor] = {}
        #: An executor started ahead for the rank's next actor (0 or 1 of them),
        #: once the rank has hosted one: creating an actor then costs no
        #: interpreter start-up (~0.5 s here), as in Ray's worker pool.
        self.standby: list[Executor] = []
        #: The next standby is due: the loop starts it when the cores have time
        #: to spare (``standby_started``).
        self.standby_due = False
        #: CPUs the actors in ``actors`` hold: CPU tasks run on the rest.
        self.actor_cpus = 0
        #: Executors' requests to the head, renumbered (``rank_requests.py``).
        self.requests = RankRequests()
        self.fn_blobs: dict = {}
        self.fn_times = FunctionTimes()
        #: Serials of executors whose requests are not read now (THROTTLE).
        self.throttled: set[int] = set()
        #: SHUTDOWN read: no standby starts any more.
        self.stopping = False
        self.out: list = []
        self.starts: list[Executor] = []
        self.to_write: list[Executor] = []
        self.retire: list[Executor] = []
        #: Executors cleaning up before they exit (their actor ended), watched
        #: until their EOF -> since when (the loop kills them after a while).
        self.leaving: dict[Executor, float] = {}
        self._serials = itertools.count(1)

    # --- executors -------------------------------------------------------------

    def open(self) -> None:
        """The rank starts: one CPU executor per CPU."""
        for _ in range(self.cpus):
            self.executors.append(self._new())

    def _new(self, actor_id: int | None = None) -> Executor:
        ex = Executor(next(self._serials), actor_id, self.clock())
        self.starts.append(ex)
        return ex

    def cancel_start(self, ex: Executor) -> bool:
        """``ex``'s process, not started yet, never will be (its actor ended
        first); False if it was started. The head never heard of it."""
        if ex not in self.starts:
            return False
        self.starts.remove(ex)
        if ex in self.to_write:
            self.to_write.remove(ex)
        ex.gone = True
        ex.outbox = []
        return True

    def all_executors(self) -> list[Executor]:
        return (self.executors + self.extras + list(self.actors.values()) + self.standby
                + list(self.leaving))

    def send(self, ex: Executor, msgs: list) -> None:
        """Queue ``msgs`` for ``ex`` (the loop writes each outbox as one frame);
        nothing goes to one that is gone."""
        if ex.gone:
            return
        if not ex.outbox:
            self.to_write.append(ex)
        ex.outbox += msgs

    def send_all(self, msg: tuple) -> None:
        for ex in self.all_executors():
            if ex not in self.leaving:
                self.send(ex, [msg])

    def ship_fn(self, ex: Executor, spec: list) -> list:
        """The spec for ``ex``: with the function's blob the first time it sees it."""
        fn_id = spec[m.T_FN]
        if spec[m.T_BLOB] is not None:
            self.fn_blobs[fn_id] = spec[m.T_BLOB]
        blob = None
        if fn_id is not None and fn_id not in ex.known_fns and fn_id in self.fn_blobs:
            ex.known_fns.add(fn_id)
            blob = self.fn_blobs[fn_id]
        if blob is spec[m.T_BLOB]:
            return spec
        spec = list(spec)
        spec[m.T_BLOB] = blob
        return spec

    # --- from the head -----------------------------------------------------------

    def task_arrived(self, spec: list) -> None:
        """A task (not an actor call) to run here. Its function's blob, which the
        head sends a rank once, is kept at once: the head may take the task back
        (``steal``) and send the next ones without it."""
        if spec[m.T_BLOB] is not None:
            self.fn_blobs[spec[m.T_FN]] = spec[m.T_BLOB]
        (self.zero_cpu_queue if no_cpu(spec) else self.queue).append(spec)

    def actor_call(self, spec: list) -> None:
        """A call of an actor in an executor here; failed at once when the actor
        is no longer here."""
        ex = self.actors.get(spec[m.T_ACTOR])
        if ex is None:
            from ..exceptions import ActorDiedError
            from . import values
            error = values.error_record(ActorDiedError(
                f"the actor for call {spec[m.T_NAME]} is no longer on rank {self.rank}"))
            self.out.append((m.TASK_FAILED, spec[m.T_ID], error, 0.0, 0.0, 0))
            return
        ex.assigned[spec[m.T_ID]] = (False, spec)
        self.send(ex, [(m.EXECUTE, self.ship_fn(ex, spec))])

    def start_actor(self, spec: list, standby_alive: bool) -> Executor:
        """An actor to create in an executor of its own: the standby one when it
        is there and alive (``standby_alive``), else a new one."""
        actor_id = spec[m.T_ACTOR]
        if self.standby and standby_alive:
            # (One that died stays listed until its EOF is read: executor_died.)
            ex = self.standby.pop()
            ex.actor_id = actor_id
            ex.for_actor = True
            if ex.ready:
                self._refill_standby()
        else:
            ex = self._new(actor_id)
        self.actors[actor_id] = ex
        ex.cpus = spec[m.T_RES][1].get("CPU", 0)
        self.actor_cpus += ex.cpus
        self.send(ex, [(m.CREATE_ACTOR, self.ship_fn(ex, spec))])
        return ex

    def forget_actor(self, actor_id: int) -> Executor | None:
        ex = self.actors.pop(actor_id, None)
        if ex is not None:
            self.actor_cpus -= ex.cpus
        return ex

    def steal(self, n: int) -> None:
        """The head takes back up to ``n`` queued tasks (the newest) for idle ranks."""
        given = []
        while self.queue and len(given) < n:
            given.append(self.queue.pop()[m.T_ID])
        self.out.append((m.RETURNED, given))

    def throttle(self, serial: int, on: bool) -> None:
        if on:
            self.throttled.add(serial)
        else:
            self.throttled.discard(serial)

    def head_replied(self, rreq: int, payload: Any) -> Request | None:
        """The head answered request ``rreq``: passed on to its executor, or, when
        the answer names objects to copy here first (a get's fetch plans), the
        request is returned for the loop to fetch them and answer."""
        r, give_back = self.requests.answered(rreq, payload)
        if give_back:
            self.out.append((m.FREE_BLOCKS, give_back))
        if r is None:
            return None
        if r.kind == ALLOC:
            if payload[1] is not None:
                r.owner.unsealed[payload[1]] = r.ids
        elif r.kind == GET and any(rec[0] == m.FETCH_PLAN for rec in payload):
            return r
        self.send(r.owner, [(m.REPLY, r.req, payload)])
        return None

    # --- from executors --------------------------------------------------------

    def on_executor(self, ex: Executor, msgs: list) -> list | None:
        """Messages from ``ex``; returns those the loop runs itself (COLLECTIVE_OP)."""
        out = self.out
        left = None
        for msg in msgs:
            kind = msg[0]
            if kind == m.TASK_DONE or kind == m.TASK_FAILED:
                if kind == m.TASK_DONE:
                    _, task_id, results, _, t_start, t_end, _ = msg
                else:
                    _, task_id, _, t_start, t_end, _ = msg
                entry = ex.assigned.pop(task_id, None)
                if entry is not None and ex.actor_id is None:
                    self.fn_times.record(entry[1][m.T_FN], t_end - t_start)
                if kind == m.TASK_DONE and ex.unsealed:
                    self._sealed(ex, results)
                out.append(msg)
                if not ex.assigned:
                    ex.idle_since = self.clock()
                    if ex.retiring and ex not in self.retire:
                        self.retire.append(ex)
            elif kind == m.HOLD:
                _, object_ids = msg
                ex.took(object_ids)
                out.append(msg)
            elif kind == m.RELEASE:
                _, object_ids = msg
                ex.gave_back(object_ids)
                out.append(msg)
            elif kind == m.PUT:
                _, object_id, record, _ = msg
                ex.took((object_id,))
                if ex.unsealed:
                    self._sealed(ex, (record,))
                out.append(msg)
            elif kind == m.SUBMIT:
                _, spec = msg
                ex.took(spec[m.T_RETURNS])
                out.append(msg)
            elif kind in _REQUEST_KINDS:
                # ids: a GET's or WAIT's object_ids, an ALLOC's size, a CONTROL_CALL's name.
                _, req_id, ids = msg[:3]
                rreq = self.requests.ask(ex, req_id, _REQUEST_KINDS[kind], ids)
                out.append((kind, rreq) + msg[2:])
            elif kind == m.WAIT_NOW:
                _, req_id = msg
                rreq = self.requests.rank_id(ex, req_id)
                if rreq is not None:
                    out.append((m.WAIT_NOW, rreq))
            elif kind == m.FREE_BLOCKS:
                # Scratch blocks (collective_buffers) the executor gave back itself.
                _, blocks = msg
                for off, _size in blocks:
                    ex.unsealed.pop(off, None)
                out.append(msg)
            elif kind == m.RETURNED:
                self._given_back(ex, msg[1])
            elif kind == m.BLOCKED or kind == m.LEND or kind == m.DEEP:
                _, delta = msg
                self._lend(ex, kind, delta)
            elif kind == m.UNBLOCK:
                # That level's wait is over: no nested task goes to it after
                # this; those sent before reach it ahead of the reply. Its CPU
                # stays lent until it has run them (BLOCKED -1): it cannot go on
                # before they end, and a task nested in it that waits too needs
                # the head to count a CPU lent for each (room for its subtasks).
                ex.closing += 1
                self.send(ex, [(m.REPLY, msg[1], None)])
            elif kind == m.EXEC_READY:
                ex.ready = True
                if ex.actor_id is not None:
                    self._refill_standby()
            elif kind == m.ACTOR_DIED:
                _, actor_id, _, _ = msg
                out.append(msg)
                if self.actors.get(actor_id) is ex:
                    self.forget_actor(actor_id)
                    ex.actor_id = None  # a clean exit: do not report a crash
                    self.leaving[ex] = self.clock()
            elif kind == m.COLLECTIVE_OP:
                left = (left or []) + [msg]
            else:
                out.append(msg)
        return left

    def _lend(self, ex: Executor, kind: int, n: int) -> None:
        """The head counts the CPUs lent (``cpus_lent``)."""
        was = cpus_lent(ex)
        if kind == m.LEND:
            ex.lending += n
        elif kind == m.DEEP:
            ex.deep += n
        else:
            ex.blocked += n
            if n < 0 and ex.closing:
                ex.closing -= 1   # a task's level ends closing (an actor's never closes)
        delta = cpus_lent(ex) - was
        if delta:
            self.out.append((m.BLOCKED, delta))

    def _given_back(self, ex: Executor, task_ids: list) -> None:
        """Tasks sent to ``ex`` nested that it will not run (its main thread waits
        at the nesting limit): first in the queue again, for another executor.
        A function blob that came with one was never read there."""
        for tid in reversed(task_ids):
            entry = ex.assigned.pop(tid, None)
            if entry is None:
                continue
            spec = entry[1]
            if spec[m.T_BLOB] is not None:
                ex.known_fns.discard(spec[m.T_FN])
            if spec[m.T_MAX_CALLS]:
                ex.calls[spec[m.T_FN]] -= 1
            (self.zero_cpu_queue if no_cpu(spec) else self.queue).appendleft(spec)

    def _sealed(self, ex: Executor, records) -> None:
        for rec in records:
            if rec[0] == SHM and rec[1] == self.node:
                ex.unsealed.pop(rec[2], None)

    # --- standby ---------------------------------------------------------------

    def _refill_standby(self) -> None:
        """The next actor's executor is due, once the last one is up: started
        beside it, the two interpreters' start-ups would share the cores."""
        if self.actor_standby and not self.standby and not self.stopping:
            self.standby_due = True

    def standby_started(self) -> None:
        """The loop found the cores have time to spare: the due standby starts."""
        self.standby_due = False
        if not self.stopping and not self.standby:
            self.standby.append(self._new())

    # --- dispatch --------------------------------------------------------------

    def dispatch(self) -> None:
        if self.zero_cpu_queue:
            self._dispatch_zero_cpu()
        if self.queue:
            self._dispatch(self.queue, self._cpu_executors_to_use())

    def _cpu_executors_to_use(self) -> list:
        """CPU executors that may take a task now: idle ones, as many as the CPUs
        that neither running tasks nor actors hold, and nested in those whose
        task waits in ``get`` (its CPU is lent meanwhile)."""
        ready = [ex for ex in self.executors if ex.ready and not ex.retiring]
        running = [ex for ex in self.executors if ex.assigned]
        lent = sum(ex.deep + thread_lent(ex) for ex in running)
        room = max(0, math.ceil(self.cpus - self.actor_cpus - 1e-9) - len(running) + lent)
        idle = [ex for ex in ready if not ex.assigned][:room]
        if lent and len(idle) < room:
            # A CPU lent by a thread, or by a deep wait, runs its task in another
            # process: start spares for the lent CPUs that no idle executor can take.
            starting = sum(1 for ex in self.executors if not ex.ready)
            for _ in range(min(room - len(idle), lent) - starting):
                spare = self._new()
                spare.spare = True
                self.executors.append(spare)
        return idle + [ex for ex in ready if takes_nested(ex)]

    def _dispatch_zero_cpu(self) -> None:
        """num_cpus=0 tasks: to idle extra executors, to new ones while fewer than
        ``MAX_EXTRA_EXECUTORS`` run, then nested in extras that wait in ``get``.

        As many extras start at once as the rank has CPUs (Ray's
        ``maximum_startup_concurrency``), so a burst does not start dozens of
        interpreters together; each takes its task with it."""
        queue = self.zero_cpu_queue
        idle = [ex for ex in self.extras if ex.ready and not ex.retiring and not ex.assigned]
        self._dispatch(queue, idle, per_executor=1)
        starting = sum(1 for ex in self.extras if not ex.ready)
        while queue and len(self.extras) < MAX_EXTRA_EXECUTORS and \
                starting < max(1, self.cpus):
            starting += 1
            ex = self._new()
            ex.extra = True
            self.extras.append(ex)
            self._dispatch(queue, [ex], per_executor=1)  # read once it has started
        if queue and len(self.extras) >= MAX_EXTRA_EXECUTORS:
            self._dispatch(queue, [ex for ex in self.extras if ex.ready and takes_nested(ex)
                                   and not ex.retiring])

    def _dispatch(self, queue: collections.deque, idle: list, per_executor: int = 0) -> None:
        """Hand tasks from ``queue`` to the ``idle`` executors (``per_executor``: at
        most that many each; 0: sized to the backlog, see ``batch_length``)."""
        if not idle:
            return
        share = max(1, min(EXECUTOR_BATCH, len(queue) // len(idle)))
        for ex in idle:
            if not queue:
                break
            if ex.assigned:
                n = 1
            elif per_executor:
                n = per_executor
            else:
                n = batch_length((spec[m.T_FN] for spec in queue), share,
                                 self.fn_times.seconds)
            batch = []
            nested = bool(ex.assigned)
            while queue and len(batch) < n:
                spec = queue.popleft()
                spec = self.ship_fn(ex, spec)
                ex.assigned[spec[m.T_ID]] = (nested, spec)
                batch.append((m.EXECUTE, spec))
                max_calls = spec[m.T_MAX_CALLS]
                if max_calls:
                    ex.calls[spec[m.T_FN]] += 1
                    if ex.calls[spec[m.T_FN]] >= max_calls:
                        ex.retiring = True
                        break
            self.send(ex, batch)

    # --- executors ending --------------------------------------------------------

    def idle_executors(self) -> list[Executor]:
        """Extra and spare executors idle for ``extra_idle`` seconds: to stop."""
        now = self.clock()
        return [ex for ex in [*self.extras, *(ex for ex in self.executors if ex.spare)]
                if ex.ready and not ex.assigned and now - ex.idle_since > self.extra_idle]

    def retire_begin(self, ex: Executor) -> None:
        """The loop stops ``ex`` (max_calls reached, or idle too long): nothing more
        goes to it; ``executor_ended`` follows once its last messages are read."""
        ex.retiring = False  # its last messages must not retire it again
        if ex in self.retire:
            self.retire.remove(ex)
        (self.extras if ex.extra else self.executors).remove(ex)
        if not ex.extra and not ex.spare:
            self.executors.append(self._new())

    def executor_ended(self, ex: Executor, exitcode: int | None = None, lost=(),
                       actor_id: int | None = None) -> None:
        """``ex`` is gone: tell the head in one PROCESS_ENDED everything it had started
        there, so that the head ends it all in one transition (``Head.process_ended``):
        its holds, the store blocks it never sealed, its pending gets, waits and
        calls, the CPUs it lent, and, when it crashed (``exitcode`` not None), the
        tasks ``lost`` with it and its actor.

        Called once every message it sent has been read (EOF on its socket, or
        what was left read after it exited), so the counts are exact. Answers
        still on their way to it give back what they reserved
        (``RankRequests.answered``).
        """
        ex.gone = True
        ex.outbox = []
        if ex in self.to_write:
            self.to_write.remove(ex)
        self.leaving.pop(ex, None)
        holds = [oid for oid, n in ex.holds.items() for _ in range(n)]
        ex.holds = {}
        blocks = list(ex.unsealed.items())
        ex.unsealed = {}
        reqs = self.requests.process_gone(ex)
        lent = cpus_lent(ex)
        ex.blocked = ex.lending = ex.deep = ex.closing = 0
        self.out.append((m.PROCESS_ENDED, ex.pid, holds, blocks, reqs, lent, list(lost),
                         exitcode, actor_id))

    def executor_died(self, ex: Executor, exitcode: int) -> None:
        """``ex`` exited on its own (EOF on its socket, every message read)."""
        if ex in self.retire:
            self.retire.remove(ex)
        if ex in self.standby:      # it never ran anything: nothing to report
            self.standby.remove(ex)
            self.executor_ended(ex)
            return
        actor = ex.actor_id is not None and self.actors.get(ex.actor_id) is ex
        if not actor and ex not in self.executors and ex not in self.extras:
            # Its actor was killed or ended (ACTOR_DIED): no crash, and the head
            # failed the calls it still held; none of them runs as a task.
            ex.assigned.clear()
            self.executor_ended(ex)
            return
        # The first task it held was running; tasks sent while it was blocked in
        # get() may have been running nested. The rest never started: run them again.
        lost, requeue = [], []
        for i, (tid, (nested, spec)) in enumerate(ex.assigned.items()):
            if i == 0 or nested:
                lost.append(tid)
            else:
                requeue.append(spec)
        ex.assigned.clear()
        if actor:
            self.forget_actor(ex.actor_id)
            self.executor_ended(ex, exitcode, lost + [spec[m.T_ID] for spec in requeue],
                                ex.actor_id)
            return
        self.executor_ended(ex, exitcode, lost)
        (self.zero_cpu_queue if ex.extra else self.queue).extendleft(reversed(requeue))
        if ex in self.executors:
            self.executors.remove(ex)
            if not ex.spare:
                self.executors.append(self._new())
        elif ex in self.extras:
            self.extras.remove(ex)
