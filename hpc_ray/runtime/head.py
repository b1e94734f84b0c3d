"""The head: control state and scheduling on rank 0. No MPI calls in here.

    driver thread ──submit/put/get──▶ Head (under Head.lock) ◀──handle(src, msgs)── comm thread
                                        │ outbox[rank] = [msg, ...] ─────────────▶ comm thread ─▶ MPI

The head owns the function table, task table, object table (records, reference
counts, locations), actor table and resource table, and the placement of bytes
in every node's store (:class:`store.Allocator`). Everything that happens is a
call into this object under one lock, either from the driver thread (the user's
API calls) or from the comm thread (batches of messages from worker ranks).
Outgoing messages collect in ``outbox`` and the comm thread sends them.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
import warnings
from typing import Any

from ..exceptions import ActorDiedError, WorkerCrashedError
from ..transport import messages as m
from ..transport.serialization import ERROR, SHM, dumps
from . import scheduler
from .store import Allocator
from .values import store_full

logger = logging.getLogger(__name__)

#: A record kind only the head hands out: "copy this object from another node
#: into the room already reserved on yours": (FETCH_PLAN, src_rank, src_record, local_record).
FETCH_PLAN = 4

#: Upper bound on tasks queued at one worker beyond its CPUs. Short tasks need a
#: deep queue so that no worker idles between batches; long tasks need a shallow
#: one so that a slow task does not hold others back while another rank idles.
MAX_PREFETCH = 256
#: Queue depth is chosen so a worker holds about this many seconds of work.
PREFETCH_SECONDS = 0.002
#: Bounds on what the head remembers of finished work (for tasks() and timeline()).
MAX_FINISHED_TASKS = 100_000
MAX_TIMELINE_EVENTS = 1_000_000


class ObjectEntry:
    __slots__ = ("record", "refs", "contained", "locations", "waiters", "free_when_ready")

    def __init__(self) -> None:
        self.record: tuple | None = None      #: the value, once known
        self.refs = 0                         #: holders: processes, pending tasks, containers
        self.contained: list[int] = ()        #: refs pickled inside this value
        self.locations: dict[int, tuple] = {}  #: node -> SHM record of copies on other nodes
        self.waiters: list = []               #: tasks and requests waiting for the value
        self.free_when_ready = False


class TaskEntry:
    __slots__ = ("spec", "missing", "rank", "retries_left", "resources", "gpu_ids",
                 "state", "t_submit", "t_start", "t_end", "pid", "attempts")

    def __init__(self, spec: list, resources: dict, retries: int) -> None:
        self.spec = spec                      #: the TaskSpec (a list while on the head)
        self.missing = 0                      #: dependencies not ready yet
        self.rank = -1                        #: worker rank it was sent to
        self.retries_left = retries
        self.resources = resources
        self.gpu_ids: list[int] = []
        self.state = "PENDING"                #: PENDING, READY, RUNNING, FINISHED, FAILED
        self.t_submit = time.time()
        self.t_start = 0.0
        self.t_end = 0.0
        self.pid = 0
        self.attempts = 0


class WorkerInfo:
    __slots__ = ("rank", "node", "host", "total", "avail", "gpu_free", "inflight",
                 "blocked", "prefetch", "actors", "alive", "known_fns", "pid",
                 "steal_pending")

    def __init__(self, rank: int, node: int, host: str, resources: dict,
                 gpu_ids: list[int], pid: int) -> None:
        self.rank = rank
        self.node = node
        self.host = host
        self.pid = pid
        self.total = dict(resources)          #: {"CPU": 1, "GPU": 0, custom: n}
        self.avail = dict(resources)          #: what tasks and actors do not hold
        self.gpu_free = list(gpu_ids)
        self.inflight = 0                     #: tasks sent and not finished
        self.blocked = 0                      #: executors blocked in get()
        self.prefetch = 1                     #: extra tasks queued beyond CPUs
        self.actors = 0                       #: actors placed here
        self.alive = True
        self.known_fns: set = set()           #: function ids already shipped here
        self.steal_pending = False            #: a STEAL was sent, RETURNED not back yet


class ActorEntry:
    __slots__ = ("actor_id", "class_id", "spec", "resources", "rank", "state", "queue",
                 "inflight", "max_restarts", "restarts", "name", "gpu_ids", "error",
                 "class_name", "pid", "max_task_retries")

    def __init__(self, actor_id: int, spec: list, resources: dict, max_restarts: int,
                 name: str | None, class_name: str) -> None:
        self.actor_id = actor_id
        self.class_id = spec[m.T_FN]
        self.spec = spec                      #: the creation TaskSpec (kept for restarts)
        self.resources = resources            #: held for the actor's lifetime
        self.rank = -1
        self.state = "PENDING"                #: PENDING, ALIVE, RESTARTING, DEAD
        self.queue: collections.deque = collections.deque()  #: calls not sent yet, in order
        self.inflight: dict[int, TaskEntry] = {}             #: calls sent, by task id
        self.max_restarts = max_restarts
        self.restarts = 0
        self.name = name
        self.gpu_ids: list[int] = []
        self.error: str = ""
        self.class_name = class_name
        self.pid = 0
        self.max_task_retries = 0


class Head:
    """Control state and scheduler. Every method is called with ``self.lock`` held."""

    def __init__(self, world_size: int, node_of: list[int], store_size: int,
                 host_of: list[str]) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)   # driver waits here for objects
        self.world_size = world_size
        self.node_of = node_of
        self.host_of = host_of
        self.objects: dict[int, ObjectEntry] = {}
        self.tasks: dict[int, TaskEntry] = {}
        self.fn_blobs: dict[Any, bytes] = {}
        self.fn_names: dict[Any, str] = {}
        self.workers: dict[int, WorkerInfo] = {}
        self.actors: dict[int, ActorEntry] = {}
        self.named_actors: dict[str, int] = {}
        self.actor_meta: dict[int, Any] = {}
        self.joins: dict[str, dict] = {}                # group name -> rank -> member
        self.signals: dict[tuple, list[bytes]] = {}     # source -> pickled signals
        self.signal_task_of: dict[int, tuple] = {}      # return id -> ("task", task id)
        self.ready: collections.deque[int] = collections.deque()  # tasks with all deps
        self.outbox: dict[int, list] = collections.defaultdict(list)
        #: Set once SHUTDOWN is queued: from then on nothing more is sent (a message
        #: no rank receives before MPI_Finalize can hang the job; see HeadLoop).
        self.closing = False
        self.allocators = {n: Allocator(store_size) for n in set(node_of)}
        self.store_size = store_size
        self.node_leader = {}
        for r, n in enumerate(node_of):
            self.node_leader.setdefault(n, r)
        #: Finished tasks kept for tasks() and timeline(), newest last (bounded).
        self.finished_tasks: collections.deque = collections.deque(maxlen=MAX_FINISHED_TASKS)
        self.timeline_events: collections.deque = collections.deque(maxlen=MAX_TIMELINE_EVENTS)
        self.run_functions: list[bytes] = []
        self.broken: str | None = None
        self.remote_waits: dict[int, tuple] = {}   # wait req key -> (rank, req, ids, n)
        self._warned: set = set()
        self.pending_infeasible: dict[int, float] = {}
        self.avg_task_seconds = 0.001

    # --- workers ----------------------------------------------------------------

    def _hold(self, w: WorkerInfo, resources: dict) -> list[int]:
        """Reserve ``resources`` on ``w``; returns the GPU ids handed out."""
        scheduler.reserve(w, resources)
        if not resources.get("GPU"):
            return []
        n = int(resources["GPU"] + 0.999)
        gpu_ids, w.gpu_free = w.gpu_free[:n], w.gpu_free[n:]
        return gpu_ids

    def _give_back(self, w: WorkerInfo, resources: dict, gpu_ids: list[int]) -> None:
        scheduler.unreserve(w, resources)
        w.gpu_free.extend(gpu_ids)

    def _unplace(self, task: TaskEntry, w: WorkerInfo | None) -> None:
        """A task sent to ``w`` is no longer there: finished, lost or given back."""
        if w is not None:
            w.inflight -= 1
            self._give_back(w, task.resources, task.gpu_ids)
        task.gpu_ids = []

    def _wire(self, spec: list, w: WorkerInfo, gpu_ids: list[int], resources: dict) -> list:
        """The spec as sent to ``w``: function shipped once per rank, deps resolved."""
        wire = list(spec)
        fn_id = spec[m.T_FN]
        if fn_id is not None and fn_id not in w.known_fns:
            w.known_fns.add(fn_id)
            wire[m.T_BLOB] = self.fn_blobs.get(fn_id)
        else:
            wire[m.T_BLOB] = None
        wire[m.T_DEPS] = self._resolve_deps(spec, w.node)
        wire[m.T_RES] = (gpu_ids, resources)
        return wire

    def add_worker(self, rank: int, resources: dict, gpu_ids: list[int], pid: int) -> None:
        self.workers[rank] = WorkerInfo(rank, self.node_of[rank], self.host_of[rank],
                                        resources, gpu_ids, pid)

    def send(self, rank: int, msg: tuple) -> None:
        if not self.closing:
            self.outbox[rank].append(msg)

    def take_outbox(self) -> dict[int, list]:
        out, self.outbox = self.outbox, collections.defaultdict(list)
        return out

    # --- objects and reference counts ----------------------------------------------

    def entry(self, oid: int) -> ObjectEntry:
        e = self.objects.get(oid)
        if e is None:
            e = self.objects[oid] = ObjectEntry()
        return e

    def hold(self, oids) -> None:
        objects = self.objects
        for oid in oids:
            e = objects.get(oid)
            if e is None:
                e = objects[oid] = ObjectEntry()
            e.refs += 1

    def release(self, oids) -> None:
        objects = self.objects
        for oid in oids:
            e = objects.get(oid)
            if e is None:
                continue
            e.refs -= 1
            if e.refs <= 0:
                if e.record is None:
                    e.free_when_ready = True
                elif not e.waiters:
                    self._free(oid, e)

    def _free(self, oid: int, e: ObjectEntry) -> None:
        del self.objects[oid]
        rec = e.record
        if rec is not None and rec[0] == SHM:
            self.allocators[rec[1]].free(rec[2], rec[3])
        for rec in e.locations.values():
            self.allocators[rec[1]].free(rec[2], rec[3])
        if e.contained:
            self.release(e.contained)

    def alloc(self, node: int, size: int) -> int | None:
        return self.allocators[node].alloc(size)

    def add_location(self, oid: int, rec: tuple) -> None:
        e = self.objects.get(oid)
        node = rec[1]
        if e is None or node in e.locations or (e.record and e.record[1] == node):
            self.allocators[node].free(rec[2], rec[3])  # freed meanwhile, or a duplicate copy
            return
        e.locations[node] = rec

    def put_object(self, oid: int, rec: tuple, contained: list[int]) -> None:
        """A value became known (put, or a task's return)."""
        e = self.objects.get(oid)
        if e is None:
            e = self.objects[oid] = ObjectEntry()
        if e.record is not None:   # a retried task returned again; keep the first value
            if rec[0] == SHM:
                self.allocators[rec[1]].free(rec[2], rec[3])
            return
        e.record = rec
        if contained:
            e.contained = contained
            self.hold(contained)
        if e.waiters:
            waiters, e.waiters = e.waiters, []
            for w in waiters:
                self._object_ready(w, oid, rec)
        if e.free_when_ready and e.refs <= 0:
            self._free(oid, e)

    def record_for(self, oid: int, node: int) -> tuple:
        """The record a reader on ``node`` should use (a fetch plan if it is elsewhere)."""
        e = self.objects[oid]
        rec = e.record
        if rec[0] != SHM or rec[1] == node:
            return rec
        local = e.locations.get(node)
        if local is not None:
            return local
        off = self.allocators[node].alloc(rec[3])
        if off is None:
            return (ERROR, dumps(store_full(rec[3], self.store_size, node)))
        local = (SHM, node, off, rec[3], rec[4], rec[5])
        src_node = rec[1]
        return (FETCH_PLAN, self._server_rank(src_node), rec, local)

    def _server_rank(self, node: int) -> int:
        return self.node_leader[node]

    def _object_ready(self, waiter, oid: int, rec: tuple) -> None:
        kind = waiter[0]
        if kind == "task":
            task = waiter[1]
            if rec[0] == ERROR:
                self._fail_task(task, rec, propagate=True)
                return
            task.missing -= 1
            if task.missing == 0 and task.state == "PENDING":
                actor_id = task.spec[m.T_ACTOR]
                if actor_id is None:
                    self._task_ready(task)
                elif actor_id in self.actors:
                    # Actor calls wait in their actor's queue, in submission order.
                    self._dispatch_actor(self.actors[actor_id])
        elif kind == "get":
            _, state = waiter
            state[2] -= 1
            if state[2] == 0:
                self._reply_get(state)
        elif kind == "wait":
            _, key = waiter
            w = self.remote_waits.get(key)
            if w is not None:
                self._check_remote_wait(key)
        elif kind == "actor":
            self._dispatch_actor(waiter[1])
        elif kind == "actor_place":
            if waiter[1].state in ("PENDING", "RESTARTING"):
                self._place_actor(waiter[1])

    # --- requests from executors ---------------------------------------------------

    def remote_get(self, rank: int, req: int, oids: list[int]) -> None:
        state = [rank, req, 0, oids]
        for oid in oids:
            e = self.entry(oid)
            if e.record is None:
                state[2] += 1
                e.waiters.append(("get", state))
        if state[2] == 0:
            self._reply_get(state)

    def _reply_get(self, state: list) -> None:
        rank, req, _, oids = state
        node = self.node_of[rank]
        self.send(rank, (m.REPLY, req, [self.record_for(o, node) for o in oids]))

    def remote_wait(self, rank: int, req: int, oids: list[int], n: int) -> None:
        key = (rank, req)
        self.remote_waits[key] = (rank, req, oids, n)
        if not self._check_remote_wait(key):
            for oid in oids:
                e = self.entry(oid)
                if e.record is None:
                    e.waiters.append(("wait", key))

    def _check_remote_wait(self, key, force: bool = False) -> bool:
        rank, req, oids, n = self.remote_waits[key]
        ready = [o for o in oids if self.objects.get(o) and self.objects[o].record is not None]
        if len(ready) >= n or force:
            del self.remote_waits[key]
            self.send(rank, (m.REPLY, req, ready[: max(n, 0)] if not force else ready[:n]))
            return True
        return False

    def remote_wait_now(self, rank: int, req: int) -> None:
        if (rank, req) in self.remote_waits:
            self._check_remote_wait((rank, req), force=True)

    # --- tasks ----------------------------------------------------------------------

    def submit(self, spec: list) -> None:
        """A task (or actor call) was submitted; its return ids are held by the submitter."""
        if self.broken:
            self._fail_task_now(spec, self._broken_error(spec))
            return
        fn_id = spec[m.T_FN]
        blob = spec[m.T_BLOB]
        if blob is not None:
            self.fn_blobs.setdefault(fn_id, blob)
            spec[m.T_BLOB] = None
        self.fn_names.setdefault(fn_id, spec[m.T_NAME])
        opts = spec[m.T_RES]
        resources = opts if opts is not None else scheduler.DEFAULT_TASK_RESOURCES
        task = TaskEntry(spec, resources, spec[m.T_RETRIES])
        self.tasks[spec[m.T_ID]] = task
        for oid in spec[m.T_RETURNS]:
            e = self.objects.get(oid)
            if e is None:
                e = self.objects[oid] = ObjectEntry()
            e.refs += 1
        deps = spec[m.T_DEPS]
        if deps:
            for _, oid in deps:
                e = self.entry(oid)
                e.refs += 1
                if e.record is None:
                    task.missing += 1
                    e.waiters.append(("task", task))
                elif e.record[0] == ERROR:
                    self._fail_task(task, e.record, propagate=True)
                    return
        contained = spec[m.T_CONTAINED]
        if contained:
            self.hold(contained)
        actor_id = spec[m.T_ACTOR]
        if actor_id is not None:
            actor = self.actors.get(actor_id)
            if actor is None or actor.state == "DEAD":
                why = actor.error if actor is not None else "no such actor"
                self._fail_task(task, (ERROR, dumps(ActorDiedError(
                    f"actor {spec[m.T_NAME]} is dead: {why}"))))
                return
            actor.queue.append(task)
            self._dispatch_actor(actor)
            return
        if task.missing == 0:
            self._task_ready(task)

    def _task_ready(self, task: TaskEntry) -> None:
        task.state = "READY"
        self.ready.append(task.spec[m.T_ID])

    def schedule(self) -> None:
        """Place ready tasks on workers (called after every batch of events)."""
        workers = [w for w in self.workers.values() if w.alive]
        if not workers:
            return
        if not self.ready:
            self._rebalance(workers)
            return
        still = collections.deque()
        ready = self.ready
        while ready:
            tid = ready.popleft()
            task = self.tasks.get(tid)
            if task is None or task.state != "READY":
                continue
            w = scheduler.pick_worker(workers, task.resources, self._arg_nodes(task))
            if w is None:
                if not scheduler.feasible_anywhere(workers, task.resources):
                    self._warn_unplaceable(f"task {task.spec[m.T_NAME]}", task.resources,
                                           "that much")
                still.append(tid)
                if scheduler.all_saturated(workers):
                    still.extend(ready)
                    ready.clear()
                continue
            self._dispatch(task, w)
        self.ready = still
        if not still:
            self._rebalance(workers)

    def _rebalance(self, workers: list) -> None:
        """Idle CPUs while other workers hold queued tasks: ask for some back.

        Short tasks are queued ahead at workers; one long task can then hold
        others back while another rank idles. Only tasks still in a worker
        rank's own queue come back (not those an executor already holds).
        """
        spare = [w for w in workers
                 if w.inflight < w.total.get("CPU", 0) + w.blocked]
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
        w = self.workers.get(rank)
        if w is not None:
            w.steal_pending = False
        for tid in reversed(tids):
            task = self.tasks.get(tid)
            if task is None or task.state != "RUNNING" or task.rank != rank:
                continue
            self._unplace(task, w)
            task.attempts -= 1
            task.state = "READY"
            self.ready.appendleft(tid)

    def _arg_nodes(self, task: TaskEntry) -> dict[int, int] | None:
        deps = task.spec[m.T_DEPS]
        if not deps:
            return None
        sizes: dict[int, int] = {}
        for _, oid in deps:
            e = self.objects.get(oid)
            if e is not None and e.record is not None and e.record[0] == SHM:
                sizes[e.record[1]] = sizes.get(e.record[1], 0) + e.record[3]
        return sizes or None

    def _warn_unplaceable(self, what: str, resources: dict, until: str) -> None:
        """Warn once per kind of request that no worker rank can take."""
        key = (what.split()[0],) + tuple(sorted(resources.items()))
        if key in self._warned:
            return
        self._warned.add(key)
        have = scheduler.largest_worker(self.workers.values())
        warnings.warn(f"{what} needs {resources}, but no worker rank has {until} "
                      f"(largest: {have}); it stays pending until it fits. Pass resources "
                      f"to init() or start ranks with more CPUs/GPUs.", stacklevel=2)

    def _resolve_deps(self, spec: list, node: int) -> list:
        deps = spec[m.T_DEPS]
        if not deps:
            return deps
        return [(pos, oid, self.record_for(oid, node)) for pos, oid in deps]

    def _dispatch(self, task: TaskEntry, w: WorkerInfo) -> None:
        task.state = "RUNNING"
        task.rank = w.rank
        task.attempts += 1
        task.gpu_ids = self._hold(w, task.resources)
        w.inflight += 1
        self.send(w.rank, (m.EXECUTE, self._wire(task.spec, w, task.gpu_ids, task.resources)))

    def task_done(self, rank: int, tid: int, results: list, contained: list,
                  t0: float, t1: float, pid: int) -> None:
        task = self.tasks.get(tid)
        if task is None:
            return
        self._finish(task, rank, t0, t1, pid)
        for oid, rec in zip(task.spec[m.T_RETURNS], results):
            self.put_object(oid, rec, contained)
            contained = None  # the contained refs are held once, by the first return
        task.state = "FINISHED"
        self._release_task(task)

    def task_failed(self, rank: int, tid: int, err: tuple, t0: float, t1: float,
                    pid: int) -> None:
        task = self.tasks.get(tid)
        if task is None:
            return
        self._finish(task, rank, t0, t1, pid)
        self._error_signal(task, err)
        self._fail_task(task, err)

    def _finish(self, task: TaskEntry, rank: int, t0: float, t1: float, pid: int) -> None:
        task.t_start, task.t_end, task.pid = t0, t1, pid
        dur = t1 - t0
        self.avg_task_seconds = 0.9 * self.avg_task_seconds + 0.1 * dur
        actor_id = task.spec[m.T_ACTOR]
        if actor_id is not None:
            actor = self.actors.get(actor_id)
            if actor is not None:
                actor.inflight.pop(task.spec[m.T_ID], None)
            return
        w = self.workers.get(rank)
        if w is not None and task.state == "RUNNING":
            self._unplace(task, w)
            w.prefetch = scheduler.prefetch_depth(self.avg_task_seconds, PREFETCH_SECONDS,
                                                  MAX_PREFETCH)

    def _fail_task(self, task: TaskEntry, err: tuple, propagate: bool = False) -> None:
        if task.state in ("FINISHED", "FAILED"):
            return
        if propagate and task.state == "RUNNING":
            return
        task.state = "FAILED"
        for oid in task.spec[m.T_RETURNS]:
            self.put_object(oid, err, None)
        self._release_task(task)

    def _fail_task_now(self, spec: list, err: Exception) -> None:
        task = TaskEntry(spec, {}, 0)
        self.tasks[spec[m.T_ID]] = task
        self.hold(spec[m.T_RETURNS])
        self._fail_task(task, (ERROR, dumps(err)))

    def _release_task(self, task: TaskEntry) -> None:
        spec = task.spec
        deps = spec[m.T_DEPS]
        if deps:
            self.release([oid for _, oid in deps])
        if spec[m.T_CONTAINED]:
            self.release(spec[m.T_CONTAINED])
        # Keep a compact trace for timeline() and tasks(); drop the payload, and
        # move the entry out of the live table so a long job's head stays small.
        spec[m.T_PAYLOAD] = None
        if task.t_end:
            self.timeline_events.append((task.spec[m.T_NAME], task.rank, task.t_start,
                                         task.t_end, task.pid, task.spec[m.T_ID]))
        tid = spec[m.T_ID]
        if self.tasks.get(tid) is task:
            del self.tasks[tid]
            self.finished_tasks.append(task)

    def worker_crashed(self, rank: int, tids: list[int], exitcode: int, pid: int,
                       actor_id: int | None) -> None:
        """An executor died; its tasks are retried or fail with WorkerCrashedError."""
        for tid in tids:
            task = self.tasks.get(tid)
            if task is None or task.state != "RUNNING":
                continue
            if actor_id is not None or task.spec[m.T_ACTOR] is not None:
                continue  # handled by actor_died
            self._unplace(task, self.workers.get(rank))
            if task.retries_left > 0:
                task.retries_left -= 1
                logger.info("retrying %s after its process died on rank %d",
                            task.spec[m.T_NAME], rank)
                self._task_ready(task)
            else:
                err = WorkerCrashedError(
                    f"the process running {task.spec[m.T_NAME]} on worker rank {rank} "
                    f"({self.host_of[rank]}, pid {pid}) died with {_describe_exit(exitcode)} "
                    f"after {task.attempts} attempt(s); the rank goes on serving. "
                    f"Set max_retries to retry crashed tasks.")
                self._fail_task(task, (ERROR, dumps(err)))
        if actor_id is not None:
            self.actor_died(actor_id, f"its process (pid {pid}) died with "
                            f"{_describe_exit(exitcode)}", allow_restart=True)

    def _broken_error(self, spec: list) -> Exception:
        return WorkerCrashedError(f"cannot run {spec[m.T_NAME]}: {self.broken}")

    def mark_broken(self, why: str) -> None:
        """Fail every pending task and request at once (the job cannot go on)."""
        if self.broken:
            return
        self.broken = why
        for task in list(self.tasks.values()):
            if task.state in ("PENDING", "READY", "RUNNING"):
                task.state = "READY"
                self._fail_task(task, (ERROR, dumps(WorkerCrashedError(
                    f"{task.spec[m.T_NAME]} was lost: {why}"))))
        self.cond.notify_all()

    # --- collective groups declared from inside actors ------------------------------

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

    # --- signals (experimental API) --------------------------------------------------

    def add_signal(self, actor_id: int | None, task_id: int | None, blob: bytes) -> None:
        if actor_id is not None:
            self.signals.setdefault(("actor", actor_id), []).append(blob)
            return
        task = self.tasks.get(task_id)
        if task is None:
            return
        self.signals.setdefault(("task", task_id), []).append(blob)
        for oid in task.spec[m.T_RETURNS]:
            self.signal_task_of[oid] = ("task", task_id)

    def _error_signal(self, task: TaskEntry, err: tuple) -> None:
        from ..experimental.signal import ErrorSignal
        from .values import error_from_record
        try:
            blob = dumps(ErrorSignal(error_from_record(err)))
        except Exception:
            return
        actor_id = task.spec[m.T_ACTOR]
        self.add_signal(actor_id, None if actor_id is not None else task.spec[m.T_ID], blob)

    # --- actors ---------------------------------------------------------------------

    def create_actor(self, spec: list, resources: dict, max_restarts: int,
                     name: str | None, class_name: str, max_task_retries: int = 0) -> None:
        actor_id = spec[m.T_ACTOR]
        if name is not None:
            if name in self.named_actors and self.actors[self.named_actors[name]].state != "DEAD":
                raise ValueError(f"an actor named {name!r} already exists")
            self.named_actors[name] = actor_id
        blob = spec[m.T_BLOB]
        if blob is not None:
            self.fn_blobs.setdefault(spec[m.T_FN], blob)
            spec[m.T_BLOB] = None
        actor = ActorEntry(actor_id, spec, resources, max_restarts, name, class_name)
        actor.max_task_retries = max_task_retries
        self.actors[actor_id] = actor
        deps = spec[m.T_DEPS]
        if deps:
            self.hold([oid for _, oid in deps])
        self._place_actor(actor)

    def _place_actor(self, actor: ActorEntry) -> None:
        workers = [w for w in self.workers.values() if w.alive]
        deps = actor.spec[m.T_DEPS]
        if deps:
            for _, oid in deps:
                e = self.entry(oid)
                if e.record is None:
                    e.waiters.append(("actor_place", actor))
                    return  # placed when this argument is ready
        w = scheduler.pick_actor_worker(workers, actor.resources)
        if w is None:
            if not scheduler.feasible_anywhere(workers, actor.resources):
                self._warn_unplaceable(f"actor {actor.class_name}", actor.resources,
                                       "that much free")
            actor.state = "PENDING"
            self.pending_infeasible[actor.actor_id] = time.time()
            return
        self.pending_infeasible.pop(actor.actor_id, None)
        actor.gpu_ids = self._hold(w, actor.resources)
        w.actors += 1
        actor.rank = w.rank
        actor.state = "STARTING"
        self.send(w.rank, (m.CREATE_ACTOR,
                           self._wire(actor.spec, w, actor.gpu_ids, actor.resources)))

    def retry_pending_actors(self) -> None:
        for actor_id in list(self.pending_infeasible):
            actor = self.actors.get(actor_id)
            if actor is None or actor.state != "PENDING":
                self.pending_infeasible.pop(actor_id, None)
                continue
            self._place_actor(actor)

    def actor_ready(self, actor_id: int, pid: int) -> None:
        actor = self.actors.get(actor_id)
        if actor is None or actor.state == "DEAD":
            return
        actor.state = "ALIVE"
        actor.pid = pid
        self._dispatch_actor(actor)

    def _dispatch_actor(self, actor: ActorEntry) -> None:
        if actor.state != "ALIVE":
            return
        w = self.workers[actor.rank]
        while actor.queue:
            task = actor.queue[0]
            if task.state in ("FAILED", "FINISHED"):
                actor.queue.popleft()
                continue
            if task.missing:
                # Calls run in submission order: wait for this one's arguments.
                deps = task.spec[m.T_DEPS]
                for _, oid in deps:
                    e = self.entry(oid)
                    if e.record is None and ("actor", actor) not in e.waiters:
                        e.waiters.append(("actor", actor))
                return
            actor.queue.popleft()
            task.state = "RUNNING"
            task.rank = w.rank
            task.attempts += 1
            actor.inflight[task.spec[m.T_ID]] = task
            self.send(w.rank, (m.EXECUTE,
                               self._wire(task.spec, w, actor.gpu_ids, actor.resources)))

    def actor_died(self, actor_id: int, reason: str, allow_restart: bool) -> None:
        actor = self.actors.get(actor_id)
        if actor is None or actor.state == "DEAD":
            return
        w = self.workers.get(actor.rank)
        if w is not None and actor.state in ("ALIVE", "STARTING"):
            self._give_back(w, actor.resources, actor.gpu_ids)
            actor.gpu_ids = []
            w.actors -= 1
        lost = list(actor.inflight.values())
        actor.inflight.clear()
        restart = allow_restart and (actor.max_restarts < 0
                                     or actor.restarts < actor.max_restarts)
        msg = f"actor {actor.class_name} died: {reason}"
        for task in lost:
            if restart and task.retries_left > 0:
                task.retries_left -= 1
                task.state = "PENDING"
                actor.queue.appendleft(task)
                continue
            task.state = "RUNNING"
            self._fail_task(task, (ERROR, dumps(ActorDiedError(
                f"{msg}; the call {task.spec[m.T_NAME]} was lost"
                + ("; the actor is being restarted" if restart else "")))))
        if restart:
            actor.restarts += 1
            actor.state = "RESTARTING"
            logger.info("restarting actor %s (%d of %s)", actor.class_name,
                        actor.restarts, actor.max_restarts)
            self._place_actor(actor)
            return
        actor.state = "DEAD"
        actor.error = reason
        for task in actor.queue:
            task.state = "RUNNING"
            self._fail_task(task, (ERROR, dumps(ActorDiedError(
                f"{msg}; the call {task.spec[m.T_NAME]} cannot run"))))
        actor.queue.clear()
        if actor.name is not None and self.named_actors.get(actor.name) == actor_id:
            del self.named_actors[actor.name]
        deps = actor.spec[m.T_DEPS]
        if deps:
            self.release([oid for _, oid in deps])
        self.retry_pending_actors()

    def kill_actor(self, actor_id: int, no_restart: bool = True) -> None:
        actor = self.actors.get(actor_id)
        if actor is None or actor.state == "DEAD":
            return
        if actor.rank >= 0 and actor.state in ("ALIVE", "STARTING"):
            self.send(actor.rank, (m.KILL_ACTOR, actor_id, no_restart))
        if no_restart:
            actor.max_restarts = 0
            self.actor_died(actor_id, "killed by kill()", allow_restart=False)

    # --- misc -----------------------------------------------------------------------

    def run_function_on_all_workers(self, blob: bytes) -> None:
        self.run_functions.append(blob)
        for w in self.workers.values():
            if w.alive:
                self.send(w.rank, (m.RUN_FUNCTION, blob))


def _describe_exit(code: int | None) -> str:
    import signal
    if code is None:
        return "an unknown status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
