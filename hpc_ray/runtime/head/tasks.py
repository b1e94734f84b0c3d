"""Task lifecycle: the states a task (or actor call) goes through, and the rules.

::

    (submit) ──▶ PENDING ──deps ready──▶ READY ──placed──▶ RUNNING ──▶ FINISHED
                    │  ▲                   ▲  │               │  │
                    │  └── actor restart ──┼──┼───────────────┘  ├──▶ FAILED
                    │                      └──┼── crash retry, ──┘
                    └─────────────────────────┴── given back (STEAL)
                              every non-terminal state ──▶ FAILED

An actor call goes PENDING ──▶ RUNNING directly (its actor's queue orders it).
``TaskLifecycle.set_task_state`` is the only code that changes ``TaskEntry.state``; it
checks each change against ``ALLOWED``, and entering FINISHED or FAILED is the
one place a task gives back the references it took at submission (its
arguments and the refs nested in them). A terminal state is never left, so
nothing is released twice.
"""
from __future__ import annotations

import enum
import logging
import time

from ...exceptions import ActorDiedError, InfeasibleTaskError, WorkerCrashedError
from ...transport import messages as m
from ...transport.serialization import ERROR, SHM, dumps
from .. import scheduler

logger = logging.getLogger(__name__)


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
#: Resources only the ranks' start-up gives (``experimental.set_resource`` refuses them).
_FIXED = frozenset(("CPU", "GPU"))


def fixed(resources: dict) -> dict:
    """The CPUs and GPUs of ``resources``: what a rank has for good (custom
    resources may be created later, ``experimental.set_resource``)."""
    return {k: v for k, v in resources.items() if k in _FIXED}


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
                 "state", "t_submit", "t_start", "t_end", "pid", "attempts", "placed",
                 "lenders")

    def __init__(self, spec: list, resources: dict, shape, retries: int) -> None:
        self.spec = spec                      #: the TaskSpec (a list while on the head)
        self.missing = 0                      #: dependencies not ready yet
        self.rank = -1                        #: worker rank it was last sent to
        self.retries_left = retries           #: crash retries left (-1: unlimited)
        self.resources = resources
        self.shape = shape                    #: hashable key of ``resources`` (ready queues)
        self.gpu_ids: list[int] = []
        self.lenders: list = ()               #: sibling ranks lending CPUs (resources.hold)
        self.state = PENDING
        self.t_submit = time.time()
        self.t_start = 0.0
        self.t_end = 0.0
        self.pid = 0
        self.attempts = 0
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


class TaskLifecycle:
    """The ``Head``'s task events: submission, results, failures, crashes, retries.

    One part of ``Head`` (``head.task_events``); the head owns the tables these
    events change (``head.tasks``, ``head.objects``, ``head.workers``, ``head.actors``).
    """

    def __init__(self, head) -> None:
        self.head = head

    def set_task_state(self, task: TaskEntry, new: TaskState, first: bool = False) -> None:
        """The only place a task's state changes (the edges: ``ALLOWED`` above).

        A task becoming READY joins the back of its ready FIFO, or the front when
        ``first`` (tasks a rank gave back, which were due before the rest).
        """
        check_transition(task, new)
        task.state = new
        if new is READY:
            self.head.ready.push(task, first)
        elif new in TERMINAL:
            self._task_ended(task)

    def _task_ended(self, task: TaskEntry) -> None:
        """FINISHED or FAILED: give back what the task held, keep a summary."""
        head = self.head
        spec = task.spec
        deps = spec[m.T_DEPS]
        if deps:
            head.objects.release([oid for _, oid in deps])
        if spec[m.T_CONTAINED]:
            head.objects.release(spec[m.T_CONTAINED])
        tid = spec[m.T_ID]
        if head.tasks.get(tid) is task:
            del head.tasks[tid]
        history = head.history
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
        head = self.head
        if head.broken:
            self.fail_task_now(spec, self._broken_error(spec))
            return
        fn_id = spec[m.T_FN]
        blob = spec[m.T_BLOB]
        if blob is not None:
            head.fn_blobs.setdefault(fn_id, blob)
            spec[m.T_BLOB] = None
        if fn_id not in head.fn_names:
            head.fn_names[fn_id] = spec[m.T_NAME]
        opts = spec[m.T_RES]
        resources = opts if opts is not None else scheduler.DEFAULT_TASK_RESOURCES
        actor_id = spec[m.T_ACTOR]
        actor = head.actors.get(actor_id) if actor_id is not None else None
        retries = spec[m.T_RETRIES]
        if retries is None:     # an actor call without retries of its own
            retries = actor.max_task_retries if actor is not None else 0
        task = TaskEntry(spec, resources, scheduler.shape_of(resources), retries)
        head.tasks[spec[m.T_ID]] = task
        objects = head.objects
        objects.hold(spec[m.T_RETURNS])
        failed_dep = None                 # an argument's error record, if any
        deps = spec[m.T_DEPS]
        if deps:
            for _, oid in deps:
                e = objects.entry(oid)
                e.refs += 1
                if e.record is None:
                    task.missing += 1
                    e.waiters.append(("task", task))
                elif e.record[0] == ERROR and failed_dep is None:
                    failed_dep = e.record
        contained = spec[m.T_CONTAINED]
        if contained:
            objects.hold(contained)
        if failed_dep is not None:
            self.fail_task(task, failed_dep)
            return
        if actor_id is not None:
            if actor is None:
                dead = head.history.dead_actors.get(actor_id)
                self.fail_actor_call(task, ActorDiedError(
                    f"actor {dead[0]} died: {dead[1]}; the call {spec[m.T_NAME]} cannot run"
                    if dead else f"the actor of the call {spec[m.T_NAME]} does not exist"))
                return
            caller = actor.queue.append(task)
            if caller is not None:
                head.actor_events.throttle(caller)
            head.actor_events.dispatch_actor(actor)
            return
        if not self._feasible(task.shape, resources):
            self.fail_task(task, (ERROR, dumps(InfeasibleTaskError(
                f"{spec[m.T_NAME]} needs {resources}, but no node can ever hold "
                f"that (nodes have: {scheduler.node_totals(head._alive)}); it would wait "
                f"forever. Pass resources to init(), or start ranks with more CPUs or "
                f"GPUs (SLURM_CPUS_PER_TASK, --gpus-per-node)."))))
            return
        if task.missing == 0:
            self.set_task_state(task, READY)

    def _feasible(self, shape, resources: dict) -> bool:
        """Whether some worker rank could ever hold the CPUs and GPUs of ``resources``
        (cached per shape; the cache is dropped when ranks come or go). Custom
        resources are left out: ``experimental.set_resource`` may create them
        later, so a task that needs more than any node has waits for them, with a
        warning, as in Ray (``Placement._blocked``)."""
        known = self.head.feasible_shapes.get(shape)
        if known is None:
            known = not self.head._alive or scheduler.feasible_anywhere(self.head._alive,
                                                                        fixed(resources))
            self.head.feasible_shapes[shape] = known
        return known

    def fail_task(self, task: TaskEntry, err: tuple) -> None:
        """Seal the task's returns with ``err`` and end it (no-op if it already ended)."""
        head = self.head
        if task.state in TERMINAL:
            return
        head.placement.unplace(task)
        for oid in task.spec[m.T_RETURNS]:
            head.put_object(oid, err, None)
        if task.state not in TERMINAL:
            self.set_task_state(task, FAILED)

    def fail_task_now(self, spec: list, err: Exception) -> None:
        task = TaskEntry(spec, {}, (), 0)
        self.head.tasks[spec[m.T_ID]] = task
        self.head.objects.hold(spec[m.T_RETURNS])
        contained = spec[m.T_CONTAINED]
        if spec[m.T_DEPS]:
            self.head.objects.hold([oid for _, oid in spec[m.T_DEPS]])
        if contained:
            self.head.objects.hold(contained)
        self.fail_task(task, (ERROR, dumps(err)))

    def task_done(self, rank: int, task_id: int, results: list, contained: list,
                  t_start: float, t_end: float, pid: int) -> None:
        head = self.head
        task = head.tasks.get(task_id)
        if task is None or task.state is not RUNNING:
            self._drop_results(rank, results)
            return
        self._finish(task, t_start, t_end, pid)
        for oid, rec in zip(task.spec[m.T_RETURNS], results):
            head.put_object(oid, rec, contained)
            contained = None  # the contained refs are held once, by the first return
        self.set_task_state(task, FINISHED)

    def _drop_results(self, rank: int, results: list) -> None:
        """Results of a task that already ended (failed when the job broke): free them."""
        for rec in results:
            if rec[0] == SHM:
                self.head.objects.free_block(rec[1], rec[2], rec[3])

    def task_failed(self, rank: int, task_id: int, error: tuple, t_start: float,
                    t_end: float, pid: int) -> None:
        task = self.head.tasks.get(task_id)
        if task is None or task.state is not RUNNING:
            return
        self._finish(task, t_start, t_end, pid)
        self.error_noted(task.spec[m.T_ID], task.spec[m.T_ACTOR], error)
        self.fail_task(task, error)

    def _finish(self, task: TaskEntry, t0: float, t1: float, pid: int) -> None:
        head = self.head
        task.t_start, task.t_end, task.pid = t0, t1, pid
        head.avg_task_seconds = 0.9 * head.avg_task_seconds + 0.1 * (t1 - t0)
        actor_id = task.spec[m.T_ACTOR]
        head.placement.unplace(task)
        if actor_id is not None:
            actor = head.actors.get(actor_id)
            if actor is not None:
                if actor.unreferenced:
                    head.actor_events.end_if_unreferenced(actor)
                else:
                    head.actor_events.dispatch_actor(actor)   # room for more of its calls
        else:
            w = head.workers.get(task.rank)
            if w is not None:
                w.prefetch = scheduler.prefetch_depth(head.avg_task_seconds,
                                                      scheduler.PREFETCH_SECONDS,
                                                      scheduler.MAX_PREFETCH)

    def worker_crashed(self, rank: int, tids: list[int], exitcode: int, pid: int,
                       actor_id: int | None) -> None:
        """An executor died; its tasks are retried or fail with WorkerCrashedError."""
        for tid in tids:
            task = self.head.tasks.get(tid)
            if task is None or task.state is not RUNNING or task.spec[m.T_ACTOR] is not None:
                continue  # actor calls are handled by actor_died
            self.head.placement.unplace(task)
            where = (f"the process running {task.spec[m.T_NAME]} on worker rank {rank} "
                     f"({self.head.host_of[rank]}, pid {pid}) died with "
                     f"{describe_exit(exitcode)}")
            if task.retries_left != 0:
                task.retries_left -= 1
                # Said on the driver's stderr, as Ray's "A worker died or was killed
                # while executing task": a retry that works would hide a crash.
                logger.warning("hpc_ray: %s; running it again (max_retries)", where)
                self.set_task_state(task, READY)
            else:
                hint = ("Set max_retries to retry crashed tasks." if task.attempts == 1
                        else "Its retries (max_retries) are spent.")
                err = (ERROR, dumps(WorkerCrashedError(
                    f"{where} after {task.attempts} attempt(s); the rank goes on serving. "
                    f"{hint}")))
                self.error_noted(task.spec[m.T_ID], None, err)
                self.fail_task(task, err)
        if actor_id is not None:
            self.head.actor_events.actor_died(
                actor_id, f"its process (pid {pid}) died with {describe_exit(exitcode)}",
                allow_restart=True)

    def tasks_returned(self, rank: int, task_ids: list[int]) -> None:
        """Answer to STEAL: these tasks never started on ``rank``; queue them first."""
        w = self.head.workers.get(rank)
        if w is not None:
            w.steal_pending = False
        for tid in reversed(task_ids):
            task = self.head.tasks.get(tid)
            if task is None or task.state is not RUNNING or task.rank != rank:
                continue
            self.head.placement.unplace(task)
            task.attempts -= 1
            self.set_task_state(task, READY, first=True)

    def _broken_error(self, spec: list) -> Exception:
        return WorkerCrashedError(f"cannot run {spec[m.T_NAME]}: {self.head.broken}")

    def mark_broken(self, why: str) -> None:
        """Fail every pending task and request at once (the job cannot go on)."""
        if self.head.broken:
            return
        self.head.broken = why
        for task in list(self.head.tasks.values()):
            self.fail_task(task, (ERROR, dumps(WorkerCrashedError(
                f"{task.spec[m.T_NAME]} was lost: {why}"))))
        self.head.cond.notify_all()

    def fail_actor_call(self, task: TaskEntry, err: ActorDiedError) -> None:
        """A call fails because its actor is gone: the actor signals it too."""
        from ..signals import ActorDiedSignal
        self._signal_from(task.spec[m.T_ACTOR], task.spec[m.T_ID], ActorDiedSignal(err))
        self.fail_task(task, (ERROR, dumps(err)))

    def direct_call_lost(self, actor_id: int, task_id: int, name: str) -> None:
        """A call that went straight to its actor was lost with the actor's
        process: the actor signals it as for a call through the head."""
        from ..signals import ActorDiedSignal
        actor = self.head.actors.get(actor_id)
        what = f"actor {actor.class_name}" if actor is not None else "the actor"
        self._signal_from(actor_id, task_id, ActorDiedSignal(ActorDiedError(
            f"{what}'s process ended; the call {name} was lost")))

    def error_noted(self, task_id: int, actor_id: int | None, err: tuple) -> None:
        """A task's or actor call's error (also one that went straight to its actor,
        ``direct_calls_done``): its text for ``errors()``, and its ErrorSignal."""
        from ..values import error_from_record
        from ..signals import ErrorSignal
        try:
            error = error_from_record(err)
            text = str(error)
        except Exception:
            return
        self.head.history.task_failed(task_id, text)
        self._signal_from(actor_id, task_id, ErrorSignal(error))

    def _signal_from(self, actor_id: int | None, task_id: int, signal) -> None:
        """``signal`` from a task's source: its actor, else the task."""
        try:
            blob = dumps(signal)
        except Exception:
            return
        self.head.add_signal(actor_id, None if actor_id is not None else task_id, blob)


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
