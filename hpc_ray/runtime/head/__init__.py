"""The head: control state and scheduling on rank 0. No MPI and no threads in here.

    driver thread ──submit/put/get──▶ Head (under Head.lock) ◀──handle(src, msgs)── comm thread
                                        │ outbox[rank] = [msg, ...] ─────────────▶ comm thread ─▶ MPI

Everything that happens is a call into this object under one lock, either from
the driver thread (the user's API calls) or from the comm thread (batches of
messages from worker ranks). Outgoing messages collect in ``outbox``.

The state lives in tables, each with the events that change it in its own module:

- ``objects.ObjectTable``: holders, contained refs, locations; frees what no one holds.
- ``tasks``: ``TaskState``, its allowed transitions, and ``TaskLifecycle`` (submit,
  results, failures, crashes, retries). ``set_task_state`` is the only code that
  changes a task's state, and the only code that gives back the references a
  task took when it was submitted.
- ``actors``: ``ActorState`` and ``ActorLifecycle``; ``_set_actor_state`` is the only
  code that changes an actor's state, and gives back the actor's resources when
  it stops holding them.
- ``resources``: worker ranks' resources, the ready queue and ``Placement``.
- ``history``: finished tasks, timeline events, signals, dead actors and the
  newest failures' error texts, within a memory budget.

This module's ``Head`` puts them together and handles objects' events and the
requests of executors (remote get/wait, collective joins, signals).
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from ... import _config
from ...transport import messages as m
from ...transport.messages import FETCH_PLAN  # noqa: F401  (re-exported)
from ...exceptions import HeadError, UnreconstructableError
from ...transport.serialization import ERROR, dumps, loads
from .actors import A_ALIVE, A_PENDING, A_RESTARTING, ActorEntry, ActorLifecycle, ActorState
from .history import DEFAULT_BUDGET, History
from .objects import ObjectEntry, ObjectTable
from .. import scheduler
from ..scheduler import RANK_KEYS
from .resources import NodePool, Placement, ReadyQueue, WorkerInfo
from .tasks import (PENDING, READY, IllegalTransition, TaskEntry, TaskLifecycle, TaskState,
                    describe_exit)

logger = logging.getLogger(__name__)

#: Unread DIRECT_DONE reports the head keeps before it reads them at once (each
#: holds up to ``peer_calls.REPORT_EVERY`` summaries): a head that is never
#: quiet reads them this many at a time.
DIRECT_REPORTS_HELD = 16

__all__ = ["Head", "FETCH_PLAN", "TaskState", "ActorState", "ObjectEntry", "TaskEntry",
           "ActorEntry", "WorkerInfo", "IllegalTransition"]


class Head:
    """Control state and scheduler. Every method is called with ``self.lock`` held.

    The task, actor and placement events live with their tables, in three parts
    of the head: ``task_events`` (``tasks.TaskLifecycle``), ``actor_events``
    (``actors.ActorLifecycle``) and ``placement`` (``resources.Placement``). This
    class owns the tables, the objects' events and the requests of executors, and
    passes the events of the rest of the runtime to the part they belong to.
    """

    def __init__(self, world_size: int, node_of: list[int], store_size: int,
                 host_of: list[str], history_bytes: int | None = None) -> None:
        self.task_events = TaskLifecycle(self)
        self.actor_events = ActorLifecycle(self)
        self.placement = Placement(self)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)   # driver waits here for objects
        self.world_size = world_size
        self.node_of = node_of
        self.host_of = host_of
        self.node_leader: dict[int, int] = {}
        for r, n in enumerate(node_of):
            self.node_leader.setdefault(n, r)
        self.objects = ObjectTable(set(node_of), store_size, self.node_leader)
        self.objects.on_free = self.actor_events.handles_gone
        self.store_size = store_size
        self.tasks: dict[int, TaskEntry] = {}         # live tasks only
        self.fn_blobs: dict[Any, bytes] = {}
        self.fn_names: dict[Any, str] = {}
        self.workers: dict[int, WorkerInfo] = {}
        self.feasible_shapes: dict = {}               # resource shape -> fits some rank
        self.pools: dict[int, NodePool] = {}          # node -> its custom resources
        self.custom_node: int | None = None           # the node init()'s custom ones went to
        self._alive: list[WorkerInfo] = []
        self._most_rank_cpus = 0          # CPUs of the largest live rank
        self.actors: dict[int, ActorEntry] = {}       # live actors only
        self.named_actors: dict[str, int] = {}
        self.lifetimes: dict[int, int] = {}           # lifetime token id -> actor id
        self.pending_actors: dict[int, None] = {}     # ordered set: actors waiting for room
        self.throttled: dict[int, int] = {}           # caller -> actors it has too many calls at
        self.joins: dict[str, dict] = {}              # group name -> rank -> member
        self.ready = ReadyQueue()
        self.outbox: dict[int, list] = {}
        #: Set once SHUTDOWN is queued: from then on nothing more is sent (a message
        #: no rank receives before MPI_Finalize can hang the job; see HeadLoop).
        self.closing = False
        if history_bytes is None:
            history_bytes = _config.os_environ_get("HEAD_HISTORY_BYTES", DEFAULT_BUDGET,
                                                   _config.parse_bytes)
        self.history = History(history_bytes)
        #: Callers' DIRECT_DONE reports not read yet (``direct_report``).
        self.direct_reports: list[bytes] = []
        self.run_functions: list[bytes] = []
        self.broken: str | None = None
        self.remote_waits: dict[tuple, tuple] = {}    # (rank, req) -> (rank, req, ids, n)
        #: Gets waiting for values: (rank, req) -> [rank, req, missing, ids].
        self.remote_gets: dict[tuple, list] = {}
        self._warned: set = set()
        self.avg_task_seconds = 0.001

    # --- the events of the rest of the runtime, each to its part ---------------------

    def submit(self, spec: list) -> None:
        self.task_events.submit(spec)

    def task_done(self, rank: int, task_id: int, results: list, contained: list,
                  t_start: float, t_end: float, pid: int) -> None:
        self.task_events.task_done(rank, task_id, results, contained, t_start, t_end, pid)

    def task_failed(self, rank: int, task_id: int, error: tuple, t_start: float,
                    t_end: float, pid: int) -> None:
        self.task_events.task_failed(rank, task_id, error, t_start, t_end, pid)

    def tasks_returned(self, rank: int, task_ids: list[int]) -> None:
        self.task_events.tasks_returned(rank, task_ids)

    def worker_crashed(self, rank: int, tids: list[int], exitcode: int, pid: int,
                       actor_id: int | None) -> None:
        self.task_events.worker_crashed(rank, tids, exitcode, pid, actor_id)

    def mark_broken(self, why: str) -> None:
        self.task_events.mark_broken(why)

    def create_actor(self, spec: list, resources: dict, max_restarts: int,
                     name: str | None, class_name: str, max_task_retries: int = 0,
                     meta=None, lifetime_oid: int | None = None) -> None:
        self.actor_events.create_actor(spec, resources, max_restarts, name, class_name,
                                       max_task_retries, meta, lifetime_oid)

    def actor_ready(self, actor_id: int, pid: int) -> None:
        self.actor_events.actor_ready(actor_id, pid)

    def actor_died(self, actor_id: int, reason: str, allow_restart: bool) -> None:
        self.actor_events.actor_died(actor_id, reason, allow_restart)

    def kill_actor(self, actor_id: int, no_restart: bool = True,
                   reason: str = "killed by kill()") -> None:
        self.actor_events.kill_actor(actor_id, no_restart, reason)

    def in_rank_busy(self) -> set[int]:
        return self.actor_events.in_rank_busy()

    def retry_pending_actors(self) -> None:
        self.actor_events.retry_pending_actors()

    def schedule(self) -> None:
        self.placement.schedule()

    # --- compatibility views ------------------------------------------------------

    @property
    def allocators(self):
        return self.objects.allocators

    def add_events(self, events) -> None:
        for ev in events:
            self.history.event(ev)

    def direct_report(self, summaries: bytes) -> None:
        """A caller's summaries of its direct calls (DIRECT_DONE), pickled once by
        the caller and passed on unread by its rank. They usually come in the
        same batch as the caller task's result: the head reads them once it has
        nothing more urgent to do (``settle_direct_reports``, from the comm
        loop's idle rounds and before ``tasks()`` and ``timeline()`` read the
        history), not while the driver waits for that result."""
        reports = self.direct_reports
        reports.append(summaries)
        if len(reports) >= DIRECT_REPORTS_HELD:
            self.settle_direct_reports()

    def settle_direct_reports(self) -> None:
        """Add the direct calls of every report not read yet to the history."""
        reports, self.direct_reports = self.direct_reports, []
        for blob in reports:
            self.direct_calls_done(loads(blob))

    def direct_calls_done(self, summaries) -> None:
        """Calls that went straight from their caller to an actor (``peer_calls``):
        the head saw nothing else of them; ``tasks()`` and the timeline show them."""
        history = self.history
        if any(len(s) > 10 for s in summaries):
            summaries = [self._direct_failure(s) if len(s) > 10 else s for s in summaries]
        history.tasks_finished(summaries)
        # (A call lost with its actor's process has no end time: no event.)
        events = [(s[1], s[3], s[7], s[8], s[9], s[0]) for s in summaries if s[8]]
        if events:
            history.events_added(events)

    def _direct_failure(self, summary: tuple) -> tuple:
        """A direct call that failed: its error as ``task_failed`` notes one, or
        the signal of a call lost with its actor's process."""
        actor_id, error = summary[10]
        if error is None:
            self.task_events.direct_call_lost(actor_id, summary[0], summary[1])
        else:
            self.task_events.error_noted(summary[0], actor_id, error)
        return summary[:10]

    # --- workers ------------------------------------------------------------------

    def add_worker(self, rank: int, resources: dict, gpu_ids: list[int], pid: int) -> None:
        """A worker rank joined. Custom resources (anything but CPU and GPU) are what
        ``init(resources=...)`` gave the whole job, as in Ray: they go once to the
        node of the first worker rank that reports them, shared by its ranks. The
        rank's ``gpu_ids`` join its node's pool of GPU ids (``NodePool.add_gpus``)."""
        node = self.node_of[rank]
        pool = self.pools.get(node)
        if pool is None:
            pool = self.pools[node] = NodePool()
        custom = {k: v for k, v in resources.items()
                  if k not in RANK_KEYS and k != "GPU" and v}
        if custom and self.custom_node in (None, node):
            self.custom_node = node
            pool.add(custom)
        self.workers[rank] = WorkerInfo(rank, node, self.host_of[rank], resources, gpu_ids,
                                        pid, pool)
        self._workers_changed()

    def set_resource(self, node: int, name: str, capacity: float) -> None:
        """``experimental.set_resource``: ``node``'s custom resource ``name`` becomes
        ``capacity``; 0 deletes it (``NodePool.set``: what tasks and actors hold
        stays theirs until they end). Actors waiting for room are tried again;
        ready tasks are placed by the scheduling pass that follows every event."""
        pool = self.pools.get(node)
        if pool is None:
            pool = self.pools[node] = NodePool()
        pool.set(name, capacity)
        self.actor_events.retry_pending_actors()

    def worker_stopped(self, rank: int) -> None:
        """The rank sent its last message (STOPPED): it takes no more work."""
        w = self.workers.get(rank)
        if w is not None:
            w.alive = False
            self._workers_changed()

    def _workers_changed(self) -> None:
        self._alive = [w for w in self.workers.values() if w.alive]
        self._most_rank_cpus = scheduler.most_rank_cpus(self._alive)
        self.feasible_shapes.clear()      # which shapes fit depends on the ranks

    def send(self, rank: int, msg: tuple) -> None:
        if not self.closing:
            box = self.outbox.get(rank)
            if box is None:
                self.outbox[rank] = [msg]
            else:
                box.append(msg)

    def take_outbox(self) -> dict[int, list]:
        out, self.outbox = self.outbox, {}
        return out

    # --- objects --------------------------------------------------------------------

    def hold(self, object_ids) -> None:
        self.objects.hold(object_ids)

    def release(self, object_ids) -> None:
        self.objects.release(object_ids)

    def alloc(self, node: int, size: int) -> int | None:
        return self.objects.alloc(node, size)

    def free_blocks(self, rank: int, blocks) -> None:
        """A process on ``rank``'s node died holding store blocks it never sealed."""
        node = self.node_of[rank]
        for off, size in blocks:
            self.objects.free_block(node, off, size)

    def add_location(self, object_id: int, record: tuple) -> None:
        self.objects.add_location(object_id, record)

    def record_for(self, oid: int, node: int) -> tuple:
        return self.objects.record_for(oid, node)

    def put_object(self, oid: int, rec: tuple, contained) -> None:
        """A value became known (put, or a task's return)."""
        for waiter in self.objects.seal(oid, rec, contained):
            self._object_ready(waiter, oid, rec)
        self.objects.free_if_unheld(oid)

    def _object_ready(self, waiter, oid: int, rec: tuple) -> None:
        kind = waiter[0]
        if kind == "task":
            task = waiter[1]
            if task.state is not PENDING:
                return
            if rec[0] == ERROR:
                self.task_events.fail_task(task, rec)
                return
            task.missing -= 1
            if task.missing == 0:
                actor_id = task.spec[m.T_ACTOR]
                if actor_id is None:
                    self.task_events.set_task_state(task, READY)
                else:
                    actor = self.actors.get(actor_id)
                    if actor is not None:
                        self.actor_events.dispatch_actor(actor)
        elif kind == "get":
            state = waiter[1]
            if state[2] <= 0:
                return                  # cancelled: its process is gone
            state[2] -= 1
            if state[2] == 0:
                self._reply_get(state)
        elif kind == "wait":
            if waiter[1] in self.remote_waits:
                self._check_remote_wait(waiter[1])
        elif kind == "actor":
            if waiter[1].state is A_ALIVE:
                self.actor_events.dispatch_actor(waiter[1])
        elif kind == "actor_place":
            if waiter[1].state in (A_PENDING, A_RESTARTING):
                self.actor_events.place_actor(waiter[1])

    # --- requests from executors ----------------------------------------------------

    def remote_get(self, rank: int, req_id: int, object_ids: list[int]) -> None:
        state = [rank, req_id, 0, object_ids]
        for oid in object_ids:
            e = self.objects.entry(oid)
            if e.record is None:
                state[2] += 1
                e.waiters.append(("get", state))
        if state[2] == 0:
            self._reply_get(state)
        else:
            self.remote_gets[(rank, req_id)] = state

    def _reply_get(self, state: list) -> None:
        rank, req, _, oids = state
        self.remote_gets.pop((rank, req), None)
        node = self.node_of[rank]
        entries = self.objects.entries
        self.send(rank, (m.REPLY, req, [self.objects.record_for(o, node) if o in entries
                                        else _lost_record(o) for o in oids]))

    def remote_wait(self, rank: int, req_id: int, object_ids: list[int],
                    num_returns: int) -> None:
        key = (rank, req_id)
        self.remote_waits[key] = (rank, req_id, object_ids, num_returns)
        if not self._check_remote_wait(key):
            for oid in object_ids:
                e = self.objects.entry(oid)
                if e.record is None:
                    e.waiters.append(("wait", key))

    def _check_remote_wait(self, key, force: bool = False) -> bool:
        rank, req, oids, n = self.remote_waits[key]
        ready = [o for o in oids if self.objects.ready(o)]
        if len(ready) >= n or force:
            self._end_remote_wait(key)
            self.send(rank, (m.REPLY, req, ready[:max(n, 0)]))
            return True
        return False

    def _end_remote_wait(self, key) -> None:
        """Forget a wait, answered or cancelled, and its place among the waiters
        of the objects still pending (a loop of ``wait(timeout=0)`` on a long
        task would otherwise grow that list by one a call)."""
        wait = self.remote_waits.pop(key)
        entries = self.objects.entries
        for oid in wait[2]:
            e = entries.get(oid)
            if e is not None and e.waiters:
                e.waiters = [w for w in e.waiters if w[1] != key]

    def remote_wait_now(self, rank: int, req_id: int) -> None:
        if (rank, req_id) in self.remote_waits:
            self._check_remote_wait((rank, req_id), force=True)

    def _cancel_requests(self, rank: int, reqs) -> None:
        """Forget the gets, waits and group joins a gone process of ``rank`` had
        pending: nothing answers them, and nothing they name is read again."""
        entries = self.objects.entries
        for req in reqs:
            key = (rank, req)
            state = self.remote_gets.pop(key, None)
            if state is not None:
                state[2] = -1                     # (``_object_ready`` skips it)
                for oid in state[3]:
                    e = entries.get(oid)
                    if e is not None and e.waiters:
                        e.waiters = [w for w in e.waiters if w[1] is not state]
            if key in self.remote_waits:
                self._end_remote_wait(key)
            for name, joined in list(self.joins.items()):
                for member, (_, src, r) in list(joined.items()):
                    if src == rank and r == req:
                        del joined[member]
                if not joined:
                    del self.joins[name]

    # --- processes ------------------------------------------------------------------

    def blocked(self, rank: int, delta: int) -> None:
        """``delta`` more (or fewer) CPUs of ``rank`` are lent by tasks waiting in get()."""
        w = self.workers.get(rank)
        if w is not None:
            w.blocked += delta

    def process_ended(self, rank: int, pid: int, holds, blocks, requests, lent: int,
                      task_ids, exitcode: int | None, actor_id: int | None) -> None:
        """A process of ``rank`` (an executor) is gone: end, in this one transition,
        everything it had started here. Its pending gets and waits are forgotten
        (before its holds go: they may name objects only it held), the CPUs it
        lent come back, its tasks are retried or fail, its holds are released and
        the store blocks it never sealed are freed; then its actor dies.
        ``exitcode`` None: it ended cleanly (retired, or its actor was killed),
        and nothing it ran is lost."""
        if requests:
            self._cancel_requests(rank, requests)
        if lent:
            self.blocked(rank, -lent)
        if exitcode is not None:
            self.task_events.worker_crashed(rank, task_ids, exitcode, pid, None)
        if holds:
            self.objects.release(holds)
        if blocks:
            self.free_blocks(rank, blocks)
        if exitcode is not None and actor_id is not None:
            self.actor_events.actor_died(
                actor_id, f"its process (pid {pid}) died with {describe_exit(exitcode)}",
                allow_restart=True)

    def handler_failed(self, src: int, msg: tuple, tb: str) -> None:
        """A handler raised on ``msg`` from ``src``: a bug here, not the job's end.
        Fail what the message concerns (its task, or the request it asked),
        so that no one waits for an answer that will not come."""
        kind = msg[0] if isinstance(msg, tuple) and msg else None
        err = HeadError(f"the head could not handle a {_kind_name(kind)} message from "
                        f"rank {src} and carried on without it; the head's traceback:\n{tb}")
        try:
            if kind in (m.TASK_DONE, m.TASK_FAILED):
                _, task_id = msg[:2]
                task = self.tasks.get(task_id)
                if task is not None:
                    self.task_events.fail_task(task, (ERROR, dumps(err)))
            elif kind == m.SUBMIT:
                _, spec = msg
                task = self.tasks.get(spec[m.T_ID])
                if task is not None:
                    self.task_events.fail_task(task, (ERROR, dumps(err)))
                else:
                    self.task_events.fail_task_now(spec, err)
            elif kind in (m.GET, m.WAIT, m.ALLOC, m.CONTROL_CALL):
                _, req_id = msg[:2]
                self._cancel_requests(src, (req_id,))
                self.send(src, (m.REPLY, req_id, _failed_reply(kind, msg, err,
                                                               self.node_of[src],
                                                               self.store_size)))
        except Exception:
            logger.exception("the head could not fail what a bad %s message concerns",
                             _kind_name(kind))

    # --- collective groups declared from inside actors --------------------------------

    def collective_join(self, src: int, req: int, name: str, world_size: int,
                        rank: int, mpi_rank: int) -> None:
        """Reply to every member at once, when all ``world_size`` have joined."""
        joined = self.joins.setdefault(name, {})
        joined[rank] = (mpi_rank, src, req)
        if len(joined) < world_size:
            return
        del self.joins[name]
        mpi_ranks = [joined[r][0] for r in sorted(joined)]
        if len(set(mpi_ranks)) != len(mpi_ranks) or sorted(joined) != list(range(world_size)):
            err = ValueError(f"group {name!r}: members must be ranks 0..{world_size - 1} on "
                             f"distinct MPI ranks, got {sorted(joined.items())}")
            for _, s, r in joined.values():
                self.send(s, (m.REPLY, r, (False, err)))
            return
        for _, s, r in joined.values():
            self.send(s, (m.REPLY, r, (True, mpi_ranks)))

    # --- signals (experimental API) ------------------------------------------------------

    def add_signal(self, actor_id: int | None, task_id: int | None, blob: bytes) -> None:
        signals = self.history.signals
        if actor_id is not None:
            signals.add(("actor", actor_id), blob)
            return
        task = self.tasks.get(task_id)
        if task is not None:
            signals.add(("task", task_id), blob, task.spec[m.T_RETURNS])

    # --- misc -----------------------------------------------------------------------------

    def run_function_on_all_workers(self, blob: bytes) -> None:
        self.run_functions.append(blob)
        for w in self._alive:
            self.send(w.rank, (m.RUN_FUNCTION, blob))


def _kind_name(kind) -> str:
    try:
        return m.Msg(kind).name
    except ValueError:
        return repr(kind)


def _lost_record(oid: int) -> tuple:
    """What a get of an object the head no longer knows returns (it raises there)."""
    return (ERROR, dumps(UnreconstructableError(
        f"object {oid:040x} was freed before this get was answered: nothing held it")))


def _failed_reply(kind: int, msg: tuple, err: Exception, node: int, store_size: int):
    """A reply that makes the asking process raise ``err`` (or go on, for a wait)."""
    rec = (ERROR, dumps(err))
    if kind == m.GET:
        _, req_id, object_ids = msg
        return [rec for _ in object_ids]
    if kind == m.WAIT:
        return []
    if kind == m.ALLOC:
        return (node, None, store_size)     # (the process raises ObjectStoreFullError)
    return (False, err)
