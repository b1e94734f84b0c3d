"""The failures the head's hypothesis machine (``test_head_machine.py``) and the
issues found, kept as plain tests, and other single scenarios of the head."""
from __future__ import annotations

import collections
import pickle

import pytest

from hpc_ray.exceptions import ActorDiedError, TaskError
from hpc_ray.runtime.head import ActorState, Head, TaskState
from hpc_ray.transport import messages as m
from hpc_ray.transport.serialization import ERROR, RAW, SHM, loads

from head_machine_support import (
    STORE, WORKERS, check_invariants, error_record, make_head, new_id, rounded, spec)


def test_regression_failed_dependency_does_not_free_a_held_argument():
    # add.remote(failed_ref, held_ref): the head used to stop counting at the first
    # failed argument, then release both, freeing held_ref under the driver.
    head = make_head()
    off = head.alloc(0, 1000)
    head.hold([1])
    head.put_object(1, error_record(), None)
    head.hold([2])
    head.put_object(2, (SHM, 0, off, 1000, 0, []), None)
    s = spec([1, 2])
    head.submit(s)
    assert isinstance(loads(head.objects[s[m.T_RETURNS][0]].record[1]), TaskError)
    assert head.objects[2].refs == 1 and head.objects[2].record[2] == off
    assert head.allocators[0].used == rounded(1000)    # the block is still taken
    check_invariants(head, collections.Counter({1: 1, 2: 1, s[m.T_RETURNS][0]: 1}), {})


def test_regression_actor_death_fails_queued_calls_once():
    head = make_head()
    head.hold([1])
    head.put_object(1, error_record(), None)
    head.hold([2])
    head.put_object(2, (RAW, 2), None)
    create = spec(actor=900, fn="A")
    head.create_actor(create, {}, 0, None, "A")
    calls = [spec([1, 2], actor=900, fn="A.m") for _ in range(3)]
    for c in calls:
        head.submit(c)                 # each fails at once on its failed argument
    head.actor_died(900, "segfault", allow_restart=False)
    holders = collections.Counter({1: 1, 2: 1})
    for c in calls:
        holders[c[m.T_RETURNS][0]] += 1
    check_invariants(head, holders, {})
    assert head.objects[2].refs == 1


@pytest.mark.parametrize("restarts", [0, 1])
def test_regression_calls_made_ready_by_a_lost_call_are_not_sent_to_the_dead_process(restarts):
    # Found by the machine above: f running, g(f's result) and then h queued
    # behind it, when the actor is killed (or dies). Failing f's call failed g,
    # which let h go, to the process being taken down: h stayed RUNNING after
    # the actor was gone, and a get of its result waited forever.
    head = make_head()
    head.create_actor(spec(actor=900, fn="A"), {}, restarts, None, "A")
    head.actor_ready(900, 77)
    f = spec(actor=900, fn="A.f")
    head.submit(f)
    g = spec([f[m.T_RETURNS][0]], actor=900, fn="A.g")
    head.submit(g)
    h = spec(actor=900, fn="A.h")
    head.submit(h)
    assert head.tasks[f[m.T_ID]].state is TaskState.RUNNING
    assert head.tasks[h[m.T_ID]].state is TaskState.PENDING   # behind g, in order
    if restarts:
        head.actor_died(900, "segfault", allow_restart=True)
    else:
        head.kill_actor(900)
    holders = collections.Counter(c[m.T_RETURNS][0] for c in (f, g, h))
    check_invariants(head, holders, {})
    for c in (f, g):
        assert isinstance(loads(head.objects[c[m.T_RETURNS][0]].record[1]), ActorDiedError)
    if restarts:
        # h waits for the new process.
        assert head.tasks[h[m.T_ID]].state is TaskState.PENDING
        head.actor_ready(900, 78)
        assert head.tasks[h[m.T_ID]].state is TaskState.RUNNING
        assert h[m.T_ID] in head.actors[900].inflight
    else:
        assert isinstance(loads(head.objects[h[m.T_RETURNS][0]].record[1]), ActorDiedError)
        assert head.tasks == {}


def test_regression_a_long_chain_of_contained_refs_is_released_without_recursion():
    head = make_head()
    prev = None
    for oid in range(1, 100_001):
        head.hold([oid])
        head.put_object(oid, (RAW, oid), [prev] if prev else None)
        if prev:
            head.release([prev])
        prev = oid
    head.release([prev])
    assert len(head.objects) == 0


def test_regression_dead_actors_leave_no_live_entry():
    head = make_head()
    for i in range(1000):
        actor_id = 10_000 + i
        head.create_actor(spec(actor=actor_id, fn="A"), {}, 0, f"a{i}", "A")
        head.actor_ready(actor_id, 1)
        head.kill_actor(actor_id)
    assert head.actors == {} and head.named_actors == {}
    late = spec(actor=10_000, fn="A.m")
    head.submit(late)
    err = loads(head.objects[late[m.T_RETURNS][0]].record[1])
    assert isinstance(err, ActorDiedError) and "killed" in str(err)


def test_regression_actor_restart_requeues_lost_calls_in_order():
    head = make_head()
    head.create_actor(spec(actor=7, fn="A"), {}, 1, None, "A", 1)
    head.actor_ready(7, 1)
    calls = [spec(actor=7, fn="A.m") for _ in range(3)]
    for c in calls:
        head.submit(c)
    head.take_outbox()
    head.actor_died(7, "crash", allow_restart=True)
    head.actor_ready(7, 2)
    sent = [msg[1][m.T_ID] for msgs in head.take_outbox().values() for msg in msgs
            if msg[0] == m.EXECUTE]
    assert sent == [c[m.T_ID] for c in calls]


def test_regression_a_crash_report_for_an_actor_without_a_process_is_ignored():
    # Hypothesis: create an actor whose argument is not ready (PENDING), then a
    # crash report for it arrived; the head tried PENDING -> RESTARTING.
    head = make_head()
    head.submit(spec())
    pending_arg = max(head.objects.entries)
    head.create_actor(spec([pending_arg], actor=31, fn="A"), {}, 1, None, "A")
    head.actor_died(31, "its process died", allow_restart=True)
    assert head.actors[31].state is ActorState.PENDING


def test_regression_an_actor_waiting_for_room_is_placed_when_room_appears():
    # Helper report: an actor created while another held the last CPU, whose
    # holder then ended, stayed PENDING forever (it was never put on the retry list).
    head = Head(2, [0, 0], STORE, ["h", "h"])
    head.add_worker(1, {"CPU": 1}, [], 1)
    head.create_actor(spec(actor=61, fn="A"), {"CPU": 1}, 0, None, "A")
    head.actor_ready(61, 1)
    head.create_actor(spec(actor=62, fn="A"), {"CPU": 1}, 0, None, "A")
    assert head.actors[62].state is ActorState.PENDING
    head.actor_died(61, "terminated by __ray_terminate__", allow_restart=False)
    assert head.actors[62].state is ActorState.STARTING


def test_scheduling_pass_costs_what_it_places(monkeypatch):
    # 20,000 queued tasks, 3 one-CPU workers already full: a pass looks at each
    # worker once per resource shape, not at the whole backlog.
    head = make_head()
    for _ in range(20_000):
        head.submit(spec())
    head.schedule()
    head.take_outbox()
    import hpc_ray.runtime.scheduler as scheduler
    calls = []
    real = scheduler.capacity_ok

    def counting(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(scheduler, "capacity_ok", counting)
    for _ in range(100):
        head.schedule()
    assert len(calls) <= 100 * len(WORKERS)
    assert head.ready.count == 20_000 - sum(w.inflight for w in head.workers.values())


def test_a_burst_is_spread_over_the_workers_with_room():
    head = make_head()
    for _ in range(30):
        head.submit(spec())
    head.schedule()
    sent = [rank for rank, msgs in head.take_outbox().items() for msg in msgs
            if msg[0] == m.EXECUTE]
    per_rank = [sent.count(r) for r in WORKERS]
    assert min(per_rank) > 0 and max(per_rank) - min(per_rank) <= 1, per_rank


def test_history_is_bounded_by_its_budget():
    head = Head(2, [0, 0], STORE, ["h", "h"], history_bytes=1 << 20)
    head.add_worker(1, {"CPU": 1}, [], 1)
    for _ in range(20_000):
        s = spec()
        head.submit(s)
        head.schedule()
        head.take_outbox()
        head.task_done(1, s[m.T_ID], [(RAW, 1)], None, 1.0, 2.0, 3)
        head.release(s[m.T_RETURNS])
    assert head.history.tasks.bytes <= (1 << 20) // 2
    assert head.history.tasks.dropped > 0
    assert len(head.tasks) == 0 and len(head.objects) == 0


def test_actor_calls_are_ordered_per_caller_and_callers_take_turns(monkeypatch):
    # A task floods an actor with calls; the driver's one call must not wait
    # behind all of them: callers are served in turn once the actor has room.
    import hpc_ray.runtime.head.actors as head_actors
    monkeypatch.setattr(head_actors, "MAX_ACTOR_INFLIGHT", 1024)
    head = make_head()
    head.create_actor(spec(actor=50, fn="A"), {}, 0, None, "A")
    head.actor_ready(50, 1)
    head.take_outbox()
    flood = []
    for _ in range(3000):
        s = spec(actor=50, fn="A.inc")
        s[m.T_ID] |= 7 << 40                    # submitted by another process
        head.submit(s)
        flood.append(s)
    first = [msg[1][m.T_ID] for msgs in head.take_outbox().values() for msg in msgs
             if msg[0] == m.EXECUTE]
    assert first == [s[m.T_ID] for s in flood[:len(first)]]   # in order, bounded
    mine = spec(actor=50, fn="A.get")
    head.submit(mine)
    for tid in first[:len(first) // 2 + 1]:     # half of the sent calls finish
        head.task_done(1, tid, [(RAW, None)], None, 0.0, 1.0, 1)
    sent = [msg[1][m.T_ID] for msgs in head.take_outbox().values() for msg in msgs
            if msg[0] == m.EXECUTE]
    assert len(first) < len(flood)
    assert mine[m.T_ID] in sent[:2], "the driver's call waited behind the flood"


def test_a_caller_with_too_many_queued_calls_is_throttled_until_they_drain(monkeypatch):
    # A task looping on actor.inc.remote(): once it has CALLER_QUEUE_HIGH calls
    # queued at the head, its rank is told to stop reading it; it is read again
    # once they are down to CALLER_QUEUE_LOW, or at once when the actor dies.
    import hpc_ray.runtime.head.actors as head_actors
    monkeypatch.setattr(head_actors, "MAX_ACTOR_INFLIGHT", 16)
    monkeypatch.setattr(head_actors, "CALLER_QUEUE_HIGH", 100)
    monkeypatch.setattr(head_actors, "CALLER_QUEUE_LOW", 10)
    head = make_head()
    for actor_id in (50, 51):
        head.create_actor(spec(actor=actor_id, fn="A"), {}, 0, None, "A")
        head.actor_ready(actor_id, 1)
    head.take_outbox()
    caller = (2 << 20) | 5                      # rank 2's executor with serial 5

    def throttles():
        return [msg for msgs in head.take_outbox().values() for msg in msgs
                if msg[0] == m.THROTTLE]

    def flood(actor_id, n):
        calls = []
        for _ in range(n):
            s = spec(actor=actor_id, fn="A.inc")
            s[m.T_ID] |= caller << 40
            head.submit(s)
            calls.append(s)
        return calls

    calls = flood(50, 100 + 16)
    assert throttles() == [(m.THROTTLE, 5, True)]
    flood(51, 100 + 16)                         # over at a second actor: no second message
    assert throttles() == []
    for s in calls[:100 + 16 - 10]:             # actor 50 runs its calls
        head.task_done(1, s[m.T_ID], [(RAW, None)], None, 0.0, 1.0, 1)
    assert throttles() == []                    # still too many at actor 51
    head.actor_died(51, "its process was killed", False)   # its queue is dropped
    assert throttles() == [(m.THROTTLE, 5, False)]
    assert head.throttled == {}


def test_direct_call_reports_are_read_before_tasks_and_at_most_some_held():
    from hpc_ray.runtime import control
    from hpc_ray.runtime.head import DIRECT_REPORTS_HELD

    head = make_head()

    def report(tid):
        return pickle.dumps([(tid, "A.f", "FINISHED", 1, 1, (tid + 1,), 1.0, 2.0, 3.0, 9)])

    head.direct_report(report(1000))
    assert len(head.history.tasks) == 0                 # held, not read yet
    assert f"{1000:040x}" in control._tasks(head)       # tasks() reads it first
    assert [ev[5] for ev in control._timeline(head)] == [1000]
    for i in range(DIRECT_REPORTS_HELD):
        head.direct_report(report(2000 + 2 * i))
    # A head that never had a quiet moment holds no more than that many.
    assert len(head.direct_reports) < DIRECT_REPORTS_HELD
    assert len(head.history.tasks) == 1 + DIRECT_REPORTS_HELD - len(head.direct_reports)


def _running_task(head: Head) -> tuple[list, int]:
    """A task placed and running on a worker, and the id of its pending result."""
    task = spec()
    head.submit(task)
    head.schedule()
    head.take_outbox()
    return task, task[m.T_RETURNS][0]


def test_regression_a_get_of_a_process_killed_while_it_waits_is_never_answered():
    # Issue 33: a task put a value, then waited in get() for it and for a ref
    # still running elsewhere, and was killed. Its death freed the value; when
    # the other ref's task finished, the head answered the dead get and read
    # the freed id (KeyError in record_for), and the head failed for good.
    head = make_head()
    slow, pending = _running_task(head)
    mine = new_id()
    off = head.alloc(0, 1000)
    head.hold([mine])
    head.put_object(mine, (SHM, 0, off, 1000, 0, []), None)   # held by the process only
    head.hold([pending])                                      # the task's argument
    head.blocked(2, 1)
    head.remote_get(2, 41, [mine, pending])
    head.process_ended(2, 5001, [mine, pending], [], [41], 1, [], -9, None)
    assert mine not in head.objects and head.allocators[0].used == 0
    assert head.remote_gets == {} and head.workers[2].blocked == 0
    head.task_done(head.tasks[slow[m.T_ID]].rank, slow[m.T_ID], [(RAW, 3.0)], None,
                   0.0, 3.0, 7)
    assert [msg for msgs in head.take_outbox().values() for msg in msgs
            if msg[0] == m.REPLY] == []
    assert head.objects[pending].record == (RAW, 3.0)         # the driver still gets it
    check_invariants(head, collections.Counter({pending: 1}), {})


def test_regression_a_wait_that_timed_out_leaves_no_waiter_behind():
    # A task polling ray.wait([ref], timeout=0) on a long task: each answered
    # wait stayed among the pending object's waiters (found by the machine as
    # "object waits for gone wait"), one more per call, until the task ended.
    head = make_head()
    _, pending = _running_task(head)
    head.hold([pending])
    for req in range(1, 101):
        head.remote_wait(2, req, [pending], 1)
        head.remote_wait_now(2, req)
    assert head.remote_waits == {} and head.objects[pending].waiters == []
    replies = [msg for msgs in head.take_outbox().values() for msg in msgs
               if msg[0] == m.REPLY]
    assert [r[2] for r in replies] == [[]] * 100        # each answered: nothing ready


def test_a_handler_that_raises_fails_the_task_it_concerns_and_the_head_goes_on():
    from hpc_ray.exceptions import HeadError

    head = make_head()
    s = spec()
    head.submit(s)
    head.schedule()
    head.take_outbox()
    head.handler_failed(1, (m.TASK_DONE, s[m.T_ID], [(RAW, 1)], None, 0.0, 1.0, 5),
                        "Traceback: KeyError")
    err = loads(head.objects[s[m.T_RETURNS][0]].record[1])
    assert isinstance(err, HeadError) and "TASK_DONE message from rank 1" in str(err)
    head.handler_failed(2, (m.GET, 9, [s[m.T_RETURNS][0], 12345]), "Traceback: bug")
    (reply,) = [msg for msgs in head.take_outbox().values() for msg in msgs]
    assert reply[:2] == (m.REPLY, 9) and all(r[0] == ERROR for r in reply[2])
    later = spec()
    head.submit(later)                  # and the head takes more work
    head.schedule()
    assert head.tasks[later[m.T_ID]].state is TaskState.RUNNING
    check_invariants(head, collections.Counter([s[m.T_RETURNS][0], later[m.T_RETURNS][0]]),
                     {})
