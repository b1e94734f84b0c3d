"""A worker rank's record of one executor process (``Executor``), and what its
fields say about the CPU it holds or lends. State only: ``WorkerState``
(``worker_state.py``) changes it, the loop (``worker.py``) holds its process."""
from __future__ import annotations

import collections
from typing import Any


class Executor:
    """The rank's record of one executor process."""

    __slots__ = ("serial", "proc", "pid", "known_fns", "assigned", "blocked", "actor_id",
                 "calls", "retiring", "ready", "holds", "unsealed", "extra", "idle_since",
                 "cpus", "lending", "spare", "gone", "outbox", "for_actor", "deep",
                 "closing")

    def __init__(self, serial: int, actor_id: int | None, now: float) -> None:
        self.serial = serial
        #: The loop's handle on the process (``ExecutorProc``) and its pid, once started.
        self.proc: Any = None
        self.pid = 0
        self.known_fns: set = set()
        #: Tasks sent and not finished, in order: task id -> (sent while blocked?, spec).
        self.assigned: collections.OrderedDict = collections.OrderedDict()
        #: Nested levels of its main thread waiting in get() (BLOCKED), closing
        #: ones included.
        self.blocked = 0
        #: Of those, levels whose wait is over (UNBLOCK) that still run the nested
        #: tasks sent before the rank heard: each still lends its CPU (the level
        #: cannot go on until they end) but is sent no more (BLOCKED -1 ends it).
        self.closing = 0
        self.actor_id = actor_id
        #: It hosts an actor (``actor_id`` goes None when the actor ends cleanly).
        self.for_actor = actor_id is not None
        self.calls: collections.Counter = collections.Counter()
        #: max_calls reached: it stops once its tasks are done.
        self.retiring = False
        #: EXEC_READY read: its interpreter is up.
        self.ready = False
        #: An extra executor, for num_cpus=0 tasks only.
        self.extra = False
        #: Threads of its task other than the main one waiting in get() (LEND).
        self.lending = 0
        #: Waits of its main thread at the nesting limit (DEEP): each lends its
        #: CPU as BLOCKED does, but the tasks that CPU runs go to other executors.
        self.deep = 0
        #: A CPU executor started to run tasks on CPUs such threads lend; stopped
        #: when idle (the rank keeps one CPU executor per CPU otherwise).
        self.spare = False
        #: CPUs its actor holds (an actor's executor only).
        self.cpus = 0
        #: When it last had nothing assigned (extras stop after a while idle).
        self.idle_since = now
        #: Object ids this process holds at the head (HOLD, PUT and SUBMIT take one,
        #: RELEASE gives one back), and store blocks it was given by ALLOC and has
        #: not sealed in a PUT or a result yet: given back if it dies.
        self.holds: dict[int, int] = {}
        self.unsealed: dict[int, int] = {}
        #: Reclaimed: the head was told it ended; messages still due to it are dropped.
        self.gone = False
        #: Messages for it not handed to the loop yet (``WorkerState.send``).
        self.outbox: list = []

    def took(self, oids) -> None:
        """The process holds one more ref to each of ``oids`` at the head."""
        holds = self.holds
        for oid in oids:
            holds[oid] = holds.get(oid, 0) + 1

    def gave_back(self, oids) -> None:
        holds = self.holds
        for oid in oids:
            n = holds.get(oid, 0) - 1
            if n > 0:
                holds[oid] = n
            else:
                holds.pop(oid, None)


def lends_cpu(ex: Executor) -> bool:
    """Whether ``ex`` waiting in ``get`` frees a CPU the head may hand out meanwhile:
    only a CPU executor's task holds one (an actor keeps its CPU while it waits)."""
    return not ex.extra and not ex.for_actor


def thread_lent(ex: Executor) -> bool:
    """Whether ``ex``'s CPU is lent by threads of its task other than the main
    one (LEND) while the main thread is not waiting itself: the lent CPU runs
    tasks in another executor (the main thread lends by running them nested)."""
    return ex.lending > 0 and not ex.blocked


def cpus_lent(ex: Executor) -> int:
    """The CPUs ``ex`` lends the head (BLOCKED sent for it): one per waiting
    level of its main thread, nested or deep, or one while only other threads wait."""
    return ex.blocked + ex.deep + thread_lent(ex) if lends_cpu(ex) else 0


def takes_nested(ex: Executor) -> bool:
    """Whether a task may go to ``ex`` nested: its main thread waits in ``get``
    below the nesting limit (a deep wait runs none), at a level not closing."""
    return bool(ex.assigned and ex.blocked > ex.closing and not ex.deep)
