"""Control message kinds and their fields.

On the wire a message is a tuple ``(Msg.KIND, field, ...)`` and messages travel
in lists, one list per MPI send (measured: a pickled slotted dataclass costs
about 3x a tuple on the task hot path, so the tuple is the wire form and this
module is the schema). Records describing values are defined in
``transport.serialization``.

Head (rank 0) -> worker rank
    EXECUTE        (k, task)                   run a task; see ``TaskSpec`` below
    REPLY          (k, req_id, payload)        answer to a GET/WAIT/ALLOC/CALL request
    CREATE_ACTOR   (k, actor_id, class_id, class_blob|None, payload, deps, opts)
    KILL_ACTOR     (k, actor_id, no_restart)
    RUN_FUNCTION   (k, blob)                   run on every worker's executors
    GROUP_CREATE   (k, name, mpi_ranks)        make a collective group's communicator
    STEAL          (k, n)                      give back up to n tasks not started yet
    SHUTDOWN       (k,)

Worker rank -> head
    TASK_DONE      (k, task_id, results, contained, t_start, t_end, pid)
    TASK_FAILED    (k, task_id, error_record, t_start, t_end, pid)
    WORKER_CRASHED (k, task_ids, exitcode, pid, actor_id|None)
    SUBMIT         (k, task)                   a task submitted from inside a task
    PUT            (k, object_id, record, contained)
    GET            (k, req_id, object_ids, node)   reply when all are ready
    WAIT           (k, req_id, object_ids, num_returns)
    WAIT_NOW       (k, req_id)                 timeout: reply with what is ready
    ALLOC          (k, req_id, size)           room in this node's store
    HOLD / RELEASE (k, object_ids)             a process took / dropped its refs
    BLOCKED        (k, delta)                  executors blocked in get (+1/-1)
    ADD_LOCATION   (k, object_id, record)      an object was copied to this node
    ACTOR_READY    (k, actor_id, pid)
    ACTOR_DIED     (k, actor_id, reason)
    CONTROL_CALL   (k, req_id, name, args)     get_actor, kill, cluster state, ...
    PROFILE        (k, events)                 timeline spans recorded on a worker
    RETURNED       (k, task_ids)               answer to STEAL: tasks given back
    STOPPED        (k,)                        after SHUTDOWN: the rank's last message

Executor -> its worker rank only
    COLLECTIVE_OP  (k, req_id, group, op, args)  a collective the rank runs for it

Worker rank <-> worker rank (different nodes)
    FETCH          (k, object_id, offset, size)    send me these store bytes
    (followed by raw bytes on Tag.OBJECT_DATA)

TaskSpec (a tuple, fields in order)
    task_id, fn_id, fn_blob|None, name, payload, deps, return_ids, resources,
    max_retries, max_calls, actor_id|None, owner, contained
  where payload is (RAW, args) for plain-scalar positional args or a
  serialization record of ``(args, kwargs)``; deps is the list of top-level
  argument positions that are refs: ``[(position_or_key, object_id), ...]``,
  resolved to ``[(position_or_key, object_id, record), ...]`` by the head when it
  dispatches; contained lists refs nested deeper inside the arguments (kept
  alive, not resolved). On dispatch the resources field carries (GPU ids, resources held).
"""
from __future__ import annotations

import enum


class Msg(enum.IntEnum):
    EXECUTE = 1
    REPLY = 2
    CREATE_ACTOR = 3
    KILL_ACTOR = 4
    RUN_FUNCTION = 5
    SHUTDOWN = 6
    GROUP_CREATE = 7
    STEAL = 8
    TASK_DONE = 10
    TASK_FAILED = 11
    WORKER_CRASHED = 12
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


# TaskSpec field positions (the wire form is a plain tuple).
T_ID, T_FN, T_BLOB, T_NAME, T_PAYLOAD, T_DEPS, T_RETURNS, T_RES, T_RETRIES, \
    T_MAX_CALLS, T_ACTOR, T_OWNER, T_CONTAINED = range(13)


#: A record kind only the head hands out: "copy this object from another node
#: into the room already reserved on yours": (FETCH_PLAN, src_rank, src_record, local_record).
FETCH_PLAN = 4

#: Executor -> its rank, once, when it is ready for work: (EXEC_READY, pid).
EXEC_READY = 40

#: max_calls of an actor creation spec: the actor lives in its rank's process.
IN_RANK = -7

# Plain ints for the hot path: an IntEnum member pickles as a global lookup.
EXECUTE, REPLY, CREATE_ACTOR, KILL_ACTOR, RUN_FUNCTION, SHUTDOWN = (
    Msg.EXECUTE.value, Msg.REPLY.value, Msg.CREATE_ACTOR.value, Msg.KILL_ACTOR.value,
    Msg.RUN_FUNCTION.value, Msg.SHUTDOWN.value)
TASK_DONE, TASK_FAILED, WORKER_CRASHED, SUBMIT, PUT, GET, WAIT, WAIT_NOW, ALLOC, \
    HOLD, RELEASE, BLOCKED, ADD_LOCATION, ACTOR_READY, ACTOR_DIED, CONTROL_CALL, \
    PROFILE = (m.value for m in (
        Msg.TASK_DONE, Msg.TASK_FAILED, Msg.WORKER_CRASHED, Msg.SUBMIT, Msg.PUT,
        Msg.GET, Msg.WAIT, Msg.WAIT_NOW, Msg.ALLOC, Msg.HOLD, Msg.RELEASE,
        Msg.BLOCKED, Msg.ADD_LOCATION, Msg.ACTOR_READY, Msg.ACTOR_DIED,
        Msg.CONTROL_CALL, Msg.PROFILE))
FETCH = Msg.FETCH.value
GROUP_CREATE = Msg.GROUP_CREATE.value
STEAL = Msg.STEAL.value
RETURNED = Msg.RETURNED.value
STOPPED = Msg.STOPPED.value
FREE_BLOCKS = Msg.FREE_BLOCKS.value
COLLECTIVE_OP = Msg.COLLECTIVE_OP.value
