"""The head: control state and scheduling on rank 0. No MPI and no threads in here.

    driver thread ──submit/put/get──▶ Head (under Head.lock) ◀──handle(src, msgs)── comm thread
                                        │ outbox[rank] = [msg, ...] ─────────────▶ comm thread ─▶ MPI

Everything that happens is a call into this object under one lock, either from
the driver thread (the user's API calls) or from the comm thread (batches of
messages from worker ranks). Outgoing messages collect in ``outbox``.

The state lives in four tables, each in its own module:

- ``objects.ObjectTable``: holders, contained refs, locations; frees what no one holds.
- ``tasks``: ``TaskState`` and its allowed transitions. ``_set_task_state`` is the
  only code that changes a task's state, and the only code that gives back the
  references a task took when it was submitted.
- ``actors``: ``ActorState``; ``_set_actor_state`` is the only code that changes an
  actor's state, and gives back the actor's resources when it stops holding them.
- ``resources``: worker ranks' resources and the ready queue.

``history`` keeps finished tasks, timeline events, signals and dead actors
within a memory budget.
"""
from __future__ import annotations

import logging
import threading
import time
import warnings
from typing import Any

from ... import _config
from ...exceptions import ActorDiedError, WorkerCrashedError
from ...transport import messages as m
from ...transport.messages import FETCH_PLAN  # noqa: F401  (re-exported)
from ...transport.serialization import ERROR, SHM, dumps
from .. import scheduler
from .actors import A_ALIVE, A_DEAD, A_PENDING, A_RESTARTING, A_STARTING, HOLDING
from .actors import ActorEntry, ActorState
from .actors import check_transition as check_actor_transition
from .history import DEFAULT_BUDGET, History
from .objects import ObjectEntry, ObjectTable
from .resources import ReadyQueue, WorkerInfo, give_back, hold, shape_of
from .tasks import (FAILED, FINISHED, PENDING, READY, RUNNING, TERMINAL, IllegalTransition,
                    TaskEntry, TaskState, check_transition, summary)

logger = logging.getLogger(__name__)

__all__ = ["Head", "FETCH_PLAN", "TaskState", "ActorState", "ObjectEntry", "TaskEntry",
           "ActorEntry", "WorkerInfo", "IllegalTransition"]

#: Upper bound on tasks queued at one worker beyond its CPUs. Short tasks need a
#: deep queue so that no worker idles between batches; long tasks need a shallow
#: one so that a slow task does not hold others back while another rank idles.
MAX_PREFETCH = 256
#: Queue depth is chosen so a worker holds about this many seconds of work.
PREFETCH_SECONDS = 0.002


class Head:
    """Control state and scheduler. Every method is called with ``self.lock`` held."""

    def __init__(self, world_size: int, node_of: list[int], store_size: int,
                 host_of: list[str], history_bytes: int | None = None) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)   # driver waits here for objects
        self.world_size = world_size
        self.node_of = node_of
        self.host_of = host_of
        self.node_leader: dict[int, int] = {}
        for r, n in enumerate(node_of):
            self.node_leader.setdefault(n, r)
        self.objects = ObjectTable(set(node_of), store_size, self.node_leader)
        self.store_size = store_size
        self.tasks: dict[int, TaskEntry] = {}         # live tasks only
        self.fn_blobs: dict[Any, bytes] = {}
        self.fn_names: dict[Any, str] = {}
        self.workers: dict[int, WorkerInfo] = {}
        self._alive: list[WorkerInfo] = []
        self.actors: dict[int, ActorEntry] = {}       # live actors only
        self.named_actors: dict[str, int] = {}
        self.pending_actors: dict[int, float] = {}    # actors waiting for room on a rank
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
        self.run_functions: list[bytes] = []
        self.broken: str | None = None
        self.remote_waits: dict[tuple, tuple] = {}    # (rank, req) -> (rank, req, ids, n)
        self._warned: set = set()
        self.avg_task_seconds = 0.001

    # --- compatibility views ------------------------------------------------------

    @property
    def allocators(self):
        return self.objects.allocators

    @property
    def timeline_events(self):
        return self.history.events

    def add_events(self, events) -> None:
        for ev in events:
            self.history.event(ev)

    # --- workers ------------------------------------------------------------------

    def add_worker(self, rank: int, resources: dict, gpu_ids: list[int], pid: int) -> None:
        self.workers[rank] = WorkerInfo(rank, self.node_of[rank], self.host_of[rank],
                                        resources, gpu_ids, pid)
        self._alive = [w for w in self.workers.values() if w.alive]

    def worker_stopped(self, rank: int) -> None:
        """The rank sent its last message (STOPPED): it takes no more work."""
        w = self.workers.get(rank)
        if w is not None:
            w.alive = False
            self._alive = [w for w in self.workers.values() if w.alive]

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

    def entry(self, oid: int) -> ObjectEntry:
        return self.objects.entry(oid)

    def hold(self, oids) -> None:
        self.objects.hold(oids)

    def release(self, oids) -> None:
        self.objects.release(oids)

    def alloc(self, node: int, size: int) -> int | None:
        return self.objects.alloc(node, size)

    def free_blocks(self, rank: int, blocks) -> None:
        """A process on ``rank``'s node died holding store blocks it never sealed."""
        node = self.node_of[rank]
        for off, size in blocks:
            self.objects.free_block(node, off, size)

    def add_location(self, oid: int, rec: tuple) -> None:
        self.objects.add_location(oid, rec)

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
                self._fail_task(task, rec)
                return
            task.missing -= 1
            if task.missing == 0:
                actor_id = task.spec[m.T_ACTOR]
                if actor_id is None:
                    self._set_task_state(task, READY)
                else:
                    actor = self.actors.get(actor_id)
                    if actor is not None:
                        self._dispatch_actor(actor)
        elif kind == "get":
            state = waiter[1]
            state[2] -= 1
            if state[2] == 0:
                self._reply_get(state)
        elif kind == "wait":
            if waiter[1] in self.remote_waits:
                self._check_remote_wait(waiter[1])
        elif kind == "actor":
            if waiter[1].state is A_ALIVE:
                self._dispatch_actor(waiter[1])
        elif kind == "actor_place":
            if waiter[1].state in (A_PENDING, A_RESTARTING):
                self._place_actor(waiter[1])

    # --- requests from executors ----------------------------------------------------

    def remote_get(self, rank: int, req: int, oids: list[int]) -> None:
        state = [rank, req, 0, oids]
        for oid in oids:
            e = self.objects.entry(oid)
            if e.record is None:
                state[2] += 1
                e.waiters.append(("get", state))
        if state[2] == 0:
            self._reply_get(state)

    def _reply_get(self, state: list) -> None:
        rank, req, _, oids = state
        node = self.node_of[rank]
        self.send(rank, (m.REPLY, req, [self.objects.record_for(o, node) for o in oids]))

    def remote_wait(self, rank: int, req: int, oids: list[int], n: int) -> None:
        key = (rank, req)
        self.remote_waits[key] = (rank, req, oids, n)
        if not self._check_remote_wait(key):
            for oid in oids:
                e = self.objects.entry(oid)
                if e.record is None:
                    e.waiters.append(("wait", key))

    def _check_remote_wait(self, key, force: bool = False) -> bool:
        rank, req, oids, n = self.remote_waits[key]
        ready = [o for o in oids if self.objects.ready(o)]
        if len(ready) >= n or force:
            del self.remote_waits[key]
            self.send(rank, (m.REPLY, req, ready[:max(n, 0)]))
            return True
        return False

    def remote_wait_now(self, rank: int, req: int) -> None:
        if (rank, req) in self.remote_waits:
            self._check_remote_wait((rank, req), force=True)

    # --- task transitions -------------------------------------------------------------

    def _set_task_state(self, task: TaskEntry, new: TaskState) -> None:
        """The only place a task's state changes; see ``tasks.py`` for the edges."""
        check_transition(task, new)
        task.state = new
        if new is READY:
            self.ready.push(task)
        elif new in TERMINAL:
            self._task_ended(task)

    def _task_ended(self, task: TaskEntry) -> None:
        """FINISHED or FAILED: give back what the task held, keep a summary."""
        spec = task.spec
        deps = spec[m.T_DEPS]
        if deps:
            self.objects.release([oid for _, oid in deps])
        if spec[m.T_CONTAINED]:
            self.objects.release(spec[m.T_CONTAINED])
        tid = spec[m.T_ID]
        if self.tasks.get(tid) is task:
            del self.tasks[tid]
        history = self.history
        history.task_finished(summary(task))
        if task.t_end:
            history.event((spec[m.T_NAME], task.rank, task.t_start, task.t_end, task.pid,
                           tid))
        spec[m.T_PAYLOAD] = None

    def submit(self, spec: list) -> None:
        """A task or actor call was submitted; its return ids are held by the submitter.

        The task takes one hold on each argument ref and each nested ref (given
        back when it ends), counts the arguments not ready yet, and fails at once
        (after taking every hold) when an argument already holds an error.
        """
        if self.broken:
            self._fail_task_now(spec, self._broken_error(spec))
            return
        fn_id = spec[m.T_FN]
        blob = spec[m.T_BLOB]
        if blob is not None:
            self.fn_blobs.setdefault(fn_id, blob)
            spec[m.T_BLOB] = None
        if fn_id not in self.fn_names:
            self.fn_names[fn_id] = spec[m.T_NAME]
        opts = spec[m.T_RES]
        resources = opts if opts is not None else scheduler.DEFAULT_TASK_RESOURCES
        actor_id = spec[m.T_ACTOR]
        actor = self.actors.get(actor_id) if actor_id is not None else None
        retries = spec[m.T_RETRIES]
        if actor is not None and not retries:
            retries = actor.max_task_retries
        task = TaskEntry(spec, resources, shape_of(resources), retries)
        self.tasks[spec[m.T_ID]] = task
        objects = self.objects
        objects.hold(spec[m.T_RETURNS])
        deps = spec[m.T_DEPS]
        if deps:
            for _, oid in deps:
                e = objects.entry(oid)
                e.refs += 1
                if e.record is None:
                    task.missing += 1
                    e.waiters.append(("task", task))
                elif e.record[0] == ERROR and task.failed_dep is None:
                    task.failed_dep = e.record
        contained = spec[m.T_CONTAINED]
        if contained:
            objects.hold(contained)
        if task.failed_dep is not None:
            self._fail_task(task, task.failed_dep)
            return
        if actor_id is not None:
            if actor is None:
                dead = self.history.dead_actors.get(actor_id)
                why = f"it died: {dead[1]}" if dead else "no such actor"
                self._fail_task(task, (ERROR, dumps(ActorDiedError(
                    f"actor {spec[m.T_NAME]} is dead: {why}"))))
                return
            actor.queue.append(task)
            self._dispatch_actor(actor)
            return
        if task.missing == 0:
            self._set_task_state(task, READY)

    def _fail_task(self, task: TaskEntry, err: tuple) -> None:
        """Seal the task's returns with ``err`` and end it (no-op if it already ended)."""
        if task.state in TERMINAL:
            return
        self._unplace(task)
        for oid in task.spec[m.T_RETURNS]:
            self.put_object(oid, err, None)
        if task.state not in TERMINAL:
            self._set_task_state(task, FAILED)

    def _fail_task_now(self, spec: list, err: Exception) -> None:
        task = TaskEntry(spec, {}, (), 0)
        self.tasks[spec[m.T_ID]] = task
        self.objects.hold(spec[m.T_RETURNS])
        contained = spec[m.T_CONTAINED]
        if spec[m.T_DEPS]:
            self.objects.hold([oid for _, oid in spec[m.T_DEPS]])
        if contained:
            self.objects.hold(contained)
        self._fail_task(task, (ERROR, dumps(err)))

    # --- placement --------------------------------------------------------------------

    def schedule(self) -> None:
        """Place ready tasks on workers (called after every batch of events).

        Costs what it places: see ``resources.ReadyQueue.place``.
        """
        workers = self._alive
        if not workers:
            return
        if self.ready.count:
            arg_nodes = self._arg_nodes
            pick_worker = scheduler.pick_worker
            self.ready.place(lambda t: pick_worker(workers, t.resources, arg_nodes(t)),
                             self._dispatch, self._blocked)
        if not self.ready.count:
            self._rebalance(workers)

    def _blocked(self, task: TaskEntry) -> None:
        if task.shape not in self._warned and \
                not scheduler.feasible_anywhere(self._alive, task.resources):
            self._warn_unplaceable(f"task {task.spec[m.T_NAME]}", task.resources,
                                   "that much", task.shape)

    def _rebalance(self, workers: list) -> None:
        """Idle CPUs while other workers hold queued tasks: ask for some back.

        Short tasks are queued ahead at workers; one long task can then hold
        others back while another rank idles. Only tasks still in a worker
        rank's own queue come back (not those an executor already holds).
        """
        spare = [w for w in workers if w.inflight < w.total.get("CPU", 0) + w.blocked]
        for idle in spare:
            room = int(idle.total.get("CPU", 0) + idle.blocked - idle.inflight)
            donors = [w for w in workers if not w.steal_pending and w is not idle
                      and w.inflight > w.total.get("CPU", 0) + w.blocked]
            if not donors or room <= 0:
                return
            donor = max(donors, key=lambda w: w.inflight - w.total.get("CPU", 0))
            excess = int(donor.inflight - donor.total.get("CPU", 0) - donor.blocked)
            donor.steal_pending = True
            self.send(donor.rank, (m.STEAL, max(1, min(room + idle.prefetch, excess // 2))))

    def tasks_returned(self, rank: int, tids: list[int]) -> None:
        """Answer to STEAL: these tasks never started on ``rank``; queue them first."""
        w = self.workers.get(rank)
        if w is not None:
            w.steal_pending = False
        for tid in reversed(tids):
            task = self.tasks.get(tid)
            if task is None or task.state is not RUNNING or task.rank != rank:
                continue
            self._unplace(task)
            task.attempts -= 1
            check_transition(task, READY)
            task.state = READY
            self.ready.push_front(task)

    def _arg_nodes(self, task: TaskEntry) -> dict[int, int] | None:
        deps = task.spec[m.T_DEPS]
        if not deps:
            return None
        sizes: dict[int, int] = {}
        entries = self.objects.entries
        for _, oid in deps:
            e = entries.get(oid)
            if e is not None and e.record is not None and e.record[0] == SHM:
                sizes[e.record[1]] = sizes.get(e.record[1], 0) + e.record[3]
        return sizes or None

    def _warn_unplaceable(self, what: str, resources: dict, until: str, key) -> None:
        """Warn once per kind of request that no worker rank can take."""
        if key in self._warned:
            return
        self._warned.add(key)
        have = scheduler.largest_worker(self.workers.values())
        warnings.warn(f"{what} needs {resources}, but no worker rank has {until} "
                      f"(largest: {have}); it stays pending until it fits. Pass resources "
                      f"to init() or start ranks with more CPUs/GPUs.", stacklevel=2)

    def _wire(self, spec: list, w: WorkerInfo, gpu_ids: list[int], resources: dict) -> list:
        """The spec as sent to ``w``: function shipped once per rank, deps resolved."""
        wire = list(spec)
        fn_id = spec[m.T_FN]
        if fn_id is not None and fn_id not in w.known_fns:
            w.known_fns.add(fn_id)
            wire[m.T_BLOB] = self.fn_blobs.get(fn_id)
        else:
            wire[m.T_BLOB] = None
        deps = spec[m.T_DEPS]
        if deps:
            record_for = self.objects.record_for
            wire[m.T_DEPS] = [(pos, oid, record_for(oid, w.node)) for pos, oid in deps]
        wire[m.T_RES] = (gpu_ids, resources)
        return wire

    def _dispatch(self, task: TaskEntry, w: WorkerInfo) -> None:
        self._set_task_state(task, RUNNING)
        task.rank = w.rank
        task.attempts += 1
        task.placed = True
        task.gpu_ids = hold(w, task.resources)
        w.inflight += 1
        self.send(w.rank, (m.EXECUTE, self._wire(task.spec, w, task.gpu_ids, task.resources)))

    def _unplace(self, task: TaskEntry) -> None:
        """A RUNNING task is no longer at its rank: give back what it held there (once)."""
        if not task.placed:
            return
        task.placed = False
        if task.spec[m.T_ACTOR] is not None:
            actor = self.actors.get(task.spec[m.T_ACTOR])
            if actor is not None:
                actor.inflight.pop(task.spec[m.T_ID], None)
            return
        w = self.workers.get(task.rank)
        if w is not None:
            w.inflight -= 1
            give_back(w, task.resources, task.gpu_ids)
            if not w.refill and scheduler.low_water(w):
                w.refill = True
        task.gpu_ids = []

    # --- results ----------------------------------------------------------------------

    def task_done(self, rank: int, tid: int, results: list, contained: list,
                  t0: float, t1: float, pid: int) -> None:
        task = self.tasks.get(tid)
        if task is None or task.state is not RUNNING:
            self._drop_results(rank, results)
            return
        self._finish(task, t0, t1, pid)
        for oid, rec in zip(task.spec[m.T_RETURNS], results):
            self.put_object(oid, rec, contained)
            contained = None  # the contained refs are held once, by the first return
        self._set_task_state(task, FINISHED)

    def _drop_results(self, rank: int, results: list) -> None:
        """Results of a task that already ended (failed when the job broke): free them."""
        for rec in results:
            if rec[0] == SHM:
                self.objects.free_block(rec[1], rec[2], rec[3])

    def task_failed(self, rank: int, tid: int, err: tuple, t0: float, t1: float,
                    pid: int) -> None:
        task = self.tasks.get(tid)
        if task is None or task.state is not RUNNING:
            return
        self._finish(task, t0, t1, pid)
        self._error_signal(task, err)
        self._fail_task(task, err)

    def _finish(self, task: TaskEntry, t0: float, t1: float, pid: int) -> None:
        task.t_start, task.t_end, task.pid = t0, t1, pid
        self.avg_task_seconds = 0.9 * self.avg_task_seconds + 0.1 * (t1 - t0)
        self._unplace(task)
        if task.spec[m.T_ACTOR] is None:
            w = self.workers.get(task.rank)
            if w is not None:
                w.prefetch = scheduler.prefetch_depth(self.avg_task_seconds,
                                                      PREFETCH_SECONDS, MAX_PREFETCH)

    def worker_crashed(self, rank: int, tids: list[int], exitcode: int, pid: int,
                       actor_id: int | None) -> None:
        """An executor died; its tasks are retried or fail with WorkerCrashedError."""
        for tid in tids:
            task = self.tasks.get(tid)
            if task is None or task.state is not RUNNING or task.spec[m.T_ACTOR] is not None:
                continue  # actor calls are handled by actor_died
            self._unplace(task)
            if task.retries_left != 0:
                task.retries_left -= 1
                logger.info("retrying %s after its process died on rank %d",
                            task.spec[m.T_NAME], rank)
                self._set_task_state(task, READY)
            else:
                err = WorkerCrashedError(
                    f"the process running {task.spec[m.T_NAME]} on worker rank {rank} "
                    f"({self.host_of[rank]}, pid {pid}) died with {describe_exit(exitcode)} "
                    f"after {task.attempts} attempt(s); the rank goes on serving. "
                    f"Set max_retries to retry crashed tasks.")
                self._fail_task(task, (ERROR, dumps(err)))
        if actor_id is not None:
            self.actor_died(actor_id, f"its process (pid {pid}) died with "
                            f"{describe_exit(exitcode)}", allow_restart=True)

    def _broken_error(self, spec: list) -> Exception:
        return WorkerCrashedError(f"cannot run {spec[m.T_NAME]}: {self.broken}")

    def mark_broken(self, why: str) -> None:
        """Fail every pending task and request at once (the job cannot go on)."""
        if self.broken:
            return
        self.broken = why
        for task in list(self.tasks.values()):
            self._fail_task(task, (ERROR, dumps(WorkerCrashedError(
                f"{task.spec[m.T_NAME]} was lost: {why}"))))
        self.cond.notify_all()

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

    def _error_signal(self, task: TaskEntry, err: tuple) -> None:
        from ..values import error_from_record
        from ..signals import ErrorSignal
        try:
            blob = dumps(ErrorSignal(error_from_record(err)))
        except Exception:
            return
        actor_id = task.spec[m.T_ACTOR]
        self.add_signal(actor_id, None if actor_id is not None else task.spec[m.T_ID], blob)

    # --- actor transitions ----------------------------------------------------------------

    def _set_actor_state(self, actor: ActorEntry, new: ActorState) -> None:
        """The only place an actor's state changes; see ``actors.py`` for the edges."""
        check_actor_transition(actor, new)
        old = actor.state
        actor.state = new
        if old in HOLDING and new not in HOLDING:
            w = self.workers.get(actor.rank)
            if w is not None:
                give_back(w, actor.resources, actor.gpu_ids)
                w.actors -= 1
            actor.gpu_ids = []
        if new is A_PENDING:
            self.pending_actors[actor.actor_id] = time.time()
        else:
            self.pending_actors.pop(actor.actor_id, None)
        if new is A_DEAD:
            self._actor_ended(actor)

    def _actor_ended(self, actor: ActorEntry) -> None:
        """DEAD: fail the calls still queued, give back the creation arguments, forget."""
        for task in actor.queue:
            self._fail_task(task, (ERROR, dumps(ActorDiedError(
                f"actor {actor.class_name} died: {actor.error}; the call "
                f"{task.spec[m.T_NAME]} cannot run"))))
        actor.queue.clear()
        if actor.name is not None and self.named_actors.get(actor.name) == actor.actor_id:
            del self.named_actors[actor.name]
        deps = actor.spec[m.T_DEPS]
        if deps:
            self.objects.release([oid for _, oid in deps])
        if actor.spec[m.T_CONTAINED]:
            self.objects.release(actor.spec[m.T_CONTAINED])
        del self.actors[actor.actor_id]
        self.history.actor_dead(actor.actor_id, actor.class_name, actor.error)

    def create_actor(self, spec: list, resources: dict, max_restarts: int,
                     name: str | None, class_name: str, max_task_retries: int = 0,
                     meta=None) -> None:
        actor_id = spec[m.T_ACTOR]
        if name is not None and name in self.named_actors:
            raise ValueError(f"an actor named {name!r} already exists")
        blob = spec[m.T_BLOB]
        if blob is not None:
            self.fn_blobs.setdefault(spec[m.T_FN], blob)
            spec[m.T_BLOB] = None
        actor = ActorEntry(actor_id, spec, resources, max_restarts, name, class_name,
                           max_task_retries)
        actor.meta = meta
        self.actors[actor_id] = actor
        if name is not None:
            self.named_actors[name] = actor_id
        deps = spec[m.T_DEPS]
        if deps:
            self.objects.hold([oid for _, oid in deps])
        if spec[m.T_CONTAINED]:
            self.objects.hold(spec[m.T_CONTAINED])
        self._place_actor(actor)

    def _place_actor(self, actor: ActorEntry) -> None:
        deps = actor.spec[m.T_DEPS]
        if deps:
            for _, oid in deps:
                e = self.objects.entry(oid)
                if e.record is None:
                    e.waiters.append(("actor_place", actor))
                    return  # placed when this argument is ready
        workers = self._alive
        w = scheduler.pick_actor_worker(workers, actor.resources)
        if w is None:
            if not scheduler.feasible_anywhere(workers, actor.resources):
                self._warn_unplaceable(f"actor {actor.class_name}", actor.resources,
                                       "that much free",
                                       ("actor",) + tuple(sorted(actor.resources.items())))
            if actor.state is not A_PENDING:
                self._set_actor_state(actor, A_PENDING)
            return
        actor.rank = w.rank
        self._set_actor_state(actor, A_STARTING)
        actor.gpu_ids = hold(w, actor.resources)
        w.actors += 1
        self.send(w.rank, (m.CREATE_ACTOR,
                           self._wire(actor.spec, w, actor.gpu_ids, actor.resources)))

    def retry_pending_actors(self) -> None:
        for actor_id in list(self.pending_actors):
            actor = self.actors.get(actor_id)
            if actor is None or actor.state is not A_PENDING:
                self.pending_actors.pop(actor_id, None)
                continue
            self._place_actor(actor)

    def actor_ready(self, actor_id: int, pid: int) -> None:
        actor = self.actors.get(actor_id)
        if actor is None or actor.state is not A_STARTING:
            return
        actor.pid = pid
        self._set_actor_state(actor, A_ALIVE)
        self._dispatch_actor(actor)

    def _dispatch_actor(self, actor: ActorEntry) -> None:
        if actor.state is not A_ALIVE:
            return
        w = self.workers[actor.rank]
        queue = actor.queue
        while queue:
            task = queue[0]
            if task.state is not PENDING:
                queue.popleft()
                continue
            if task.missing:
                # Calls run in submission order: wait for this one's arguments.
                for _, oid in task.spec[m.T_DEPS]:
                    e = self.objects.entry(oid)
                    if e.record is None and ("actor", actor) not in e.waiters:
                        e.waiters.append(("actor", actor))
                return
            queue.popleft()
            self._set_task_state(task, RUNNING)
            task.rank = w.rank
            task.attempts += 1
            task.placed = True
            actor.inflight[task.spec[m.T_ID]] = task
            self.send(w.rank, (m.EXECUTE,
                               self._wire(task.spec, w, actor.gpu_ids, actor.resources)))

    def actor_died(self, actor_id: int, reason: str, allow_restart: bool) -> None:
        actor = self.actors.get(actor_id)
        if actor is None:
            return
        if allow_restart and actor.state not in HOLDING:
            return  # it has no process that could have died (a stale report)
        restart = allow_restart and (actor.max_restarts < 0
                                     or actor.restarts < actor.max_restarts)
        msg = f"actor {actor.class_name} died: {reason}"
        lost = list(actor.inflight.values())
        actor.inflight.clear()
        requeue = []
        for task in lost:
            if task.state is not RUNNING:
                continue
            task.placed = False
            if restart and task.retries_left != 0:
                task.retries_left -= 1
                self._set_task_state(task, PENDING)
                requeue.append(task)
                continue
            self._fail_task(task, (ERROR, dumps(ActorDiedError(
                f"{msg}; the call {task.spec[m.T_NAME]} was lost"
                + ("; the actor is being restarted" if restart else "")))))
        actor.queue.extendleft(reversed(requeue))
        if restart:
            actor.restarts += 1
            self._set_actor_state(actor, A_RESTARTING)
            logger.info("restarting actor %s (%d of %s)", actor.class_name,
                        actor.restarts, actor.max_restarts)
            self._place_actor(actor)
            return
        actor.error = reason
        self._set_actor_state(actor, A_DEAD)
        self.retry_pending_actors()

    def kill_actor(self, actor_id: int, no_restart: bool = True) -> None:
        actor = self.actors.get(actor_id)
        if actor is None:
            return
        if actor.rank >= 0 and actor.state in HOLDING:
            self.send(actor.rank, (m.KILL_ACTOR, actor_id, no_restart))
        if no_restart:
            actor.max_restarts = 0
            self.actor_died(actor_id, "killed by kill()", allow_restart=False)

    # --- misc -----------------------------------------------------------------------------

    def run_function_on_all_workers(self, blob: bytes) -> None:
        self.run_functions.append(blob)
        for w in self._alive:
            self.send(w.rank, (m.RUN_FUNCTION, blob))


def describe_exit(code: int | None) -> str:
    import signal
    if code is None:
        return "an unknown status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
