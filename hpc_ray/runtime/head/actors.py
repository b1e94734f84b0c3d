"""Actor lifecycle.

::

    (create) ─▶ PENDING ─placed─▶ STARTING ─ready─▶ ALIVE
                   ▲                 │                │
                   └── no room ─ RESTARTING ◀─ died, restarts left
    every state ─▶ DEAD (killed, out of restarts, constructor failed)

While STARTING or ALIVE an actor holds its resources (and GPU ids) on its rank;
``Head._set_actor_state`` is the only code that changes ``ActorEntry.state``,
and it gives the resources back whenever an actor leaves those two states.
Entering DEAD also releases the creation arguments and drops the entry from
the live table; what is kept of a dead actor (its name and why it died, for
the error of a later call) lives in the head's bounded history.
"""
from __future__ import annotations

import collections
import enum
import logging

from ...exceptions import ActorDiedError
from ...transport import messages as m
from .. import scheduler
from .resources import give_back, hold
from .tasks import PENDING, RUNNING, IllegalTransition, fixed

logger = logging.getLogger(__name__)


class ActorState(enum.Enum):
    PENDING = "PENDING"          #: waiting for arguments or for room on a rank
    STARTING = "STARTING"        #: sent to a rank; the constructor runs
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"    #: its process died; about to be placed again
    DEAD = "DEAD"


A_PENDING, A_STARTING, A_ALIVE, A_RESTARTING, A_DEAD = (
    ActorState.PENDING, ActorState.STARTING, ActorState.ALIVE, ActorState.RESTARTING,
    ActorState.DEAD)
HOLDING = frozenset((A_STARTING, A_ALIVE))

ALLOWED: dict[ActorState, frozenset] = {
    A_PENDING: frozenset((A_STARTING, A_DEAD)),
    A_STARTING: frozenset((A_ALIVE, A_RESTARTING, A_DEAD)),
    A_ALIVE: frozenset((A_RESTARTING, A_DEAD)),
    A_RESTARTING: frozenset((A_STARTING, A_PENDING, A_DEAD)),
    A_DEAD: frozenset(),
}


#: Calls sent to an actor's process and not finished, at most. The rest wait in
#: the head, so a caller that floods an actor cannot bury another caller's calls
#: behind its own in the actor's inbox; the queue is topped up in bursts, once
#: it is down to half (one message per batch, not per finished call). With
#: 65,536 the driver's call in the docs' flood example waited seconds behind the
#: flood. An earlier quiet measurement put 1,024 at 53k -> 43k async calls/s; the
#: A/B with this change (microbenchmark actor_async, 2 runs each, machine busy)
#: gave 15-18k calls/s for 1,024 against 9.8-9.9k for 65,536.
MAX_ACTOR_INFLIGHT = 1 << 10

#: Bits of a task id below the submitting process's prefix (``context.COUNTER_BITS``).
_CALLER_SHIFT = 40
#: A caller's prefix is ``(rank << 20) | serial`` (``context.set_id_prefix``).
_SERIAL_BITS = 20

#: Calls one caller may have queued at one actor before the head stops reading
#: its requests (``THROTTLE``), and the level at which it reads them again. A
#: task looping on ``actor.f.remote()`` would otherwise grow the head's memory
#: by every call the actor has not run yet.
CALLER_QUEUE_HIGH = 10_000
CALLER_QUEUE_LOW = 1_000


class CallQueue:
    """An actor's calls not sent yet: in order per caller, callers served in turn.

    Ray orders an actor's calls per caller (the process that submitted them,
    named by the prefix of the task id). Serving callers round-robin keeps the
    driver's calls moving while tasks flood the same actor.
    """

    __slots__ = ("by_caller", "turn", "count", "over", "below")

    def __init__(self) -> None:
        self.by_caller: dict[int, collections.deque] = {}
        self.turn: collections.deque = collections.deque()   # callers with calls waiting
        self.count = 0
        self.over: set = set()        # callers with CALLER_QUEUE_HIGH calls queued
        self.below: list = []         # callers of ``over`` since back to CALLER_QUEUE_LOW

    def _calls_of(self, task, first: bool) -> collections.deque:
        caller = task.spec[m.T_ID] >> _CALLER_SHIFT
        q = self.by_caller.get(caller)
        if q is None:
            q = self.by_caller[caller] = collections.deque()
            if first:
                self.turn.appendleft(caller)
            else:
                self.turn.append(caller)
        self.count += 1
        return q

    def append(self, task) -> int | None:
        """Queue a new call; returns its caller if that caller now has
        ``CALLER_QUEUE_HIGH`` calls queued here (it should be throttled)."""
        q = self._calls_of(task, False)
        q.append(task)
        if len(q) >= CALLER_QUEUE_HIGH:
            caller = task.spec[m.T_ID] >> _CALLER_SHIFT
            if caller not in self.over:
                self.over.add(caller)
                return caller
        return None

    def put_back(self, tasks) -> None:
        """Calls lost with the actor's process go back first, in their order."""
        for task in reversed(tasks):
            self._calls_of(task, True).appendleft(task)

    def __iter__(self):
        for q in self.by_caller.values():
            yield from q

    def __bool__(self) -> bool:
        return self.count > 0

    def clear(self) -> None:
        self.by_caller.clear()
        self.turn.clear()
        self.count = 0
        self.below.extend(self.over)
        self.over.clear()

    def next_call(self, waiting) -> object | None:
        """The next call to send: the front call of the next caller in turn whose
        arguments are ready. ``waiting(task)`` is told of a front call that is not."""
        for _ in range(len(self.turn)):
            caller = self.turn[0]
            q = self.by_caller[caller]
            while q and q[0].state is not PENDING:
                q.popleft()          # failed or cancelled while queued
                self.count -= 1
            if not q:
                self.turn.popleft()
                del self.by_caller[caller]
                continue
            self.turn.rotate(-1)
            if q[0].missing:
                waiting(q[0])        # this caller's calls wait in order
                continue
            self.count -= 1
            if len(q) <= CALLER_QUEUE_LOW and caller in self.over:
                self.over.discard(caller)
                self.below.append(caller)
            return q.popleft()
        return None


class ActorEntry:
    __slots__ = ("actor_id", "class_id", "spec", "resources", "rank", "state", "queue",
                 "inflight", "max_restarts", "restarts", "name", "gpu_ids", "error",
                 "class_name", "pid", "max_task_retries", "meta", "unreferenced",
                 "lenders", "last_death")

    def __init__(self, actor_id: int, spec: list, resources: dict, max_restarts: int,
                 name: str | None, class_name: str, max_task_retries: int,
                 meta=None) -> None:
        self.actor_id = actor_id
        self.class_id = spec[m.T_FN]
        self.spec = spec                      #: the creation TaskSpec (kept for restarts)
        self.resources = resources            #: held while STARTING or ALIVE
        self.rank = -1
        self.state = A_PENDING
        self.queue = CallQueue()                              #: calls not sent yet
        self.inflight: dict = {}                              #: calls sent, by task id
        self.max_restarts = max_restarts
        self.restarts = 0
        self.name = name
        self.gpu_ids: list[int] = []
        self.lenders: list = ()               #: sibling ranks lending CPUs (resources.hold)
        self.error: str = ""
        #: How its last process ended (kept across restarts, for direct callers).
        self.last_death: str = ""
        self.class_name = class_name
        self.pid = 0
        self.max_task_retries = max_task_retries
        self.meta = meta                      #: method table, for get_actor()
        #: No handle is left: the actor ends when its queued and running calls are done.
        self.unreferenced = False


def check_transition(actor: ActorEntry, new: ActorState) -> None:
    if new not in ALLOWED[actor.state]:
        raise IllegalTransition(f"actor {actor.class_name} cannot go from "
                                f"{actor.state.value} to {new.value}")


class ActorLifecycle:
    """The ``Head``'s actor events: creation, placement, calls in order, death, restart.

    One part of ``Head`` (``head.actor_events``); the head owns ``head.actors``.
    """

    def __init__(self, head) -> None:
        self.head = head

    def _set_actor_state(self, actor: ActorEntry, new: ActorState) -> None:
        """The only place an actor's state changes (the edges: ``ALLOWED`` above)."""
        check_transition(actor, new)
        old = actor.state
        actor.state = new
        if old in HOLDING and new not in HOLDING:
            w = self.head.workers.get(actor.rank)
            if w is not None:
                give_back(w, actor.resources, actor.gpu_ids, actor.lenders)
                w.actors -= 1
                w.actor_cpus -= actor.resources.get("CPU", 0)
            actor.gpu_ids = []
            actor.lenders = ()
        if new is not A_PENDING:
            self.head.pending_actors.pop(actor.actor_id, None)
        if new is A_DEAD:
            self._actor_ended(actor)

    def _actor_ended(self, actor: ActorEntry) -> None:
        """DEAD: fail the calls still queued, give back the creation arguments, forget."""
        for task in actor.queue:
            self.head.task_events.fail_actor_call(task, ActorDiedError(
                f"actor {actor.class_name} died: {actor.error}; the call "
                f"{task.spec[m.T_NAME]} cannot run"))
        actor.queue.clear()
        self._unthrottle(actor.queue)
        if actor.name is not None and self.head.named_actors.get(actor.name) == actor.actor_id:
            del self.head.named_actors[actor.name]
        deps = actor.spec[m.T_DEPS]
        if deps:
            self.head.objects.release([oid for _, oid in deps])
        if actor.spec[m.T_CONTAINED]:
            self.head.objects.release(actor.spec[m.T_CONTAINED])
        del self.head.actors[actor.actor_id]
        self.head.history.actor_dead(actor.actor_id, actor.class_name, actor.error)

    def create_actor(self, spec: list, resources: dict, max_restarts: int,
                     name: str | None, class_name: str, max_task_retries: int = 0,
                     meta=None, lifetime_oid: int | None = None) -> None:
        actor_id = spec[m.T_ACTOR]
        if name is not None and name in self.head.named_actors:
            raise ValueError(f"an actor named {name!r} already exists")
        blob = spec[m.T_BLOB]
        if blob is not None:
            self.head.fn_blobs.setdefault(spec[m.T_FN], blob)
            spec[m.T_BLOB] = None
        actor = ActorEntry(actor_id, spec, resources, max_restarts, name, class_name,
                           max_task_retries, meta)
        self.head.actors[actor_id] = actor
        if name is not None:
            self.head.named_actors[name] = actor_id
        deps = spec[m.T_DEPS]
        if deps:
            self.head.objects.hold([oid for _, oid in deps])
        if spec[m.T_CONTAINED]:
            self.head.objects.hold(spec[m.T_CONTAINED])
        if lifetime_oid is not None:
            self.head.lifetimes[lifetime_oid] = actor_id
            self.head.objects.watched.add(lifetime_oid)
        self.place_actor(actor)

    def place_actor(self, actor: ActorEntry) -> None:
        deps = actor.spec[m.T_DEPS]
        if deps:
            for _, oid in deps:
                e = self.head.objects.entry(oid)
                if e.record is None:
                    e.waiters.append(("actor_place", actor))
                    return  # placed when this argument is ready
        workers = self.head._alive
        lenders = ()
        if scheduler.is_wide(self.head._most_rank_cpus, actor.resources):
            w, lenders = scheduler.pick_wide(workers, actor.resources) or (None, ())
        else:
            w = scheduler.pick_actor_worker(workers, actor.resources)
        if w is None:
            if workers and not scheduler.feasible_anywhere(workers, fixed(actor.resources)):
                # As an infeasible task fails (TaskLifecycle._feasible): no node
                # can ever hold it, so its calls raise instead of waiting forever.
                self.actor_died(actor.actor_id, (
                    f"no node can ever hold it: it needs {actor.resources} (nodes have: "
                    f"{scheduler.node_totals(workers)}). Pass num_cpus/num_gpus to init(), "
                    f"or start ranks with more CPUs or GPUs"), allow_restart=False)
                return
            if not scheduler.feasible_anywhere(workers, actor.resources):
                self.head.placement.warn_unplaceable(
                    f"actor {actor.class_name}", actor.resources, "that much free",
                    ("actor",) + tuple(sorted(actor.resources.items())))
            if actor.state is not A_PENDING:
                self._set_actor_state(actor, A_PENDING)
            self.head.pending_actors[actor.actor_id] = None   # tried again when room appears
            return
        actor.rank = w.rank
        self._set_actor_state(actor, A_STARTING)
        actor.gpu_ids = hold(w, actor.resources, lenders)
        actor.lenders = lenders
        w.actors += 1
        w.actor_cpus += actor.resources.get("CPU", 0)
        wire = self.head.placement.wire(actor.spec, w, actor.gpu_ids, actor.resources)
        self.head.send(w.rank, (m.CREATE_ACTOR, wire))

    def retry_pending_actors(self) -> None:
        for actor_id in list(self.head.pending_actors):
            actor = self.head.actors.get(actor_id)
            if actor is None or actor.state is not A_PENDING:
                self.head.pending_actors.pop(actor_id, None)
                continue
            self.place_actor(actor)

    def in_rank_busy(self) -> set[int]:
        """Ranks whose in-rank actor is being made or runs calls: their loop runs
        the user's code meanwhile (``node_watch``). O(actors), once a second."""
        return {a.rank for a in self.head.actors.values()
                if a.spec[m.T_MAX_CALLS] == m.IN_RANK
                and (a.inflight or a.state is A_STARTING)}

    def actor_ready(self, actor_id: int, pid: int) -> None:
        actor = self.head.actors.get(actor_id)
        if actor is None or actor.state is not A_STARTING:
            return
        actor.pid = pid
        self._set_actor_state(actor, A_ALIVE)
        self.dispatch_actor(actor)

    def dispatch_actor(self, actor: ActorEntry) -> None:
        """Send the actor calls that may go: in order per caller, callers in turn."""
        head = self.head
        if actor.state is not A_ALIVE or not actor.queue or \
                len(actor.inflight) > MAX_ACTOR_INFLIGHT // 2:
            return
        w = head.workers[actor.rank]

        def wait_for_arguments(task) -> None:
            for _, oid in task.spec[m.T_DEPS]:
                e = head.objects.entry(oid)
                if e.record is None and ("actor", actor) not in e.waiters:
                    e.waiters.append(("actor", actor))

        while len(actor.inflight) < MAX_ACTOR_INFLIGHT:
            task = actor.queue.next_call(wait_for_arguments)
            if task is None:
                break
            wire = head.placement.wire(task.spec, w, actor.gpu_ids, actor.resources)
            head.task_events.set_task_state(task, RUNNING)
            task.rank = w.rank
            task.attempts += 1
            task.placed = True
            actor.inflight[task.spec[m.T_ID]] = task
            head.send(w.rank, (m.EXECUTE, wire))
        self._unthrottle(actor.queue)

    def throttle(self, caller: int) -> None:
        """``caller`` has too many calls queued at an actor: stop reading it."""
        n = self.head.throttled.get(caller, 0)
        self.head.throttled[caller] = n + 1
        rank = caller >> _SERIAL_BITS
        if n == 0 and rank in self.head.workers:
            self.head.send(rank, (m.THROTTLE, caller & ((1 << _SERIAL_BITS) - 1), True))

    def _unthrottle(self, queue: CallQueue) -> None:
        """Callers of ``queue`` back down to ``CALLER_QUEUE_LOW``: read them again
        once no actor holds too many of their calls."""
        for caller in queue.below:
            n = self.head.throttled.pop(caller, 0) - 1
            if n > 0:
                self.head.throttled[caller] = n
                continue
            rank = caller >> _SERIAL_BITS
            if rank in self.head.workers:
                self.head.send(rank, (m.THROTTLE, caller & ((1 << _SERIAL_BITS) - 1), False))
        queue.below.clear()

    def actor_died(self, actor_id: int, reason: str, allow_restart: bool) -> None:
        actor = self.head.actors.get(actor_id)
        if actor is None:
            return
        if allow_restart and actor.state not in HOLDING:
            return  # it has no process that could have died (a stale report)
        restart = allow_restart and (actor.max_restarts < 0
                                     or actor.restarts < actor.max_restarts)
        msg = f"actor {actor.class_name} died: {reason}"
        actor.last_death = reason
        lost = list(actor.inflight.values())
        actor.inflight.clear()
        requeue = []
        failed = []
        for task in lost:
            if task.state is not RUNNING:
                continue
            task.placed = False
            if restart and task.retries_left != 0:
                task.retries_left -= 1
                self.head.task_events.set_task_state(task, PENDING)
                requeue.append(task)
                continue
            failed.append(task)
        actor.queue.put_back(requeue)
        # The actor leaves ALIVE before the lost calls fail. Failing one fails the
        # queued calls that take its result and lets the calls behind those go:
        # dispatched while the actor was still ALIVE, they went to the process
        # that is gone and stayed RUNNING for good.
        if restart:
            actor.restarts += 1
            self._set_actor_state(actor, A_RESTARTING)
        else:
            actor.error = reason
            self._set_actor_state(actor, A_DEAD)
        for task in failed:
            self.head.task_events.fail_actor_call(task, ActorDiedError(
                f"{msg}; the call {task.spec[m.T_NAME]} was lost"
                + ("; the actor is being restarted" if restart else "")))
        if restart:
            logger.warning("hpc_ray: restarting actor %s (restart %d of %s): %s",
                           actor.class_name, actor.restarts,
                           "unlimited" if actor.max_restarts < 0 else actor.max_restarts, reason)
            self.place_actor(actor)
            return
        self.retry_pending_actors()

    def kill_actor(self, actor_id: int, no_restart: bool = True,
                   reason: str = "killed by kill()", graceful: bool = False) -> None:
        """``graceful``: the process exits as Python does (atexit handlers run), as
        after ``__ray_terminate__``; else it is killed at once, as ``kill()`` does."""
        actor = self.head.actors.get(actor_id)
        if actor is None:
            return
        if actor.rank >= 0 and actor.state in HOLDING:
            self.head.send(actor.rank, (m.KILL_ACTOR, actor_id, no_restart, graceful))
        if no_restart:
            actor.max_restarts = 0
            self.actor_died(actor_id, reason, allow_restart=False)

    def handles_gone(self, lifetime_oid: int) -> None:
        """The last handle to an actor went out of scope (its lifetime token was freed)."""
        actor_id = self.head.lifetimes.pop(lifetime_oid, None)
        actor = self.head.actors.get(actor_id) if actor_id is not None else None
        if actor is not None:
            actor.unreferenced = True
            self.end_if_unreferenced(actor)

    def end_if_unreferenced(self, actor: ActorEntry) -> None:
        """An actor no handle reaches ends once it has no call queued or running."""
        if actor.unreferenced and not actor.inflight and \
                not any(t.state is PENDING for t in actor.queue):
            self.kill_actor(actor.actor_id, reason="its last handle went out of scope",
                            graceful=True)
