"""Every message kind the head handles, sent through the head's own handler table
into a real Head; every message the head sends back, checked against its schema.
Run as a plain script (importing the comm loop initialises MPI, which the pytest
process itself never does)."""
import pickle

from hpc_ray.runtime.headloop import HeadLoop
from hpc_ray.runtime.head import Head
from hpc_ray.transport import messages as m
from hpc_ray.transport.serialization import RAW, SHM

head = Head(2, [0, 0], 1 << 20, ["h", "h"])
head.add_worker(1, {"CPU": 1}, [], 100)
served = []


class FetchServer:
    """Stands in for the MPI side of FETCH: records what it was asked to send."""

    def serve(self, src, object_id, offset, size):
        served.append((src, offset, size))


loop = HeadLoop.__new__(HeadLoop)   # the handler table, without starting MPI traffic
loop.head, loop.stopped, loop.fetcher, loop.logs = head, set(), FetchServer(), []
loop.watch = None                   # (one host: no watch over other nodes)
handlers = loop._make_handlers()
assert set(handlers) == set(m.TO_HEAD), set(handlers) ^ set(m.TO_HEAD)

sent_kinds = set()
handled = set()


def deliver(msg):
    m.check(tuple(msg), "test")
    handlers[msg[0]](1, tuple(msg))
    handled.add(msg[0])
    head.schedule()
    sent = []
    for rank, msgs in head.take_outbox().items():
        for out in msgs:
            m.check(out, "head outbox")
            sent_kinds.add(out[0])
            sent.append(out)
    return sent


def spec(actor=None, retries=0):
    from itertools import count
    s = [None] * 13
    s[m.T_ID] = next(ids)
    s[m.T_FN], s[m.T_BLOB], s[m.T_NAME] = "f", b"blob", "f"
    s[m.T_PAYLOAD], s[m.T_DEPS], s[m.T_RETURNS] = (RAW, ()), [], [next(ids)]
    s[m.T_RETRIES], s[m.T_MAX_CALLS], s[m.T_ACTOR], s[m.T_OWNER] = retries, 0, actor, 0
    return s


import itertools
ids = itertools.count(1000)

s1 = spec()
deliver(m.Submit(m.SUBMIT, s1))
deliver(m.TaskDone(m.TASK_DONE, s1[m.T_ID], [(RAW, 1)], None, 0.0, 1.0, 5))
s2 = spec()
deliver(m.Submit(m.SUBMIT, s2))
deliver(m.TaskFailed(m.TASK_FAILED, s2[m.T_ID], (RAW, "x"), 0.0, 1.0, 5))
s3 = spec()
deliver(m.Submit(m.SUBMIT, s3))
deliver(m.ProcessEnded(m.PROCESS_ENDED, 5, [], [], [], 0, [s3[m.T_ID]], -9, None))
s4 = spec()
deliver(m.Submit(m.SUBMIT, s4))
deliver(m.Returned(m.RETURNED, [s4[m.T_ID]]))
deliver(m.Put(m.PUT, 500, (RAW, 3), None))
deliver(m.Hold(m.HOLD, [500]))
deliver(m.Get(m.GET, 1, [500]))
deliver(m.Wait(m.WAIT, 2, [500, 9999], 2))
deliver(m.WaitNow(m.WAIT_NOW, 2))
deliver(m.Release(m.RELEASE, [500]))
(reply,) = deliver(m.Alloc(m.ALLOC, 3, 100))
node, off, capacity, freed = reply[2]
deliver(m.FreeBlocks(m.FREE_BLOCKS, [(off, 100)]))   # as a rank does for a dead executor
shm_off = head.objects.alloc(0, 256)
deliver(m.Put(m.PUT, 501, (SHM, 0, shm_off, 256, 0, []), None))
dup = head.objects.alloc(0, 256)
deliver(m.AddLocation(m.ADD_LOCATION, 501, (SHM, 0, dup, 256, 0, [])))
deliver(m.Blocked(m.BLOCKED, 1))
deliver(m.Blocked(m.BLOCKED, -1))
create = spec(actor=77)
deliver(m.ControlCall(m.CONTROL_CALL, 4, "create_actor",
                      (create, {}, 0, None, "A", 0, None)))
deliver(m.ActorReady(m.ACTOR_READY, 77, 9))
deliver(m.ControlCall(m.CONTROL_CALL, 5, "run_function", (b"fn",)))
deliver(m.ControlCall(m.CONTROL_CALL, 6, "kill", (77, True)))
deliver(m.ActorDied(m.ACTOR_DIED, 77, "bye", False))
deliver(m.Profile(m.PROFILE, [{"name": "span", "ph": "X"}]))
deliver(m.Fetch(m.FETCH, 501, shm_off, 256))
deliver(m.Log(m.LOG, [(1234, False, ["hello from a task"])]))
summaries = [(91, "A.f", "FINISHED", 1, 1, (92,), 1.0, 2.0, 3.0, 9)]
deliver(m.DirectDone(m.DIRECT_DONE, pickle.dumps(summaries)))
head.settle_direct_reports()   # (read when the comm loop is quiet, or by tasks())
assert head.history.tasks and list(head.history.tasks)[-1][0] == 91, list(head.history.tasks)
assert loop.logs == [(1, [(1234, False, ["hello from a task"])])], loop.logs
loop.logs.clear()
deliver(m.Alive(m.ALIVE))      # (a rank on another node; no watch on one host)
deliver(m.Stopped(m.STOPPED))

assert handled == set(m.TO_HEAD), set(m.TO_HEAD) - handled
assert served == [(1, shm_off, 256)], served
assert 1 in loop.stopped and not head.workers[1].alive
assert head.objects.allocators[0].used == 256          # only object 501 is left
expected_out = {m.EXECUTE, m.REPLY, m.CREATE_ACTOR, m.KILL_ACTOR, m.RUN_FUNCTION}
assert expected_out <= sent_kinds, expected_out - sent_kinds
print("OK message_kinds", sorted(m.Msg(k).name for k in handled), flush=True)

# The four kinds of API context implement runtime.context.Context, so the layers
# above call its members directly instead of probing with getattr/hasattr.
import typing
from hpc_ray.runtime.context import Context, ContextBase
from hpc_ray.runtime.driver import DriverContext
from hpc_ray.runtime.executor import ExecutorContext
from hpc_ray.runtime.local import LocalContext
from hpc_ray.runtime.rank_actors import RankContext

members = set(typing.get_type_hints(Context)) | {
    n for n, v in vars(Context).items() if callable(v) and not n.startswith("_")}
for cls in (DriverContext, ExecutorContext, RankContext, LocalContext):
    assert issubclass(cls, ContextBase), cls
    missing = sorted(n for n in members if not hasattr(cls, n))
    assert not missing, f"{cls.__name__} lacks {missing}"
print("OK contexts", sorted(members), flush=True)

# Handlers that pass a message's fields on with ``*msg[1:]`` call functions whose
# parameters (after ``self`` and the sender's rank, where there is one) are the
# kind's field names, in order.
import inspect
from hpc_ray.runtime.executor import ExecutorContext
from hpc_ray.runtime.worker import WorkerLoop
from hpc_ray.runtime.worker_state import WorkerState
from hpc_ray.transport.comm import Fetcher

forwarded = [
    (m.TaskDone, Head.task_done, 1), (m.TaskFailed, Head.task_failed, 1),
    (m.ProcessEnded, Head.process_ended, 1), (m.Submit, Head.submit, 0),
    (m.Get, Head.remote_get, 1), (m.Wait, Head.remote_wait, 1),
    (m.WaitNow, Head.remote_wait_now, 1), (m.Hold, Head.hold, 0),
    (m.Release, Head.release, 0), (m.Blocked, Head.blocked, 1),
    (m.AddLocation, Head.add_location, 0), (m.ActorReady, Head.actor_ready, 0),
    (m.ActorDied, Head.actor_died, 0), (m.Profile, Head.add_events, 0),
    (m.DirectDone, Head.direct_report, 0), (m.FreeBlocks, Head.free_blocks, 1),
    (m.Returned, Head.tasks_returned, 1), (m.Fetch, Fetcher.serve, 1),
    (m.GroupCreate, WorkerLoop.create_group, 0), (m.Steal, WorkerState.steal, 0),
    (m.Throttle, WorkerState.throttle, 0), (m.Execute, ExecutorContext.execute, 0),
    (m.CreateActor, ExecutorContext.create_actor_here, 0),
    (m.RunFunction, ExecutorContext.run_function, 0),
]
for schema, fn, skip in forwarded:
    params = list(inspect.signature(fn).parameters)[1 + skip:]
    assert params == list(schema._fields[1:]), (fn.__qualname__, params, schema._fields)
print("OK forwarded", len(forwarded), flush=True)
