"""The head's tables, the scheduler and the store allocator as pure objects (no MPI)."""
from __future__ import annotations

import pickle
import warnings

import pytest

from hpc_ray.exceptions import (ActorDiedError, GetTimeoutError, InfeasibleTaskError,
                                ObjectStoreFullError, TaskError, WorkerCrashedError)
from hpc_ray.runtime import scheduler
from hpc_ray.runtime.head import Head
from hpc_ray.runtime.store import Allocator
from hpc_ray.runtime.taskspec import build_spec, load_args
from hpc_ray.runtime.context import ObjectRef
from hpc_ray.transport import messages as m
from hpc_ray.transport.serialization import ERROR, INLINE, RAW, SHM, loads


def make_head(workers: int = 2, cpus: int = 1, store: int = 1 << 20) -> Head:
    head = Head(workers + 1, [0] * (workers + 1), store, ["host"] * (workers + 1))
    for r in range(1, workers + 1):
        head.add_worker(r, {"CPU": cpus, "GPU": 0}, [], 1000 + r)
    return head


def spec_for(args=(1,), returns=1, resources=None, retries=3):
    return build_spec(123, b"blob", "f", args, {}, returns, resources, retries, 0, None, 0)


def executes(head: Head) -> list[tuple[int, list]]:
    return [(rank, msg[1]) for rank, msgs in head.take_outbox().items()
            for msg in msgs if msg[0] == m.EXECUTE]


# --- allocator ----------------------------------------------------------------------

def test_allocator_first_fit_and_coalescing():
    a = Allocator(1024)
    x = a.alloc(100)
    y = a.alloc(100)
    z = a.alloc(100)
    assert (x, y, z) == (0, 128, 256)
    a.free(y, 100)
    assert a.alloc(64) == 128          # reuses the hole
    a.free(128, 64)
    a.free(x, 100)
    a.free(z, 100)
    assert a.used == 0
    assert a.largest_free() == 1024    # everything merged back into one block


def test_allocator_full_returns_none():
    a = Allocator(256)
    assert a.alloc(200) == 0
    assert a.alloc(200) is None


# --- tasks and objects --------------------------------------------------------------

def test_ready_task_is_dispatched_with_function_once():
    head = make_head(workers=1)
    s1, s2 = spec_for(), spec_for()
    head.submit(s1)
    head.submit(s2)
    head.schedule()
    sent = executes(head)
    assert [rank for rank, _ in sent] == [1, 1]
    assert sent[0][1][m.T_BLOB] == b"blob"
    assert sent[1][1][m.T_BLOB] is None   # shipped once per rank


def test_dependency_waits_then_resolves_to_record():
    head = make_head()
    producer = spec_for()
    head.submit(producer)
    ref_id = producer[m.T_RETURNS][0]
    consumer = build_spec(123, None, "g", (ObjectRef(ref_id),), {}, 1, None, 3, 0, None, 0)
    head.submit(consumer)
    head.schedule()
    assert [s[m.T_ID] for _, s in executes(head)] == [producer[m.T_ID]]
    head.task_done(1, producer[m.T_ID], [(RAW, 42)], None, 0.0, 1.0, 7)
    head.schedule()
    (rank, wire), = executes(head)
    assert wire[m.T_ID] == consumer[m.T_ID]
    assert wire[m.T_DEPS] == [(0, ref_id, (RAW, 42))]


def test_error_propagates_downstream_without_running():
    head = make_head()
    producer = spec_for()
    head.submit(producer)
    ref_id = producer[m.T_RETURNS][0]
    consumer = build_spec(123, None, "g", (ObjectRef(ref_id),), {}, 1, None, 3, 0, None, 0)
    head.submit(consumer)
    head.schedule()
    executes(head)
    err = (ERROR, pickle.dumps(TaskError("f", "tb", 1, "host", ValueError("x"))))
    head.task_failed(1, producer[m.T_ID], err, 0.0, 1.0, 7)
    out = head.objects[consumer[m.T_RETURNS][0]].record
    assert out[0] == ERROR and isinstance(loads(out[1]), TaskError)
    head.schedule()
    assert executes(head) == []


def test_crash_retries_then_fails_with_worker_crashed():
    head = make_head(workers=1)
    s = spec_for(retries=1)
    head.submit(s)
    head.schedule()
    executes(head)
    head.worker_crashed(1, [s[m.T_ID]], -11, 99, None)
    head.schedule()
    assert len(executes(head)) == 1          # retried once
    head.worker_crashed(1, [s[m.T_ID]], -11, 99, None)
    rec = head.objects[s[m.T_RETURNS][0]].record
    err = loads(rec[1])
    assert isinstance(err, WorkerCrashedError)
    assert "SIGSEGV" in str(err) and "rank 1" in str(err) and "f" in str(err)
    assert head.workers[1].inflight == 0


def test_refcount_frees_store_block_when_last_holder_releases():
    head = make_head(store=4096)
    off = head.alloc(0, 1000)
    head.hold([77])
    head.put_object(77, (SHM, 0, off, 1000, 10, []), None)
    assert head.allocators[0].used > 0
    head.release([77])
    assert 77 not in head.objects
    assert head.allocators[0].used == 0


def test_contained_refs_live_as_long_as_their_container():
    head = make_head()
    head.hold([5])
    head.put_object(5, (RAW, 1), None)
    head.hold([6])
    head.put_object(6, (INLINE, b"", []), [5])  # object 6 holds a ref to 5
    head.release([5])                           # the process let go of 5
    assert 5 in head.objects
    head.release([6])
    assert 5 not in head.objects and 6 not in head.objects


def test_a_task_wanting_more_cpus_than_any_node_fails_at_once():
    head = make_head()
    s = spec_for(resources={"CPU": 5})
    head.submit(s)
    head.schedule()
    assert executes(head) == []
    err = loads(head.objects[s[m.T_RETURNS][0]].record[1])
    assert isinstance(err, InfeasibleTaskError) and "CPU" in str(err)


def test_an_infeasible_task_names_what_each_kind_of_node_holds():
    # Node 0: one 1-CPU rank and R; node 1: two 1-CPU ranks (2 CPUs for a wide task).
    head = Head(4, [0, 0, 1, 1], 1 << 20, ["a", "a", "b", "b"])
    head.add_worker(1, {"CPU": 1, "GPU": 0, "R": 2}, [], 1001)
    for r in (2, 3):
        head.add_worker(r, {"CPU": 1, "GPU": 0}, [], 1000 + r)
    s = spec_for(resources={"CPU": 3})
    head.submit(s)
    head.schedule()
    err = loads(head.objects[s[m.T_RETURNS][0]].record[1])
    assert isinstance(err, InfeasibleTaskError)
    assert "nodes have: {'CPU': 1, 'R': 2}; {'CPU': 2}" in str(err), str(err)


def test_a_task_wanting_an_unknown_resource_waits_and_runs_once_it_is_created():
    head = make_head()
    s = spec_for(resources={"CPU": 1, "TPU": 1})
    head.submit(s)
    with pytest.warns(UserWarning, match="TPU.*set_resource") as warned:
        head.schedule()
    # It names the line outside hpc_ray that led to it (here this test's), not
    # the head's own source.
    assert [w.filename for w in warned] == [__file__], [w.filename for w in warned]
    assert executes(head) == []
    assert head.objects[s[m.T_RETURNS][0]].record is None     # pending, not failed
    head.set_resource(0, "TPU", 1)
    head.schedule()
    assert [w[m.T_ID] for _, w in executes(head)] == [s[m.T_ID]]


def _running_with(head: Head, resources: dict, n: int) -> list:
    specs = [spec_for(args=(i,), resources=resources) for i in range(n)]
    for s in specs:
        head.submit(s)
    head.schedule()
    sent = {w[m.T_ID] for _, w in executes(head)}
    return [s for s in specs if s[m.T_ID] in sent]


def test_set_resource_grows_a_resource_and_queued_tasks_then_run():
    head = Head(3, [0, 0, 0], 1 << 20, ["h"] * 3)
    head.add_worker(1, {"CPU": 1, "lic": 1}, [], 1)
    head.add_worker(2, {"CPU": 1, "lic": 1}, [], 2)
    assert len(_running_with(head, {"CPU": 0, "lic": 1}, 3)) == 1
    head.set_resource(0, "lic", 3)
    head.schedule()
    assert len(executes(head)) == 2            # the two queued ones now run
    assert head.pools[0].total["lic"] == 3 and head.pools[0].avail["lic"] == 0


def test_shrinking_a_held_resource_revokes_nothing_and_it_shrinks_as_tasks_end():
    head = Head(2, [0, 0], 1 << 20, ["h"] * 2)
    head.add_worker(1, {"CPU": 1, "lic": 2}, [], 1)
    running = _running_with(head, {"CPU": 0, "lic": 1}, 2)
    assert len(running) == 2
    head.set_resource(0, "lic", 1)
    pool = head.pools[0]
    assert (pool.total["lic"], pool.avail["lic"]) == (1, -1)
    late = _running_with(head, {"CPU": 0, "lic": 1}, 1)
    assert late == []                          # 2 held of 1: nothing more is placed
    head.task_done(1, running[0][m.T_ID], [(RAW, 1)], None, 0.0, 1.0, 7)
    head.schedule()
    assert executes(head) == [] and pool.avail["lic"] == 0
    head.task_done(1, running[1][m.T_ID], [(RAW, 1)], None, 0.0, 1.0, 7)
    head.schedule()
    assert len(executes(head)) == 1            # the late task holds the one left


def test_deleting_a_held_resource_waits_for_its_holders():
    head = Head(2, [0, 0], 1 << 20, ["h"] * 2)
    head.add_worker(1, {"CPU": 1, "lic": 1}, [], 1)
    running, = _running_with(head, {"CPU": 0, "lic": 1}, 1)
    head.set_resource(0, "lic", 0)
    assert "lic" not in head.pools[0].total
    head.task_done(1, running[m.T_ID], [(RAW, 1)], None, 0.0, 1.0, 7)
    assert head.pools[0].avail.get("lic", 0) == 0
    with pytest.warns(UserWarning, match="lic"):
        assert _running_with(head, {"CPU": 0, "lic": 1}, 1) == []


def test_an_actor_waiting_for_a_resource_is_placed_when_it_is_created():
    head = make_head()
    create = build_spec(9, b"cls", "C", (), {}, 1, {}, 0, 0, 556, 0)
    with pytest.warns(UserWarning, match="TPU"):
        head.create_actor(create, {"TPU": 1}, 0, None, "C")
    assert [msg for msgs in head.take_outbox().values() for msg in msgs] == []
    head.set_resource(0, "TPU", 2)
    sent = [msg[0] for msgs in head.take_outbox().values() for msg in msgs]
    assert sent == [m.CREATE_ACTOR]


def test_an_actor_wanting_more_gpus_than_any_node_dies_at_once_and_its_calls_fail():
    # Ray 0.7's docs: "an exception will be thrown when instantiating the actor"
    # (it waited forever, warning that it stayed pending).
    head = make_head()
    create = build_spec(9, b"cls", "C", (), {}, 1, {}, 0, 0, 556, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        head.create_actor(create, {"CPU": 1, "GPU": 2}, 0, None, "C")
    assert [msg for msgs in head.take_outbox().values() for msg in msgs] == []
    call = build_spec("m", None, "C.ping", (), {}, 1, None, 0, 0, 556, 0)
    head.submit(call)
    err = loads(head.objects[call[m.T_RETURNS][0]].record[1])
    assert isinstance(err, ActorDiedError), err
    assert "no node can ever hold it: it needs {'CPU': 1, 'GPU': 2}" in str(err), str(err)


def test_custom_resources_are_the_jobs_total_shared_by_a_nodes_ranks():
    head = Head(3, [0, 0, 0], 1 << 20, ["h"] * 3)
    head.add_worker(1, {"CPU": 1, "lic": 2}, [], 1)
    head.add_worker(2, {"CPU": 1, "lic": 2}, [], 2)
    specs = [spec_for(args=(i,), resources={"CPU": 1, "lic": 2}) for i in range(2)]
    for s in specs:
        head.submit(s)
    head.schedule()
    assert len(executes(head)) == 1            # 2 licences in all, not 2 per rank


def test_prefetch_queues_short_tasks_beyond_cpus():
    head = make_head(workers=1)
    for _ in range(10):
        head.submit(spec_for())
    head.schedule()
    first = len(executes(head))
    assert 1 < first <= 1 + head.workers[1].prefetch


def test_actor_calls_dispatch_in_order_after_ready():
    head = make_head()
    actor_id = 555
    create = build_spec(9, b"cls", "C", (), {}, 1, {}, 0, 0, actor_id, 0)
    head.create_actor(create, {}, 0, "ps", "C")
    calls = [build_spec("m", None, "C.m", (i,), {}, 1, None, 0, 0, actor_id, 0)
             for i in range(3)]
    for c in calls:
        head.submit(c)
    assert executes(head) == []                   # not alive yet
    head.actor_ready(actor_id, 1234)
    assert [s[m.T_ID] for _, s in executes(head)] == [c[m.T_ID] for c in calls]
    head.kill_actor(actor_id)
    late = build_spec("m", None, "C.m", (9,), {}, 1, None, 0, 0, actor_id, 0)
    head.submit(late)
    assert isinstance(loads(head.objects[late[m.T_RETURNS][0]].record[1]), ActorDiedError)
    assert "ps" not in head.named_actors


def test_scheduler_prefers_node_with_largest_arguments():
    head = Head(3, [0, 0, 1], 1 << 20, ["a", "a", "b"])
    head.add_worker(1, {"CPU": 1}, [], 1)
    head.add_worker(2, {"CPU": 1}, [], 2)
    w = scheduler.pick_worker(list(head.workers.values()), {"CPU": 1}, {1: 10_000})
    assert w.rank == 2


# --- specs, messages, exceptions ------------------------------------------------------

def test_build_spec_raw_fast_path_and_refs_by_position():
    s = spec_for(args=(1, "a", None))
    assert s[m.T_PAYLOAD] == (RAW, (1, "a", None))
    r = ObjectRef(1 << 50)
    s2 = build_spec(1, None, "g", (r, [r]), {"k": r}, 1, None, 3, 0, None, 0)
    assert sorted(map(str, (d[0] for d in s2[m.T_DEPS]))) == ["0", "k"]
    assert s2[m.T_CONTAINED] == [r.id]          # the nested one stays a ref
    deps = [(pos, oid, (RAW, "value")) for pos, oid in s2[m.T_DEPS]]
    args, kwargs = load_args(s2[m.T_PAYLOAD], deps, lambda oid, rec: rec[1])
    assert args[0] == "value" and kwargs["k"] == "value"
    assert isinstance(args[1][0], ObjectRef)


def test_unpicklable_argument_raises_type_error_naming_function():
    class Bad:
        def __reduce__(self):
            raise RuntimeError("nope")
    with pytest.raises(TypeError, match="arguments of g"):
        build_spec(1, None, "g", (Bad(),), {}, 1, None, 3, 0, None, 0)


def test_message_kinds_are_unique_small_ints():
    values = [k.value for k in m.Msg]
    assert len(values) == len(set(values))
    assert all(0 < v < 32767 for v in values)
    assert pickle.loads(pickle.dumps((m.EXECUTE, [1, 2]))) == (m.EXECUTE, [1, 2])


@pytest.mark.parametrize("exc", [
    GetTimeoutError("t"), ObjectStoreFullError("full"), WorkerCrashedError("crash"),
    ActorDiedError("dead"), TaskError("f", "tb", 3, "host", KeyError("k")),
])
def test_exceptions_pickle(exc):
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is type(exc) and str(again) == str(exc)


def test_task_error_is_instance_of_cause_and_pickles():
    err = TaskError("f", "Traceback...", 2, "n1", ValueError("bad")).as_instanceof_cause()
    assert isinstance(err, ValueError) and isinstance(err, TaskError)
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, ValueError) and again.rank == 2
    assert "f failed on worker rank 2" in str(again)
    assert isinstance(GetTimeoutError("x"), TimeoutError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(ObjectStoreFullError("x"), MemoryError)


def test_nothing_is_sent_after_shutdown_is_queued():
    # A message no rank receives before MPI_Finalize hangs an srun job, so once
    # SHUTDOWN is queued, finishing tasks must not make the head send more work.
    head = make_head(workers=1, cpus=1)
    specs = [spec_for(args=(i,)) for i in range(3)]
    for spec in specs:
        head.submit(spec)
    head.schedule()
    first = executes(head)
    assert first, "the first task is dispatched"
    head.send(1, (m.SHUTDOWN,))
    head.closing = True
    head.take_outbox()
    tid = first[0][1][m.T_ID]
    head.task_done(1, tid, [(RAW, 0)], None, 0.0, 0.0, 1)
    head.schedule()
    assert head.take_outbox() == {}


def test_ranks_busy_in_an_in_rank_actor_are_known_to_the_node_watch():
    # node_watch counts them as heard: their loop runs the method, sending no ALIVE.
    head = make_head()
    actor_id, plain_id = 556, 557
    create = build_spec(9, b"cls", "C", (), {}, 1, {}, 0, m.IN_RANK, actor_id, 0)
    head.create_actor(create, {}, 0, None, "C")
    head.create_actor(build_spec(9, b"cls", "P", (), {}, 1, {}, 0, 0, plain_id, 0),
                      {}, 0, None, "P")
    rank = head.actors[actor_id].rank
    assert head.in_rank_busy() == {rank}          # its constructor runs in the rank
    head.actor_ready(actor_id, 1234)
    head.actor_ready(plain_id, 1235)
    assert head.in_rank_busy() == set()           # idle: its loop sends ALIVE again
    call = build_spec("m", None, "C.solve", (), {}, 1, None, 0, 0, actor_id, 0)
    head.submit(call)
    head.submit(build_spec("m", None, "P.m", (), {}, 1, None, 0, 0, plain_id, 0))
    assert head.in_rank_busy() == {rank}          # a long solve may run now
    head.task_done(rank, call[m.T_ID], [(RAW, 0)], None, 0.0, 0.0, 1234)
    assert head.in_rank_busy() == set()
