"""Task lifecycle: the states a task (or actor call) goes through, and the rules.

::

    (submit) ──▶ PENDING ──deps ready──▶ READY ──placed──▶ RUNNING ──▶ FINISHED
                    │  ▲                   ▲  │               │  │
                    │  └── actor restart ──┼──┼───────────────┘  ├──▶ FAILED
                    │                      └──┼── crash retry, ──┘
                    └─────────────────────────┴── given back (STEAL)
                              every non-terminal state ──▶ FAILED

An actor call goes PENDING ──▶ RUNNING directly (its actor's queue orders it).
``Head._set_task_state`` is the only code that changes ``TaskEntry.state``; it
checks each change against ``ALLOWED``, and entering FINISHED or FAILED is the
one place a task gives back the references it took at submission (its
arguments and the refs nested in them). A terminal state is never left, so
nothing is released twice.
"""
from __future__ import annotations

import enum
import time


class TaskState(enum.Enum):
    PENDING = "PENDING"     #: waiting for arguments (or, for an actor call, its turn)
    READY = "READY"         #: in the ready queue, waiting for a worker
    RUNNING = "RUNNING"     #: sent to a worker rank or an actor
    FINISHED = "FINISHED"
    FAILED = "FAILED"


PENDING, READY, RUNNING, FINISHED, FAILED = (TaskState.PENDING, TaskState.READY,
                                             TaskState.RUNNING, TaskState.FINISHED,
                                             TaskState.FAILED)
TERMINAL = frozenset((FINISHED, FAILED))

ALLOWED: dict[TaskState, frozenset] = {
    PENDING: frozenset((READY, RUNNING, FAILED)),
    READY: frozenset((RUNNING, FAILED)),
    RUNNING: frozenset((READY, PENDING, FINISHED, FAILED)),
    FINISHED: frozenset(),
    FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A bug in the head: a task was asked to move along an edge that does not exist."""


class TaskEntry:
    __slots__ = ("spec", "missing", "rank", "retries_left", "resources", "shape", "gpu_ids",
                 "state", "t_submit", "t_start", "t_end", "pid", "attempts", "failed_dep",
                 "placed")

    def __init__(self, spec: list, resources: dict, shape, retries: int) -> None:
        self.spec = spec                      #: the TaskSpec (a list while on the head)
        self.missing = 0                      #: dependencies not ready yet
        self.rank = -1                        #: worker rank it was last sent to
        self.retries_left = retries           #: crash retries left (-1: unlimited)
        self.resources = resources
        self.shape = shape                    #: hashable key of ``resources`` (ready queues)
        self.gpu_ids: list[int] = []
        self.state = PENDING
        self.t_submit = time.time()
        self.t_start = 0.0
        self.t_end = 0.0
        self.pid = 0
        self.attempts = 0
        self.failed_dep: tuple | None = None  #: an argument's error record, if any
        self.placed = False                   #: holds resources at ``rank`` (or its actor)


def check_transition(task: TaskEntry, new: TaskState) -> None:
    if new not in ALLOWED[task.state]:
        raise IllegalTransition(f"task {task.spec[3]} cannot go from {task.state.value} "
                                f"to {new.value}")


def summary(task: TaskEntry) -> tuple:
    """What history keeps of a finished task (for tasks() and timeline())."""
    spec = task.spec
    return (spec[0], spec[3], task.state.value, task.rank, task.attempts, tuple(spec[6]),
            task.t_submit, task.t_start, task.t_end, task.pid)
