"""Worker ranks' resources, and the ready queue the scheduler places from.

The ready queue keeps one FIFO per resource shape (``{"CPU": 1}``, ``{"CPU": 1,
"GPU": 1}``, ...). A scheduling pass takes tasks from the front of each FIFO
while some worker can take them and stops at the first that none can: every
task of that shape would fail the same test. So a pass costs what it places
plus one failed pick per shape, never the length of the backlog.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import warnings

from ... import _config
from ...transport import messages as m
from ...transport.serialization import SHM
from .. import gpu_ids as gpus, scheduler
from .tasks import READY, RUNNING, TaskEntry

#: Work that has waited this long (seconds) for CPUs that actors hold, all of
#: the job's, is warned of once (``HPC_RAY_STALL_WARN_S``; 0: never).
STALL_WARN_S = _config.os_environ_get("STALL_WARN_S", 30.0, float)



class NodePool:
    """A node's GPUs and custom resources, shared by its worker ranks
    (``scheduler.RANK_KEYS`` are per rank instead)."""

    __slots__ = ("total", "avail", "gpu_free")

    def __init__(self) -> None:
        self.total: dict = {}
        self.avail: dict = {}
        #: GPU id -> the fraction of it not held (see runtime/gpu_ids.py): the
        #: ids of all the node's ranks.
        self.gpu_free: dict[int, float] = gpus.new_pool(())

    def add_gpus(self, ids) -> None:
        """A rank of the node was given GPU ``ids`` (an id two ranks report is one GPU)."""
        for g in ids:
            if g not in self.gpu_free:
                self.gpu_free[g] = 1.0
                self.total["GPU"] = self.total.get("GPU", 0) + 1
                self.avail["GPU"] = self.avail.get("GPU", 0) + 1

    def add(self, resources: dict) -> None:
        """The node has ``resources`` (each rank reports the same: counted once)."""
        for k, v in resources.items():
            extra = v - self.total.get(k, 0)
            if extra > 0:
                self.total[k] = v
                self.avail[k] = self.avail.get(k, 0) + extra

    def set(self, name: str, capacity: float) -> None:
        """The node's ``name`` becomes ``capacity`` (0: it has none).

        What running tasks and actors hold stays theirs: after a shrink below
        that, ``avail`` is negative (nothing more is placed) and rises as they
        give it back, so the capacity shrinks as they release it.
        """
        held = self.total.get(name, 0) - self.avail.get(name, 0)
        if capacity:
            self.total[name] = capacity
        else:
            self.total.pop(name, None)
        if capacity or held:
            self.avail[name] = capacity - held
        else:
            self.avail.pop(name, None)


class WorkerInfo:
    __slots__ = ("rank", "node", "host", "total", "avail", "gpu_free", "inflight",
                 "blocked", "prefetch", "actors", "alive", "known_fns", "pid",
                 "steal_pending", "refill", "pool", "actor_cpus", "hosting", "lending",
                 "fractions")

    def __init__(self, rank: int, node: int, host: str, resources: dict,
                 gpu_ids: list[int], pid: int, pool: NodePool | None = None) -> None:
        self.rank = rank
        self.node = node
        self.host = host
        self.pid = pid
        own = {k: v for k, v in resources.items() if k in scheduler.RANK_KEYS}
        self.total = dict(own)                #: {"CPU": 1}
        self.avail = dict(own)                #: what tasks and actors do not hold
        #: The node's GPUs and custom resources (shared with its other ranks).
        self.pool = pool if pool is not None else NodePool()
        self.pool.add_gpus(gpu_ids)
        #: The node's GPU ids: id -> the fraction of it not held (``NodePool``).
        self.gpu_free = self.pool.gpu_free
        self.inflight = 0                     #: CPU tasks sent and not finished
        #: Tasks holding a fraction of a CPU sent and not finished (not in
        #: ``inflight``: see ``scheduler.in_cpu_queue``).
        self.fractions = 0
        self.blocked = 0                      #: executors blocked in get()
        self.prefetch = 1                     #: extra tasks queued beyond CPUs
        self.actors = 0                       #: actors placed here
        #: CPUs its actors hold: not for tasks, even while an actor waits in get().
        self.actor_cpus = 0
        self.alive = True                     #: False once the rank has stopped
        self.known_fns: set = set()           #: function ids already shipped here
        self.steal_pending = False            #: a STEAL was sent, RETURNED not back yet
        self.refill = True                    #: filling its queue (see scheduler)
        self.hosting = 0                      #: tasks/actors wider than one rank run here
        self.lending = 0                      #: such grants its CPUs are lent to



def hold(w: WorkerInfo, resources: dict, lenders: list = ()) -> list[int]:
    """Reserve ``resources`` on ``w`` (with ``lenders``' CPUs when it is wider
    than ``w``: see ``scheduler.pick_wide``); returns the GPU ids handed out."""
    scheduler.reserve(w, resources)
    if lenders:
        w.hosting += 1
        for lender in lenders:
            lender.lending += 1
            scheduler.reserve(lender, {"CPU": lender.total["CPU"]})
    need = resources.get("GPU")
    return gpus.take(w.gpu_free, need) if need else []


def give_back(w: WorkerInfo, resources: dict, gpu_ids: list[int],
              lenders: list = ()) -> None:
    scheduler.unreserve(w, resources)
    if gpu_ids:
        gpus.give_back(w.gpu_free, gpu_ids, resources["GPU"])
    if lenders:
        w.hosting -= 1
        for lender in lenders:
            lender.lending -= 1
            scheduler.unreserve(lender, {"CPU": lender.total["CPU"]})


class ReadyQueue:
    """FIFOs of READY tasks, one per resource shape.

    A task leaves its FIFO only when placed; one that failed or was cancelled
    while queued is dropped when it reaches the front (its state is no longer
    READY), so removal never scans.
    """

    def __init__(self) -> None:
        self.fifos: dict[tuple, collections.deque] = {}
        self.count = 0   # entries in all FIFOs, stale ones included

    def __len__(self) -> int:
        return self.count

    def push(self, task, first: bool = False) -> None:
        """Queue ``task`` at the back of its shape's FIFO (the front if ``first``)."""
        q = self.fifos.get(task.shape)
        if q is None:
            q = self.fifos[task.shape] = collections.deque()
        if first:
            q.appendleft(task)
        else:
            q.append(task)
        self.count += 1

    def place(self, pick, dispatch, blocked) -> None:
        """Place tasks from every FIFO while ``pick(task)`` finds a worker.

        ``blocked(task)`` is called for the first task of a FIFO that no worker
        can take now.
        """
        for shape in list(self.fifos):
            q = self.fifos[shape]
            while q:
                task = q[0]
                if task.state is not READY:
                    q.popleft()
                    self.count -= 1
                    continue
                w = pick(task)
                if w is None:
                    blocked(task)
                    break
                q.popleft()
                self.count -= 1
                dispatch(task, w)
            if not q:
                del self.fifos[shape]


class Placement:
    """The ``Head``'s scheduling: ready tasks onto worker ranks, and back.

    One part of ``Head`` (``head.placement``); the head owns ``head.ready`` and
    ``head.workers``.
    """

    def __init__(self, head) -> None:
        self.head = head
        #: Since when every CPU is held by actors while work waits (``warn_stalled``).
        self.stalled_since: float | None = None

    def schedule(self) -> None:
        """Place ready tasks on workers (called after every batch of events).

        Costs what it places: see ``resources.ReadyQueue.place``.
        """
        head = self.head
        workers = head._alive
        if not workers:
            return
        if head.ready.count:
            head.ready.place(self._picker(workers), self._dispatch, self._blocked)
        if not head.ready.count:
            self._rebalance(workers)

    def _picker(self, workers: list):
        """``pick(task)`` for one scheduling pass.

        A task whose arguments sit in some node's store goes where most of their
        bytes are (``scheduler.pick_worker`` scans the workers). The others take
        the workers with room in turn, least loaded first, from a list made once
        per pass and resource shape; a worker leaves the list when it is full.
        So a pass costs O(workers + tasks placed), not O(workers x tasks placed)
        (measured with benchmarks/head_scaling.py: the scan was 94% of the head's
        time at 1,024 ranks).
        """
        rooms: dict = {}          # shape -> [workers with room, next index]
        most_cpus = self.head._most_rank_cpus
        arg_nodes = self._arg_nodes
        capacity_ok = scheduler.capacity_ok

        def pick(task):
            need = task.resources
            if scheduler.is_wide(most_cpus, need):
                got = scheduler.pick_wide(workers, need, blocked_lend=True)
                if got is None:
                    return None
                task.lenders = got[1]
                return got[0]
            nodes = arg_nodes(task)
            if nodes:
                return scheduler.pick_worker(workers, need, nodes)
            entry = rooms.get(task.shape)
            if entry is None:
                room = [w for w in workers if capacity_ok(w, need)]
                room.sort(key=scheduler.load)
                entry = rooms[task.shape] = [room, 0]
            room = entry[0]
            while room:
                i = entry[1] % len(room)
                w = room[i]
                if capacity_ok(w, need):
                    entry[1] = i + 1
                    return w
                room.pop(i)
                entry[1] = i
            return None

        return pick

    def _blocked(self, task: TaskEntry) -> None:
        if task.shape not in self.head._warned and \
                not scheduler.feasible_anywhere(self.head._alive, task.resources):
            self.warn_unplaceable(f"task {task.spec[m.T_NAME]}", task.resources,
                                  "that much", task.shape)

    def _rebalance(self, workers: list) -> None:
        """Idle CPUs while other workers hold queued tasks: ask for some back.

        Short tasks are queued ahead at workers; one long task can then hold
        others back while another rank idles. Only tasks still in a worker
        rank's own queue come back (not those an executor already holds).
        """
        # (A rank running fractions of a CPU takes whole ones only when free: it
        # asks for none back.)
        spare = [w for w in workers if w.inflight < scheduler.task_cpus(w) + w.blocked
                 and not w.hosting and not w.lending and not w.fractions]
        for idle in spare:
            room = int(scheduler.task_cpus(idle) + idle.blocked - idle.inflight)
            donors = [w for w in workers if not w.steal_pending and w is not idle
                      and w.inflight > scheduler.task_cpus(w) + w.blocked]
            if not donors or room <= 0:
                return
            donor = max(donors, key=lambda w: w.inflight - scheduler.task_cpus(w))
            excess = int(donor.inflight - scheduler.task_cpus(donor) - donor.blocked)
            donor.steal_pending = True
            self.head.send(donor.rank, (m.STEAL, max(1, min(room + idle.prefetch, excess // 2))))

    def _arg_nodes(self, task: TaskEntry) -> dict[int, int] | None:
        deps = task.spec[m.T_DEPS]
        if not deps:
            return None
        sizes: dict[int, int] = {}
        entries = self.head.objects.entries
        for _, oid in deps:
            e = entries.get(oid)
            if e is not None and e.record is not None and e.record[0] == SHM:
                sizes[e.record[1]] = sizes.get(e.record[1], 0) + e.record[3]
        return sizes or None

    def warn_stalled(self, now: float) -> None:
        """Warn once when tasks or actors have waited ``STALL_WARN_S`` for CPUs
        that actors hold, every one of the job's: they start only when an actor
        ends (Ray warns of this too). Once a second, from the comm loop; ``now``:
        ``time.monotonic()``. O(worker ranks)."""
        head = self.head
        workers = head._alive
        stalled = STALL_WARN_S > 0 and bool(workers) and all(
            w.lending or 0 < w.total.get("CPU", 0) <= w.actor_cpus for w in workers) and (
            head.ready.count or head.pending_actors or any(w.inflight for w in workers))
        if not stalled:
            self.stalled_since = None
            return
        if self.stalled_since is None:
            self.stalled_since = now
        if now - self.stalled_since < STALL_WARN_S or "stalled" in head._warned:
            return
        head._warned.add("stalled")
        cpus = sum(w.total.get("CPU", 0) for w in workers)
        warnings.warn(f"tasks or actors have waited {STALL_WARN_S:g} s for CPUs: actors hold "
                      f"all {cpus:g} of the job's. They start when an actor gives its CPUs "
                      f"back (its last handle goes, or kill()); or create fewer actors, give "
                      f"them fewer CPUs (num_cpus), or ask init() for more.", stacklevel=2)

    def warn_unplaceable(self, what: str, resources: dict, until: str, key) -> None:
        """Warn once per kind of request that no worker rank can take."""
        if key in self.head._warned:
            return
        self.head._warned.add(key)
        have = scheduler.node_totals(self.head.workers.values())
        warnings.warn(f"{what} needs {resources}, but no worker rank has {until} "
                      f"(nodes have: {have}); it stays pending until it fits. Pass resources "
                      f"to init(), create them with experimental.set_resource(), or start "
                      f"ranks with more CPUs/GPUs.", stacklevel=user_stacklevel())

    def wire(self, spec: list, w: WorkerInfo, gpu_ids: list[int], resources: dict) -> list:
        """The spec as sent to ``w``: function shipped once per rank, deps resolved."""
        head = self.head
        wire = list(spec)
        fn_id = spec[m.T_FN]
        if fn_id is not None and fn_id not in w.known_fns:
            w.known_fns.add(fn_id)
            wire[m.T_BLOB] = head.fn_blobs.get(fn_id)
        else:
            wire[m.T_BLOB] = None
        deps = spec[m.T_DEPS]
        if deps:
            record_for = head.objects.record_for
            wire[m.T_DEPS] = [(pos, oid, record_for(oid, w.node)) for pos, oid in deps]
        wire[m.T_RES] = (gpu_ids, resources)
        return wire

    def _dispatch(self, task: TaskEntry, w: WorkerInfo) -> None:
        head = self.head
        head.task_events.set_task_state(task, RUNNING)
        task.rank = w.rank
        task.attempts += 1
        task.placed = True
        task.gpu_ids = hold(w, task.resources, task.lenders)
        # Only a task of one CPU or more takes a place in the rank's CPU queue: a
        # num_cpus=0 task, or one of a fraction of a CPU (counted in
        # ``w.fractions``), runs beside it (worker_state.no_cpu: an extra executor).
        if scheduler.in_cpu_queue(task.resources):
            w.inflight += 1
        elif task.resources.get("CPU"):
            w.fractions += 1
        head.send(w.rank, (m.EXECUTE, self.wire(task.spec, w, task.gpu_ids, task.resources)))

    def unplace(self, task: TaskEntry) -> None:
        """A RUNNING task is no longer at its rank: give back what it held there (once)."""
        head = self.head
        if not task.placed:
            return
        task.placed = False
        if task.spec[m.T_ACTOR] is not None:
            actor = head.actors.get(task.spec[m.T_ACTOR])
            if actor is not None:
                actor.inflight.pop(task.spec[m.T_ID], None)
            return
        w = head.workers.get(task.rank)
        if w is not None:
            if scheduler.in_cpu_queue(task.resources):
                w.inflight -= 1
            elif task.resources.get("CPU"):
                w.fractions -= 1
            give_back(w, task.resources, task.gpu_ids, task.lenders)
            if not w.refill and scheduler.low_water(w):
                w.refill = True
        task.gpu_ids = []
        task.lenders = ()


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes its caller's warning name the first line
    outside hpc_ray on the stack (the user's ``.remote()`` or ``get()`` that had
    the head place the task); in a thread of hpc_ray's own (the comm thread),
    the line that called the caller."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    if frame is None or frame.f_code.co_filename == threading.__file__:
        return 2
    return level


#: hpc_ray's own directory (``user_stacklevel``).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
