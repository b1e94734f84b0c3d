"""A worker rank: the MPI endpoint and supervisor of its executor processes.

    head (rank 0) ──EXECUTE/REPLY/CREATE_ACTOR/KILL_ACTOR/RUN_FUNCTION/SHUTDOWN──▶ rank
    rank ──[executor messages, req ids renumbered]──▶ head
    rank ◀──FETCH──▶ ranks of other nodes (raw store bytes on Tag.OBJECT_DATA)
    rank ══ socketpair ══ executor (one per CPU for tasks, one per actor, and
                                   extras for num_cpus=0 tasks, on demand,
                                   spares for CPUs lent by a task's threads)
    rank ◀── stdout/stderr pipes ── executor; whole lines ──LOG──▶ head,
             printed on rank 0 as "(pid=P, rank=R) line" (log_to_driver)

Starting executors, passing their output on and handling their end live in
``executor_procs.py`` (``ExecutorProcesses``, a mixin of ``WorkerLoop``).

The loop never runs user code. It blocks in ``select`` on the executors' pipes
and its doorbell (``comm.Doorbell``) with a back-off timeout and polls MPI in
between: at most 1 ms apart after recent activity (up to 10 ms on a node with
more ranks than cores: ``polling_backoff``), 10 ms apart after a second of
quiet (``DEEP_CAP``). When the whole job is on one host, it raises its flag
(``comm.SleepFlags``) and sleeps as soon as it has spun a little (after a
short warm phase where a reply is due), from 1 ms doubling up to 50 ms, and
every sender rings the doorbell of a rank whose flag is up, so the message is
read at once. (On several hosts, a process on the rank's host that sends after
a pause rings.)
A dead executor (EOF on its pipe) is reported to the head with the tasks it
held and replaced.

A rank that has hosted an actor keeps one executor started ahead
(``standby``) for its next actor, as Ray's worker pool does: creating an actor
then costs no interpreter start-up. The next one starts once the last is up and
the rank's CPUs have a core to spare (``transport/idle_cores.py``); while they
stay busy it does not start, and an actor created meanwhile starts its own
executor, as with no standby (``HPC_RAY_ACTOR_STANDBY=0``: none).

Tasks that hold a CPU queue in ``queue`` and run on the rank's CPU executors,
one per CPU, so at most that many run at once (plus nested ones while an
executor waits in ``get``). A ``num_cpus=0`` task holds no CPU and does not wait
for one (as in Ray): it queues in ``zero_cpu_queue`` and runs on an extra
executor, started when none is idle (at most ``MAX_EXTRA_EXECUTORS``) and
stopped after ``cfg["extra_idle"]`` seconds without work. An extra executor's
``get`` lends no CPU, so its BLOCKED count stays on this rank.
"""
from __future__ import annotations

import collections
import itertools
import logging
import math
import os
import select
import socket
import sys
import time

from mpi4py import MPI

from .. import _config
from ..transport import messages as m
from ..transport.comm import (Backoff, Doorbell, Fetcher, Sender, control_waiting, deep_tier,
                              recv_control, tighten_timer_slack)
from ..transport.idle_cores import IdleCores
from ..transport.placement import usable_cores
from ..transport.serialization import loads
from .executor_procs import ExecutorProc, ExecutorProcesses, lends_cpu, thread_lent
from .rank_actors import DriverGone
from .rank_requests import ALLOC, CALL, GET, WAIT, RankRequests

logger = logging.getLogger(__name__)

#: Most tasks sent to an executor at once (batches amortize the pipe's cost).
EXECUTOR_BATCH = 64
#: An executor's batch of a backlog holds about this many seconds of work, at
#: each task's function's average time on the rank (``batch_length``), small
#: against the head's PREFETCH_SECONDS. Each batch costs the rank and the
#: executor a wake-up and a round trip on the pipe, which with more ranks than
#: cores were most of their CPU per tiny task (benchmarks/ranks.py).
EXECUTOR_BATCH_SECONDS = 0.002
#: A function's average counts once this many of its tasks ended on the rank:
#: a helper that returned at once the first time may wait for minutes the next.
TIMED_AFTER = 8
#: Functions whose times a rank keeps; past this many it starts afresh.
MAX_TIMED_FUNCTIONS = 1024

#: Batches sent to the head and not yet received by it, at most. Beyond this the
#: rank stops reading its executors' requests until the head catches up, so
#: executors that flood the head (a task looping on ``actor.f.remote()``) are
#: slowed to what the head can take, and what the head has to read before the
#: driver's own messages stays bounded.
HEAD_WINDOW = 4
#: How long an idle rank whose window is full waits before it looks again: from
#: MIN, doubling while the head stays behind, up to MAX. A fixed 0.1 ms made 16
#: ranks on 2 cores 3.5x slower than 1 ms did (20,000 tasks, benchmarks/ranks.py):
#: ranks kept polling while the head, behind, needed the cores.
WINDOW_WAIT_MIN = 1e-4
WINDOW_WAIT_MAX = 5e-3

#: A standby executor is due (``WorkerLoop._start_standby``): it starts once the
#: rank's CPUs had STANDBY_SPARE idle cores on average over a look of
#: STANDBY_LOOK seconds, and not before, however long that takes. Forced after
#: 5 s of busy cores, its interpreter start-up (~0.4 s of CPU) took the cores from
#: the actors that had been busy since: two driver threads calling two actors
#: on 2 cores ran 35-45% fewer calls a second over the half second it started
#: in (benchmarks/README.md, "Stop 33").
STANDBY_LOOK = 0.1
STANDBY_SPARE = 1.0

#: Most extra executors a rank runs at once for num_cpus=0 tasks. Each is a
#: Python process (tens of MB); beyond this many, num_cpus=0 tasks wait for one
#: to be idle, or run nested in one that waits in ``get``.
MAX_EXTRA_EXECUTORS = 32

#: Default of ``cfg["extra_idle"]`` (``HPC_RAY_EXTRA_EXECUTOR_IDLE``): seconds an
#: extra executor waits for another num_cpus=0 task before it stops. Longer keeps
#: a process (tens of MB) around; shorter pays a start-up (~0.3 s) more often.
EXTRA_IDLE_DEFAULT = 10.0

#: Zero-timeout polls after activity on a rank of a node with more ranks than
#: cores (``polling_backoff``): each is a pass of the loop (~10 us of CPU) that
#: a rank with work to do on the same core would have used.
OVERSUBSCRIBED_SPINS = 2
#: The longest an idle rank of such a node sleeps between polls of MPI: the
#: delay a message to a long-idle rank may see (messages from its executors wake
#: it at once).
OVERSUBSCRIBED_CAP = 0.01
#: A rank with no activity for DEEP_AFTER seconds polls MPI only every DEEP_CAP
#: seconds; when the whole job is on its host, after ``comm.DEEP_AFTER_ONE_HOST``
#: and every ``comm.DEEP_CAP_ONE_HOST`` (``HPC_RAY_IDLE_POLL_MS`` sets the cap
#: for both). An idle pass costs 50-150 us of CPU on this kind of VM, most of it
#: the wake-up itself: at 1 ms, 5-15% of a core per idle rank. A sender on the
#: same host rings its doorbell first (``comm.Doorbell``); a message from
#: another host waits up to DEEP_CAP.
DEEP_AFTER = 1.0
DEEP_CAP = 0.01
IDLE_POLL_MS = _config.os_environ_get("IDLE_POLL_MS", None, float)


def polling_backoff(ranks_on_node: int, cores: int, one_host: bool = False,
                    flagged: bool = False) -> Backoff:
    """The back-off of a worker rank's loop.

    With a core to spare for each rank (rank 0 drives, mostly waiting) the loop
    polls MPI every 20 us for 10 ms after activity (``Backoff.warm``): the next
    task of a request/reply exchange is due within a round trip. With more
    ranks than that on the node, every rank polling that fast after each task
    keeps the cores busy with polls, and the ranks and executors with work wait
    for a core (20,000 tiny tasks on 2 cores: 8 ranks slower than 3): there the
    loop spins a little, then sleeps with a doubling back-off at once, and an
    idle rank sleeps longer (up to ``OVERSUBSCRIBED_CAP``) the more ranks share
    each core, so the node's idle ranks together poll about as often as one
    rank per core would (15 idle ranks on 2 cores used 75% of a core at 1 ms).
    Either way a rank idle for DEEP_AFTER sleeps up to DEEP_CAP; when every
    rank of the job is on its host (``one_host``: all senders ring its
    doorbell), after ``comm.DEEP_AFTER_ONE_HOST``, up to ``comm.DEEP_CAP_ONE_HOST``
    (``comm.deep_tier``). With the job's sleep flags (``flagged``: every sender
    rings it whenever it sleeps, ``comm.SleepFlags``) it sleeps as soon as its
    spins and a warm phase of ``comm.FLAGGED_WARM`` (none on a crowded node)
    are done, from ``comm.FLAGGED_FIRST`` doubling up to that cap.
    """
    deep_after, deep_cap = deep_tier(one_host, DEEP_AFTER, DEEP_CAP, IDLE_POLL_MS)
    if ranks_on_node > cores + 1:
        default = Backoff()
        cap = min(OVERSUBSCRIBED_CAP, default.cap * ranks_on_node / max(cores, 1))
        return Backoff(cap=cap, spin_limit=OVERSUBSCRIBED_SPINS, warm=0.0,
                       deep_after=deep_after, deep_cap=deep_cap, flagged=flagged)
    return Backoff(deep_after=deep_after, deep_cap=deep_cap, flagged=flagged)


def batch_length(fns, share: int, fn_seconds: dict) -> int:
    """How many queued tasks (``fns``: their function ids, in queue order) an idle
    executor takes, ``share`` being its part of the queue.

    What an executor holds cannot be given back to the head for an idle rank, so
    by default only a backlog is batched: an eighth of the share (a short queue
    goes one task at a time). A function with an average time here
    (``fn_seconds``, see ``FunctionTimes``) is batched by time instead: up to
    the whole share, about EXECUTOR_BATCH_SECONDS of work. A function with none
    counts as an eighth of that time."""
    unknown = EXECUTOR_BATCH_SECONDS / max(1, share // 8)
    spent = 0.0
    n = 0
    for fn in fns:
        if n >= share:
            break
        cost = fn_seconds.get(fn, unknown)
        if n and spent + cost > EXECUTOR_BATCH_SECONDS:
            break
        spent += cost
        n += 1
    return n


class FunctionTimes:
    """How long each function's tasks ran on this rank: ``seconds`` holds a moving
    average per function once TIMED_AFTER of its tasks ended."""

    __slots__ = ("seconds", "warming")

    def __init__(self) -> None:
        self.seconds: dict = {}
        #: function id -> (tasks ended, their total seconds), before TIMED_AFTER.
        self.warming: dict = {}

    def record(self, fn, took: float) -> None:
        seconds = self.seconds
        avg = seconds.get(fn)
        if avg is not None:
            seconds[fn] = 0.9 * avg + 0.1 * took
            return
        n, total = self.warming.get(fn, (0, 0.0))
        n += 1
        total += took
        if n < TIMED_AFTER:
            if len(self.warming) >= MAX_TIMED_FUNCTIONS:
                self.warming.clear()
            self.warming[fn] = (n, total)
            return
        self.warming.pop(fn, None)
        if len(seconds) >= MAX_TIMED_FUNCTIONS:
            seconds.clear()
        seconds[fn] = total / n


#: Executors' requests the rank passes on to the head (``rank_requests.py``), and
#: what each is called there.
_REQUEST_KINDS = {m.GET: GET, m.WAIT: WAIT, m.ALLOC: ALLOC, m.CONTROL_CALL: CALL}


class WorkerLoop(ExecutorProcesses):
    def __init__(self, comm: MPI.Comm, rank: int, node: int, arena, cfg: dict,
                 flags=None) -> None:
        self.comm = comm
        #: The job's ``comm.SleepFlags`` (one-host jobs), else None.
        self.flags = flags
        self.rank = rank
        self.node = node
        self.arena = arena
        self.cfg = cfg
        cpus = cfg["resources"].get("CPU", 1)
        self.cpus = max(1, int(round(cpus))) if cpus else 0
        #: Seconds an extra executor may stay idle before it is stopped.
        idle = cfg.get("extra_idle")
        self.extra_idle = EXTRA_IDLE_DEFAULT if idle is None else idle
        self.sender = Sender(comm, cfg.get("session_id"), flags)
        self.fetcher = Fetcher(comm, self.sender, arena)
        self.out: list = []
        self.queue: collections.deque = collections.deque()
        self.zero_cpu_queue: collections.deque = collections.deque()
        self.executors: list[ExecutorProc] = []
        self.extras: list[ExecutorProc] = []
        self.actors: dict[int, ExecutorProc] = {}
        #: An executor started ahead for the rank's next actor (0 or 1 of them),
        #: once the rank has hosted one: creating an actor then costs no
        #: interpreter start-up (~0.5 s here), as in Ray's worker pool.
        self.standby: list[ExecutorProc] = []
        self.actor_standby = bool(cfg.get("actor_standby", True))
        #: Whether the next standby is due, when the rank last looked at its
        #: idle cores for it, and what reads them.
        self.standby_due = False
        self.standby_looked = 0.0
        self.idle_cores: IdleCores | None = None
        #: CPUs the actors in ``actors`` hold: CPU tasks run on the rest.
        self.actor_cpus = 0
        #: Executors' requests to the head, renumbered (``rank_requests.py``).
        self.requests = RankRequests()
        self.serials = itertools.count(1)
        self.run_functions: list[bytes] = []
        self.fn_blobs: dict = {}
        self.fn_times = FunctionTimes()
        self.stop = False
        self.driver_gone = False
        self.deferred: list = []          # messages that arrived during an in-rank call
        #: actor id -> its calls held back behind one whose arguments are being fetched.
        self.fetching: dict[int, collections.deque] = {}
        self.rank_ctx = None              # API context of in-rank actors, made on demand
        self.groups: dict = {}            # collective group name -> (comm, rank in group)
        #: Serials of executors whose requests are not read now (THROTTLE).
        self.throttled: set[int] = set()
        #: Collective groups: name -> the member executor here (None: an in-rank
        #: actor); name -> why it is broken; headers posted for gone members.
        self.group_owners: dict = {}
        self.broken_groups: dict[str, str] = {}
        self.abandoned: list = []
        self.collective_staging = None    # ordinary actors' tensors here during a collective
        self.driver_pid = cfg.get("driver_pid") if cfg.get("driver_host") == socket.gethostname() else None
        #: Executors' prints go to the driver (Ray's log_to_driver); otherwise they
        #: go wherever this rank's own output goes.
        self.log_to_driver = cfg.get("log_to_driver", True)
        #: Lines read from executors and not yet sent: [(pid, is stderr, [lines])].
        self.logs: list = []

    # --- messages from the head and other ranks ---------------------------------

    def on_control(self, src: int, msg: tuple) -> None:
        kind = msg[0]
        if kind == m.EXECUTE:
            spec = msg[1]
            if spec[m.T_BLOB] is not None:
                self.fn_blobs[spec[m.T_FN]] = spec[m.T_BLOB]
            if spec[m.T_ACTOR] is not None:
                self._actor_call(spec)
            else:
                self._after_fetches(spec, self._enqueue)
        elif kind == m.REPLY:
            self._on_reply(msg)
        elif kind == m.CREATE_ACTOR:
            spec = msg[1]
            if spec[m.T_BLOB] is not None:
                self.fn_blobs[spec[m.T_FN]] = spec[m.T_BLOB]
            if spec[m.T_MAX_CALLS] == m.IN_RANK:
                self._after_fetches(spec, self._start_rank_actor)
            else:
                self._after_fetches(spec, self._start_actor)
        elif kind == m.KILL_ACTOR:
            ex = self._forget_actor(msg[1])
            dropped = self.rank_ctx is not None and self.rank_ctx.drop(msg[1])
            if ex is not None:
                self._kill(ex)
            if (ex is not None or dropped) and not msg[2]:
                self.out.append((m.ACTOR_DIED, msg[1], "killed", True))
        elif kind == m.GROUP_CREATE:
            self.create_group(msg[1], msg[2], msg[3])
        elif kind == m.STEAL:
            given = []
            while self.queue and len(given) < msg[1]:
                given.append(self.queue.pop()[m.T_ID])
            self.out.append((m.RETURNED, given))
        elif kind == m.THROTTLE:
            if msg[2]:
                self.throttled.add(msg[1])
            else:
                self.throttled.discard(msg[1])
        elif kind == m.RUN_FUNCTION:
            self.run_functions.append(msg[1])
            for ex in self.all_executors():
                ex.send([msg])
        elif kind == m.FETCH:
            self.fetcher.serve(src, msg[2], msg[3])
        elif kind == m.SHUTDOWN:
            self.stop = True

    def _after_fetches(self, spec: list, then) -> None:
        """Copy remote arguments into this node's store first, then go on."""
        deps = spec[m.T_DEPS]
        plans = [i for i, d in enumerate(deps) if d[2][0] == m.FETCH_PLAN] if deps else ()
        if not plans:
            then(spec)
            return
        state = [len(plans)]

        def done(i, oid, rec):
            deps[i] = (deps[i][0], oid, rec)
            self.out.append((m.ADD_LOCATION, oid, rec))
            state[0] -= 1
            if state[0] == 0:
                then(spec)

        for i in plans:
            pos, oid, plan = deps[i]
            self.fetcher.start(oid, plan[1], plan[2], plan[3],
                               lambda o, rec, i=i: done(i, o, rec), m.FETCH)

    def _actor_call(self, spec: list) -> None:
        """Calls reach their actor in the order they came: one whose arguments are
        being copied from another node holds back the calls behind it."""
        actor_id = spec[m.T_ACTOR]
        held = self.fetching.get(actor_id)
        if held is not None:
            held.append(spec)
        elif _needs_fetch(spec):
            self.fetching[actor_id] = collections.deque()
            self._after_fetches(spec, self._fetched_actor_call)
        else:
            self._enqueue(spec)

    def _fetched_actor_call(self, spec: list) -> None:
        self._enqueue(spec)
        actor_id = spec[m.T_ACTOR]
        held = self.fetching.pop(actor_id)
        while held:
            spec = held.popleft()
            if _needs_fetch(spec):
                self.fetching[actor_id] = held
                self._after_fetches(spec, self._fetched_actor_call)
                return
            self._enqueue(spec)

    def _enqueue(self, spec: list) -> None:
        actor_id = spec[m.T_ACTOR]
        if actor_id is not None and self.rank_ctx is not None and actor_id in self.rank_ctx.actors:
            self.rank_ctx.call(spec)
            return
        if actor_id is not None:
            ex = self.actors.get(actor_id)
            if ex is None:
                self.out.append((m.TASK_FAILED, spec[m.T_ID], _actor_gone(spec, self.rank),
                                 0.0, 0.0, 0))
                return
            ex.assigned[spec[m.T_ID]] = (False, spec)
            ex.send([(m.EXECUTE, self._ship_fn(ex, spec))])
            return
        (self.zero_cpu_queue if _no_cpu(spec) else self.queue).append(spec)

    def _start_actor(self, spec: list) -> None:
        if self.standby and self.standby[-1].proc.poll() is None:
            # (One that died stays listed until its EOF is read: on_executor_died.)
            ex = self.standby.pop()
            ex.actor_id = spec[m.T_ACTOR]
            if ex.ready:
                self._refill_standby()
        else:
            ex = self.spawn(actor_id=spec[m.T_ACTOR])
        self.actors[spec[m.T_ACTOR]] = ex
        ex.cpus = spec[m.T_RES][1].get("CPU", 0)
        self.actor_cpus += ex.cpus
        ex.send([(m.CREATE_ACTOR, self._ship_fn(ex, spec))])

    def _refill_standby(self) -> None:
        """The next actor's executor is due, once the last one is up: started
        beside it, the two interpreters' start-ups would share the cores. The
        loop starts it when the cores have time to spare (``_start_standby``)."""
        if self.actor_standby and not self.standby and not self.stop \
                and not self.standby_due:
            self.standby_due = True
            self.standby_looked = time.monotonic()
            if self.idle_cores is None:
                self.idle_cores = IdleCores()
            self.idle_cores.since_last()   # the first look: where the next one counts from

    def _start_standby(self, now: float) -> None:
        """Start the due standby executor if the last STANDBY_LOOK had a core to
        spare (or where the rank cannot tell)."""
        if now - self.standby_looked < STANDBY_LOOK:
            return
        self.standby_looked = now
        idle = self.idle_cores.since_last()
        if idle is not None and idle < STANDBY_SPARE:
            return
        self.standby_due = False
        if not self.stop:   # (due only while there was none: nothing else starts one)
            self.standby.append(self.spawn())

    def _forget_actor(self, actor_id: int) -> ExecutorProc | None:
        ex = self.actors.pop(actor_id, None)
        if ex is not None:
            self.actor_cpus -= ex.cpus
        return ex

    def _rank_context(self):
        if self.rank_ctx is None:
            from . import context
            from .rank_actors import RankContext
            self.rank_ctx = RankContext(self)
            context.set_id_prefix(self.rank, 0)
            context.set_current(self.rank_ctx)
            for path in self.cfg["sys_path"]:
                if path not in sys.path:
                    sys.path.append(path)
        return self.rank_ctx

    def _start_rank_actor(self, spec: list) -> None:
        self._rank_context().create(spec)

    def create_group(self, name: str, mpi_ranks: list[int], actor_ids: list[int]) -> None:
        """Make the communicator of a collective group (collective over its members)."""
        from . import collective_ops as collective
        owner = next((self.actors[a] for a in actor_ids if a in self.actors), None)
        collective.rank_create_group(self, name, mpi_ranks, owner)

    def _on_reply(self, msg: tuple) -> None:
        r, give_back = self.requests.answered(msg[1], msg[2])
        if give_back:
            self.out.append((m.FREE_BLOCKS, give_back))
        if r is None:
            return
        ex, req, payload = r.owner, r.req, msg[2]
        if r.kind == ALLOC:
            if payload[1] is not None:
                ex.unsealed[payload[1]] = r.ids
        elif r.kind == GET and any(rec[0] == m.FETCH_PLAN for rec in payload):
            payload = list(payload)
            todo = [i for i, rec in enumerate(payload) if rec[0] == m.FETCH_PLAN]
            state = [len(todo)]

            def done(i, oid, rec):
                payload[i] = rec
                self.out.append((m.ADD_LOCATION, oid, rec))
                state[0] -= 1
                if state[0] == 0 and not ex.gone:
                    ex.send([(m.REPLY, req, payload)])

            for i in todo:
                plan = payload[i]
                self.fetcher.start(r.ids[i], plan[1], plan[2], plan[3],
                                   lambda o, rec, i=i: done(i, o, rec), m.FETCH)
            return
        ex.send([(m.REPLY, req, payload)])

    # --- messages from executors -----------------------------------------------

    def on_executor(self, ex: ExecutorProc, msgs: list) -> None:
        out = self.out
        for msg in msgs:
            kind = msg[0]
            if kind == m.TASK_DONE or kind == m.TASK_FAILED:
                entry = ex.assigned.pop(msg[1], None)
                if entry is not None and ex.actor_id is None:
                    self.fn_times.record(entry[1][m.T_FN], msg[-2] - msg[-3])   # end - start
                if kind == m.TASK_DONE and ex.unsealed:
                    self._sealed(ex, msg[2])
                out.append(msg)
                if not ex.assigned:
                    ex.idle_since = time.monotonic()
                    if ex.retiring:
                        self._retire(ex)
            elif kind == m.HOLD:
                ex.took(msg[1])
                out.append(msg)
            elif kind == m.RELEASE:
                ex.gave_back(msg[1])
                out.append(msg)
            elif kind == m.PUT:
                ex.took((msg[1],))
                if ex.unsealed:
                    self._sealed(ex, (msg[2],))
                out.append(msg)
            elif kind == m.SUBMIT:
                ex.took(msg[1][m.T_RETURNS])
                out.append(msg)
            elif kind in _REQUEST_KINDS:
                rreq = self.requests.ask(ex, msg[1], _REQUEST_KINDS[kind], msg[2])
                out.append((kind, rreq) + msg[2:])
            elif kind == m.WAIT_NOW:
                rreq = self.requests.rank_id(ex, msg[1])
                if rreq is not None:
                    out.append((m.WAIT_NOW, rreq))
            elif kind == m.FREE_BLOCKS:
                # Scratch blocks (collective_buffers) the executor gave back itself.
                for off, _size in msg[1]:
                    ex.unsealed.pop(off, None)
                out.append(msg)
            elif kind == m.COLLECTIVE_OP:
                from . import collective_ops as collective
                ex.send([(m.REPLY, msg[1], collective.rank_run_op(self, *msg[2:], owner=ex))])
            elif kind == m.BLOCKED or kind == m.UNBLOCK or kind == m.LEND:
                # The head counts the CPUs lent: one per waiting main thread (each
                # nested level holds one), or one while only other threads wait.
                was = thread_lent(ex)
                main = 0
                if kind == m.LEND:
                    ex.lending += msg[1]
                else:
                    main = msg[1] if kind == m.BLOCKED else -1
                    ex.blocked += main
                delta = main + thread_lent(ex) - was
                if delta and lends_cpu(ex):
                    out.append((m.BLOCKED, delta))
                if kind == m.UNBLOCK:
                    # No nested task goes to ``ex`` after this (unless it blocks
                    # again); those sent before reach it ahead of the reply.
                    ex.send([(m.REPLY, msg[1], None)])
            elif kind == m.EXEC_READY:
                ex.ready = True
                if ex.actor_id is not None:
                    self._refill_standby()
            elif kind == m.ACTOR_DIED:
                out.append(msg)
                if self.actors.get(msg[1]) is ex:
                    self._forget_actor(msg[1])
                    ex.actor_id = None  # a clean exit: do not report a crash
            else:
                out.append(msg)

    # --- dispatch ---------------------------------------------------------------

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
        lent = sum(1 for ex in running if thread_lent(ex))
        room = max(0, math.ceil(self.cpus - self.actor_cpus - 1e-9) - len(running) + lent)
        idle = [ex for ex in ready if not ex.assigned][:room]
        if lent and len(idle) < room:
            # A CPU lent by a thread runs its task in another process: start
            # spares for the lent CPUs that no idle executor can take.
            starting = sum(1 for ex in self.executors if not ex.ready)
            for _ in range(min(room - len(idle), lent) - starting):
                spare = self.spawn()
                spare.spare = True
                self.executors.append(spare)
        return idle + [ex for ex in ready if ex.assigned and ex.blocked]

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
            ex = self.spawn()
            ex.extra = True
            self.extras.append(ex)
            self._dispatch(queue, [ex], per_executor=1)  # read once it has started
        if queue and len(self.extras) >= MAX_EXTRA_EXECUTORS:
            self._dispatch(queue, [ex for ex in self.extras if ex.ready and ex.blocked
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
                spec = self._ship_fn(ex, spec)
                tid = spec[m.T_ID]
                ex.assigned[tid] = (nested, spec)
                batch.append((m.EXECUTE, spec))
                max_calls = spec[m.T_MAX_CALLS]
                if max_calls:
                    ex.calls[spec[m.T_FN]] += 1
                    if ex.calls[spec[m.T_FN]] >= max_calls:
                        ex.retiring = True
                        break
            ex.send(batch)

    def cpus_all_running(self) -> bool:
        """Whether every CPU executor runs a task that waits on nothing here.

        Then no message from the head could start work on this rank before one
        of those tasks ends, and polling MPI every 20 us (the warm phase of the
        back-off) only takes the cores they run on: two caller tasks making
        direct actor calls ran their batches 1.6x faster with the head's and
        the ranks' warm phases off (benchmarks/README.md)."""
        if self.requests or not self.executors:
            return False
        for ex in self.executors:
            if not ex.assigned or ex.blocked or ex.lending:
                return False
        return True

    def all_executors(self):
        return self.executors + self.extras + list(self.actors.values()) + self.standby

    # --- loop -------------------------------------------------------------------

    def run(self) -> None:
        from .interrupts import ignore_in_workers
        ignore_in_workers()
        self.executors = [self.spawn() for _ in range(self.cpus)]
        tighten_timer_slack()
        comm = self.comm
        node_of = self.cfg.get("node_of") or []
        doorbell = Doorbell(self.cfg.get("session_id"), self.rank)
        bell_fd = doorbell.fileno()
        flags = self.flags if bell_fd >= 0 else None
        backoff = polling_backoff(sum(1 for n in node_of if n == self.node), usable_cores(),
                                  self.cfg["one_host"] and bell_fd >= 0, flags is not None)
        window_wait = WINDOW_WAIT_MIN
        last_check = time.monotonic()
        try:
            while not self.stop:
                active = False
                batches = recv_control(comm)
                if self.deferred:
                    batches = self.deferred + batches
                    self.deferred = []
                for src, msgs in batches:
                    active = True
                    for msg in msgs:
                        self.on_control(src, msg)
                self.dispatch()
                if self.out:
                    out, self.out = self.out, []
                    self.sender.send_sync(0, out)
                    active = True
                self.sender.progress()
                if self.fetcher.progress():
                    active = True
                timeout = 0.0 if active else backoff.next_timeout(not self.cpus_all_running(),
                                                                  not self.fetcher.moving())
                if self.standby_due:
                    self._start_standby(time.monotonic())
                    if timeout > STANDBY_LOOK:
                        timeout = STANDBY_LOOK
                flagged = not active and backoff.flagged_sleep
                # What select watches, built again every pass (the executors come
                # and go from several places), in one loop: this runs for every
                # poll of MPI, and comprehensions cost a function object each.
                by_fd: dict = {}
                pipes: dict = {}
                writers = []
                for ex in self.all_executors():
                    by_fd[ex.fd] = ex
                    for fd in ex.pipes:
                        pipes[fd] = ex
                    if ex.outbuf:
                        writers.append(ex.fd)
                readers = list(pipes)
                if bell_fd >= 0:
                    readers.append(bell_fd)
                if self.sender.unmatched_count() < HEAD_WINDOW:
                    throttled = self.throttled
                    for fd, ex in by_fd.items():
                        if not throttled or ex.serial not in throttled:
                            readers.append(fd)
                    window_wait = WINDOW_WAIT_MIN
                elif not active:
                    # The head is behind: look again soon, later the longer it stays
                    # behind (many ranks polling every 0.1 ms took the cores it needs).
                    timeout = window_wait
                    window_wait = min(WINDOW_WAIT_MAX, window_wait * 2)
                    flagged = False
                if flagged:
                    # Flag up, then one more look: a message sent before a sender
                    # could see the flag is found now (comm.SleepFlags).
                    flags.up(self.rank)
                    if control_waiting(comm):
                        timeout = 0.0
                try:
                    ready, writable, _ = select.select(readers, writers, [], timeout)
                except (OSError, ValueError):
                    ready, writable = list(pipes) + list(by_fd), []
                if flagged:
                    flags.down(self.rank)
                for fd in writable:
                    by_fd[fd].write_some()
                for fd in ready:
                    if fd == bell_fd:
                        doorbell.drain()   # a message is on its way: poll MPI at once
                        active = True
                        continue
                    if fd in pipes:
                        # Output first (select lists the pipes first): a line printed
                        # before a task returned reaches the driver before its result.
                        self.read_output(pipes[fd], fd)
                        active = True
                        continue
                    self.send_logs()
                    ex = by_fd[fd]
                    frames = ex.read_frames()
                    if frames is None:
                        self.on_executor_died(ex)
                        active = True
                        continue
                    for data in frames:
                        msgs = loads(data)
                        if m.CHECKING:
                            m.check_all(msgs, f"rank {self.rank} from executor {ex.pid}")
                        self.on_executor(ex, msgs)
                        if not active:
                            active = m.reply_due(msgs)
                if ready:
                    self.send_logs()
                    self.dispatch()
                    if self.out:
                        out, self.out = self.out, []
                        self.sender.send_sync(0, out)
                if self.rank_ctx is not None and (self.rank_ctx.out or context_released()):
                    self.rank_ctx.flush()
                if active:
                    backoff.reset()
                now = time.monotonic()
                if now - last_check > 1.0:
                    last_check = now
                    if self.driver_pid and not _alive(self.driver_pid):
                        sys.stderr.write(f"hpc_ray worker rank {self.rank}: the driver "
                                         f"(pid {self.driver_pid}) is gone; exiting\n")
                        self.driver_gone = True
                        break
                    if self.extras or len(self.executors) > self.cpus:
                        self.retire_idle_extras()
        except DriverGone as gone:
            sys.stderr.write(f"hpc_ray worker rank {self.rank}: the driver (pid {gone.args[0]}) "
                             f"is gone while an in-rank actor waited; exiting\n")
            self.driver_gone = True
        doorbell.close()
        self.close()

    def close(self) -> None:
        for ex in self.all_executors():
            try:
                ex.send([(m.SHUTDOWN,)])
            except Exception:
                pass
        deadline = time.monotonic() + 2.0
        for ex in self.all_executors():
            self._reap(ex, max(0.05, deadline - time.monotonic()))
        self.send_logs()
        if not self.driver_gone:
            # The last message to rank 0, which receives until it has one from
            # every rank: nothing this rank sent is left unreceived at MPI_Finalize.
            self.sender.send(0, self.out + [(m.STOPPED,)])
            self.out = []
        self.sender.drain(10.0)
        self.sender.close_bell()
        if self.idle_cores is not None:
            self.idle_cores.close()


def _no_cpu(spec: list) -> bool:
    """Whether a task holds no CPU (``num_cpus=0``): ``T_RES`` is (GPU ids, resources)."""
    return not spec[m.T_RES][1].get("CPU")


def _needs_fetch(spec: list) -> bool:
    deps = spec[m.T_DEPS]
    return bool(deps) and any(d[2][0] == m.FETCH_PLAN for d in deps)


def context_released() -> bool:
    from .context import released
    return bool(released)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _actor_gone(spec: list, rank: int) -> tuple:
    from ..exceptions import ActorDiedError
    from . import values
    return values.error_record(ActorDiedError(
        f"the actor for call {spec[m.T_NAME]} is no longer on rank {rank}"))
