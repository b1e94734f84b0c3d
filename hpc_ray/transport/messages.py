"""Control message kinds and their fields: one ``NamedTuple`` per kind.

On the wire a message is a plain tuple ``(kind, field, ...)`` and messages
travel in lists, one list per MPI send or socket frame (measured: a pickled
slotted dataclass costs about 3x a tuple on the task hot path). The tuple's
fields are those of the kind's ``NamedTuple`` below, in order, ``kind`` first;
producers on hot paths build the plain tuple, others may build the named one
(it pickles as the same tuple when sent through ``tuple(msg)``).

Reading a message: dispatch on ``msg[0]`` (the ``kind`` field), then unpack the
tuple into names that are exactly the kind's field names (as fast as indexing)::

    _, task_id, results, contained, t_start, t_end, pid = msg

A handler that passes every field on, in order, calls a function whose
parameters are named as the fields, with ``*msg[1:]``; code that treats several
kinds alike unpacks the leading fields they share (``_, req_id = msg[:2]``). No
handler reads a field by its position.

``SCHEMA`` maps each kind to its type. Each type's docstring names who sends it
and who handles it. With ``HPC_RAY_CHECK_MESSAGES=1`` every message a process
receives (a rank over MPI and from its executors; an executor from its rank, the
driver and its callers; a caller from its actors) is checked against ``SCHEMA``:
an unknown kind, a wrong field count or a field of the wrong type (by the
annotations below: a ``float`` field takes an ``int`` too, ``Any`` anything)
raises at once, naming the kind and the field. Every multi-rank test runs that
way (``tests/conftest.py``).

Records describing values are defined in ``transport.serialization``.

TaskSpec (a list on the head, a tuple or list on the wire; positions ``T_*``)
    task_id, fn_id, fn_blob|None, name, payload, deps, return_ids, resources,
    max_retries, max_calls, actor_id|None, owner, contained
  where payload is (RAW, args) for plain-scalar positional args or a
  serialization record of ``(args, kwargs)``; deps is the list of top-level
  argument positions that are refs: ``[(position_or_key, object_id), ...]``,
  resolved to ``[(position_or_key, object_id, record), ...]`` by the head when it
  dispatches; contained lists refs nested deeper inside the arguments (kept
  alive, not resolved). On dispatch the resources field carries
  ``(GPU ids, resources held)``. An actor creation spec has the actor id in
  ``actor_id`` and ``IN_RANK`` in ``max_calls`` for an actor that lives in its
  rank's own process.
"""
from __future__ import annotations

import enum
import typing
from typing import Any, NamedTuple

from .. import _config


class Msg(enum.IntEnum):
    EXECUTE = 1
    REPLY = 2
    CREATE_ACTOR = 3
    KILL_ACTOR = 4
    RUN_FUNCTION = 5
    SHUTDOWN = 6
    GROUP_CREATE = 7
    STEAL = 8
    THROTTLE = 9
    TASK_DONE = 10
    TASK_FAILED = 11
    PROCESS_ENDED = 12
    SUBMIT = 13
    PUT = 14
    GET = 15
    WAIT = 16
    WAIT_NOW = 17
    ALLOC = 18
    HOLD = 19
    RELEASE = 20
    BLOCKED = 21
    ADD_LOCATION = 22
    ACTOR_READY = 23
    ACTOR_DIED = 24
    CONTROL_CALL = 25
    PROFILE = 26
    RETURNED = 27
    STOPPED = 28
    FREE_BLOCKS = 29
    FETCH = 30
    COLLECTIVE_OP = 31
    LOG = 32
    DIRECT_HELLO = 33
    UNBLOCK = 34
    LEND = 35
    UNPIN = 36
    DIRECT_DONE = 37
    DEEP = 38
    EXEC_READY = 40
    ALIVE = 41


# TaskSpec field positions (the wire form is a plain tuple).
T_ID, T_FN, T_BLOB, T_NAME, T_PAYLOAD, T_DEPS, T_RETURNS, T_RES, T_RETRIES, \
    T_MAX_CALLS, T_ACTOR, T_OWNER, T_CONTAINED = range(13)

#: A record kind only the head hands out: "copy this object from another node
#: into the room already reserved on yours": (FETCH_PLAN, src_rank, src_record, local_record).
FETCH_PLAN = 4

#: max_calls of an actor creation spec: the actor lives in its rank's process.
IN_RANK = -7

# Plain ints for the hot path: an IntEnum member pickles as a global lookup.
EXECUTE, REPLY, CREATE_ACTOR, KILL_ACTOR, RUN_FUNCTION, SHUTDOWN = (
    Msg.EXECUTE.value, Msg.REPLY.value, Msg.CREATE_ACTOR.value, Msg.KILL_ACTOR.value,
    Msg.RUN_FUNCTION.value, Msg.SHUTDOWN.value)
TASK_DONE, TASK_FAILED, PROCESS_ENDED, SUBMIT, PUT, GET, WAIT, WAIT_NOW, ALLOC, \
    HOLD, RELEASE, BLOCKED, ADD_LOCATION, ACTOR_READY, ACTOR_DIED, CONTROL_CALL, \
    PROFILE = (k.value for k in (
        Msg.TASK_DONE, Msg.TASK_FAILED, Msg.PROCESS_ENDED, Msg.SUBMIT, Msg.PUT,
        Msg.GET, Msg.WAIT, Msg.WAIT_NOW, Msg.ALLOC, Msg.HOLD, Msg.RELEASE,
        Msg.BLOCKED, Msg.ADD_LOCATION, Msg.ACTOR_READY, Msg.ACTOR_DIED,
        Msg.CONTROL_CALL, Msg.PROFILE))
FETCH = Msg.FETCH.value
GROUP_CREATE = Msg.GROUP_CREATE.value
STEAL = Msg.STEAL.value
THROTTLE = Msg.THROTTLE.value
RETURNED = Msg.RETURNED.value
STOPPED = Msg.STOPPED.value
FREE_BLOCKS = Msg.FREE_BLOCKS.value
COLLECTIVE_OP = Msg.COLLECTIVE_OP.value
EXEC_READY = Msg.EXEC_READY.value
LOG = Msg.LOG.value
DIRECT_HELLO = Msg.DIRECT_HELLO.value
UNBLOCK = Msg.UNBLOCK.value
LEND = Msg.LEND.value
DEEP = Msg.DEEP.value
UNPIN = Msg.UNPIN.value
DIRECT_DONE = Msg.DIRECT_DONE.value
ALIVE = Msg.ALIVE.value


# --- head (rank 0) -> worker rank (and the rank passes some on to an executor) -----

class Execute(NamedTuple):
    """Run a task or actor call. Head (``Placement._dispatch``,
    ``ActorLifecycle.dispatch_actor``) -> ``WorkerLoop.on_control`` -> executor
    ``Executor.handle``. (A caller on the actor's host may send its calls
    straight to the actor instead: ``peer_calls``.)"""
    kind: int
    spec: list | tuple


class Reply(NamedTuple):
    """Answer to GET/WAIT/ALLOC/CONTROL_CALL. Head (``Head._reply_get``,
    ``_check_remote_wait``, ``HeadLoop._on_alloc``/``_on_control``,
    ``collective_join``) -> ``WorkerLoop._on_reply`` -> the executor's request."""
    kind: int
    req_id: int
    payload: Any


class CreateActor(NamedTuple):
    """Start an actor from its creation spec. Head (``ActorLifecycle.place_actor``) ->
    ``WorkerLoop.on_control`` -> executor ``Executor.handle``."""
    kind: int
    spec: list | tuple


class KillActor(NamedTuple):
    """End an actor's process. Head (``Head.kill_actor``) -> ``WorkerLoop.on_control``."""
    kind: int
    actor_id: int
    no_restart: bool
    #: True (its last handle is gone): the executor is sent SHUTDOWN and exits
    #: after Python's clean-up (``executor_exit``); False (``kill()``): SIGKILL.
    graceful: bool


class RunFunction(NamedTuple):
    """Run a pickled function on every executor. Head
    (``Head.run_function_on_all_workers``) -> ``WorkerLoop.on_control`` -> executors."""
    kind: int
    blob: bytes


class Shutdown(NamedTuple):
    """The last message a rank gets. Head (``DriverContext.shutdown``) ->
    ``WorkerLoop.on_control``; a rank -> its executors (``WorkerLoop.close``)."""
    kind: int


class GroupCreate(NamedTuple):
    """Make a collective group's communicator. Head (control ``collective_create``) ->
    ``WorkerLoop.on_control``."""
    kind: int
    name: str
    mpi_ranks: list
    actor_ids: list   #: the members' actors, in ``mpi_ranks``' order


class Steal(NamedTuple):
    """Give back up to ``n`` tasks not started yet. Head (``Head._rebalance``) ->
    ``WorkerLoop.on_control``, answered with RETURNED."""
    kind: int
    n: int


class Throttle(NamedTuple):
    """Stop (``on``) or go back to reading the requests of the rank's executor
    ``serial``: it has queued too many calls at some actor. Head
    (``ActorLifecycle.throttle``) -> ``WorkerLoop.on_control``."""
    kind: int
    serial: int
    on: bool


# --- worker rank (or an executor, through its rank) -> head --------------------------

class TaskDone(NamedTuple):
    """A task's results. Executor (``Executor.execute``) -> rank -> ``Head.task_done``."""
    kind: int
    task_id: int
    results: list
    contained: list | tuple | None
    t_start: float
    t_end: float
    pid: int


class TaskFailed(NamedTuple):
    """A task raised. Executor (``Executor.execute``), or a rank for a call to a
    gone actor -> ``Head.task_failed``."""
    kind: int
    task_id: int
    error: tuple
    t_start: float
    t_end: float
    pid: int


class ProcessEnded(NamedTuple):
    """An executor process is gone, crashed or not: everything it had started at the
    head, ended there in one transition. Rank (``WorkerState.executor_ended``) ->
    ``Head.process_ended``."""
    kind: int
    pid: int
    holds: list            #: object ids it held (one entry per hold)
    blocks: list           #: store blocks it was given and never sealed: [(offset, size)]
    requests: list         #: its gets, waits and calls still unanswered (rank req ids)
    lent: int              #: CPUs it had lent while waiting in get()
    task_ids: list         #: tasks lost with it (crashed only)
    exitcode: int | None         #: its exit status if it crashed; None if it ended cleanly
    actor_id: int | None         #: its actor, if it crashed hosting one


class Submit(NamedTuple):
    """A task submitted from inside a task. Executor -> rank -> ``Head.submit``."""
    kind: int
    spec: list | tuple


class Put(NamedTuple):
    """A value stored by a process (which then holds it). Executor -> rank ->
    ``HeadLoop._on_put``."""
    kind: int
    object_id: int
    record: tuple
    contained: list | tuple | None


class Get(NamedTuple):
    """Reply when all are ready. Executor -> rank (request id renumbered) ->
    ``Head.remote_get``."""
    kind: int
    req_id: int
    object_ids: list


class Wait(NamedTuple):
    """Reply when ``num_returns`` are ready. Executor -> rank -> ``Head.remote_wait``."""
    kind: int
    req_id: int
    object_ids: list
    num_returns: int


class WaitNow(NamedTuple):
    """A WAIT timed out: reply with what is ready. Executor -> rank ->
    ``Head.remote_wait_now``."""
    kind: int
    req_id: int


class Alloc(NamedTuple):
    """Room for ``size`` bytes in this node's store. Executor -> rank ->
    ``HeadLoop._on_alloc``."""
    kind: int
    req_id: int
    size: int


class Hold(NamedTuple):
    """A process took refs. Executor -> rank (counted per executor) -> ``Head.hold``."""
    kind: int
    object_ids: list


class Release(NamedTuple):
    """A process dropped refs. Executor, or a rank for a dead executor
    (``WorkerState.executor_ended``) -> ``Head.release``."""
    kind: int
    object_ids: list


class Blocked(NamedTuple):
    """Executors blocked in get (+1/-1). Executor or rank -> ``Head.blocked``."""
    kind: int
    delta: int


class Unblock(NamedTuple):
    """The executor's get() that lent its CPU has its answer: no more nested
    tasks for that level. Executor -> ``WorkerLoop.on_executor``, which answers
    with a REPLY: every nested task the rank sent before it heard arrives ahead
    of that reply. The executor runs them, then sends BLOCKED -1 (the CPU comes
    back to the head then)."""
    kind: int
    req_id: int


class Deep(NamedTuple):
    """The executor's main thread waits in get() with ``executor.MAX_NESTED``
    tasks on its stack (+1), or no longer does (-1): its CPU is lent as with
    BLOCKED, but it runs no more nested tasks, so the rank runs them in another
    executor. Executor -> ``WorkerLoop.on_executor`` (BLOCKED to the head)."""
    kind: int
    delta: int


class Lend(NamedTuple):
    """A thread of the executor's task other than the main one waits in get()
    (+1), or no longer does (-1): the task's CPU may run another task meanwhile,
    in another executor (the main thread is busy). Executor ->
    ``WorkerLoop.on_executor`` (BLOCKED to the head)."""
    kind: int
    delta: int


class AddLocation(NamedTuple):
    """An object was copied to this node. Rank -> ``Head.add_location``."""
    kind: int
    object_id: int
    record: tuple


class ActorReady(NamedTuple):
    """The constructor returned. Executor -> rank -> ``Head.actor_ready``."""
    kind: int
    actor_id: int
    pid: int


class ActorDied(NamedTuple):
    """An actor ended (exit, constructor error, kill). Executor or rank ->
    ``Head.actor_died``."""
    kind: int
    actor_id: int
    reason: str
    allow_restart: bool


class ControlCall(NamedTuple):
    """get_actor, kill, cluster state, ...: ``runtime.control``. Executor -> rank ->
    ``HeadLoop._on_control``."""
    kind: int
    req_id: int
    name: str
    args: tuple


class Profile(NamedTuple):
    """Timeline spans recorded in an executor. Executor -> rank -> ``Head.add_events``."""
    kind: int
    events: list


class Returned(NamedTuple):
    """Tasks given back before they started: a rank's answer to STEAL (rank ->
    ``Head.tasks_returned``), or tasks an executor was sent nested while its
    main thread waits at ``MAX_NESTED`` (executor -> ``WorkerLoop.on_executor``,
    which runs them in another executor)."""
    kind: int
    task_ids: list


class Stopped(NamedTuple):
    """After SHUTDOWN: the rank's last message. Rank (``WorkerLoop.close``) ->
    ``HeadLoop._on_stopped``."""
    kind: int


class Alive(NamedTuple):
    """A worker rank on another node than rank 0's is alive, every
    ``node_watch.HEARTBEAT`` seconds. Rank (``WorkerLoop.run``) ->
    ``NodeWatch.hear``."""
    kind: int


class Log(NamedTuple):
    """Whole lines executors printed: [(pid, is_stderr, [line, ...])] (log_to_driver).
    Rank (``WorkerLoop._logs_out``) -> ``HeadLoop._on_log``, printed on rank 0."""
    kind: int
    entries: list


class FreeBlocks(NamedTuple):
    """Store blocks to give back: [(offset, size)]. Those a dead executor was given
    and never sealed: rank (``WorkerState.executor_ended``) -> ``Head.free_blocks``; a
    collective scratch block an executor replaced (``collective_buffers``):
    executor -> ``WorkerLoop.on_executor`` -> head."""
    kind: int
    blocks: list


# --- between ranks of different nodes, and executor -> its rank only ------------------

class Fetch(NamedTuple):
    """Send me these store bytes (they follow on ``Tag.OBJECT_DATA``). Rank
    (``Fetcher.start``) -> the rank serving the node (``Fetcher.serve``)."""
    kind: int
    object_id: int
    offset: int
    size: int


class CollectiveOp(NamedTuple):
    """A collective the rank runs for its executor. Executor -> ``WorkerLoop.on_executor``
    (``collective.rank_run_op``), answered with REPLY."""
    kind: int
    req_id: int
    group: str
    op: str
    args: tuple


class ExecReady(NamedTuple):
    """The executor finished start-up. Executor (``Executor.serve``) ->
    ``WorkerLoop.on_executor``."""
    kind: int
    pid: int


class DirectHello(NamedTuple):
    """The first frame on a direct-call socket (``transport/direct.py``): which actor
    process answers. Actor's ``PeerServer`` -> the caller's ``PeerCaller``."""
    kind: int
    actor_id: int
    pid: int
    rank: int


class Unpin(NamedTuple):
    """The caller of a direct call now holds the refs nested in its result itself:
    the actor may drop the pins it kept on them (``runtime/peer_calls.py``).
    Caller's executor -> the actor's executor, over their direct socket."""
    kind: int
    task_id: int


class DirectDone(NamedTuple):
    """Direct calls a task or actor made and saw answered (``runtime/peer_calls.py``),
    for ``tasks()`` and the timeline: a pickled list of summaries as the head's
    history keeps them. Executor (``ExecutorContext.flush``, batched) -> rank
    (unread) -> ``Head.direct_report``."""
    kind: int
    summaries: bytes


SCHEMA: dict[int, type] = {
    EXECUTE: Execute, REPLY: Reply, CREATE_ACTOR: CreateActor, KILL_ACTOR: KillActor,
    RUN_FUNCTION: RunFunction, SHUTDOWN: Shutdown, GROUP_CREATE: GroupCreate, STEAL: Steal,
    THROTTLE: Throttle,
    TASK_DONE: TaskDone, TASK_FAILED: TaskFailed, PROCESS_ENDED: ProcessEnded,
    SUBMIT: Submit, PUT: Put, GET: Get, WAIT: Wait, WAIT_NOW: WaitNow, ALLOC: Alloc,
    HOLD: Hold, RELEASE: Release, BLOCKED: Blocked, ADD_LOCATION: AddLocation,
    ACTOR_READY: ActorReady, ACTOR_DIED: ActorDied, CONTROL_CALL: ControlCall,
    PROFILE: Profile, RETURNED: Returned, STOPPED: Stopped, FREE_BLOCKS: FreeBlocks,
    FETCH: Fetch, COLLECTIVE_OP: CollectiveOp, EXEC_READY: ExecReady, LOG: Log,
    DIRECT_HELLO: DirectHello, UNBLOCK: Unblock, LEND: Lend, DEEP: Deep, UNPIN: Unpin,
    DIRECT_DONE: DirectDone, ALIVE: Alive,
}

#: Kinds the head handles (``HeadLoop``'s handler table must cover exactly these).
TO_HEAD = frozenset((TASK_DONE, TASK_FAILED, PROCESS_ENDED, SUBMIT, PUT, GET, WAIT,
                     WAIT_NOW, ALLOC, HOLD, RELEASE, BLOCKED, ADD_LOCATION, ACTOR_READY,
                     ACTOR_DIED, CONTROL_CALL, PROFILE, RETURNED, STOPPED, FREE_BLOCKS,
                     FETCH, LOG, DIRECT_DONE, ALIVE))
#: Kinds no reply is due after (reports for the history): a loop that received
#: only these stays in its idle back-off (``wait.Backoff``). Callers of an actor
#: send DIRECT_DONE every few hundred calls; counted as activity, they kept the
#: head and the ranks polling every 20 us for as long as the calls went on.
NO_REPLY_DUE = frozenset((DIRECT_DONE, PROFILE, ALIVE))


def reply_due(msgs) -> bool:
    """Whether a reply may be due after these messages (see ``NO_REPLY_DUE``)."""
    return any(msg[0] not in NO_REPLY_DUE for msg in msgs)

#: Kinds a worker rank handles from MPI (``WorkerLoop.on_control``).
TO_RANK = frozenset((EXECUTE, REPLY, CREATE_ACTOR, KILL_ACTOR, RUN_FUNCTION, SHUTDOWN,
                     GROUP_CREATE, STEAL, THROTTLE, FETCH))

#: Check every received message against SCHEMA (a debugging aid; off by default).
CHECKING = bool(_config.os_environ_get("CHECK_MESSAGES", 0, int))


class MessageError(ValueError):
    """A message that does not match its kind's schema: a bug in its producer."""


def field_types(schema: type) -> tuple:
    """``(field, accepted types)`` for each field of ``schema`` after ``kind``, from
    its annotations; ``None`` accepts anything (``Any``)."""
    types = _FIELD_TYPES.get(schema)
    if types is None:
        hints = typing.get_type_hints(schema)
        types = []
        for name in schema._fields[1:]:
            hint = hints[name]
            accepted = None if hint is Any else (typing.get_args(hint) or (hint,))
            if accepted is not None and float in accepted:
                accepted += (int,)
            types.append((name, accepted))
        types = _FIELD_TYPES[schema] = tuple(types)
    return types


_FIELD_TYPES: dict[type, tuple] = {}


def check(msg, where: str) -> None:
    """Raise MessageError unless ``msg`` is a tuple matching its kind's schema:
    its fields, and each field's type."""
    if not isinstance(msg, tuple) or not msg:
        raise MessageError(f"{where}: a message must be a non-empty tuple, got {msg!r:.200}")
    schema = SCHEMA.get(msg[0])
    if schema is None:
        raise MessageError(f"{where}: unknown message kind {msg[0]!r}")
    if len(msg) != len(schema._fields):
        raise MessageError(f"{where}: {schema.__name__} has fields {schema._fields}, "
                           f"got {len(msg)} values: {msg!r:.300}")
    for (name, accepted), value in zip(field_types(schema), msg[1:]):
        if accepted is not None and not isinstance(value, accepted):
            names = " | ".join(t.__name__ for t in accepted)
            raise MessageError(f"{where}: {schema.__name__}.{name} must be {names}, got "
                               f"{type(value).__name__} {value!r:.200} in {msg!r:.300}")


def check_all(msgs, where: str) -> None:
    for msg in msgs:
        check(msg, where)
