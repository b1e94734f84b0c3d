"""Worker ranks' resources, and the ready queue the scheduler places from.

The ready queue keeps one FIFO per resource shape (``{"CPU": 1}``, ``{"CPU": 1,
"GPU": 1}``, ...). A scheduling pass takes tasks from the front of each FIFO
while some worker can take them and stops at the first that none can: every
task of that shape would fail the same test. So a pass costs what it places
plus one failed pick per shape, never the length of the backlog.
"""
from __future__ import annotations

import collections

from .. import scheduler
from .tasks import READY


class WorkerInfo:
    __slots__ = ("rank", "node", "host", "total", "avail", "gpu_free", "inflight",
                 "blocked", "prefetch", "actors", "alive", "known_fns", "pid",
                 "steal_pending", "refill")

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
        self.alive = True                     #: False once the rank has stopped
        self.known_fns: set = set()           #: function ids already shipped here
        self.steal_pending = False            #: a STEAL was sent, RETURNED not back yet
        self.refill = True                    #: filling its queue (see scheduler)


def hold(w: WorkerInfo, resources: dict) -> list[int]:
    """Reserve ``resources`` on ``w``; returns the GPU ids handed out."""
    scheduler.reserve(w, resources)
    if not resources.get("GPU"):
        return []
    n = int(resources["GPU"] + 0.999)
    gpu_ids, w.gpu_free = w.gpu_free[:n], w.gpu_free[n:]
    return gpu_ids


def give_back(w: WorkerInfo, resources: dict, gpu_ids: list[int]) -> None:
    scheduler.unreserve(w, resources)
    w.gpu_free.extend(gpu_ids)


_DEFAULT_SHAPE = tuple(sorted(scheduler.DEFAULT_TASK_RESOURCES.items()))


def shape_of(resources: dict):
    if resources is scheduler.DEFAULT_TASK_RESOURCES:
        return _DEFAULT_SHAPE
    return tuple(sorted(resources.items()))


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

    def push(self, task) -> None:
        q = self.fifos.get(task.shape)
        if q is None:
            q = self.fifos[task.shape] = collections.deque()
        q.append(task)
        self.count += 1

    def push_front(self, task) -> None:
        q = self.fifos.get(task.shape)
        if q is None:
            q = self.fifos[task.shape] = collections.deque()
        q.appendleft(task)
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
