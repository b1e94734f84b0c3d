"""The failures the worker-state machine (``test_worker_state.py``) found, and
other single scenarios of a worker rank's state, kept as plain tests."""
from __future__ import annotations

from hpc_ray.runtime.executor_record import Executor
from hpc_ray.runtime.worker_state import WorkerState
from hpc_ray.transport import messages as m

from test_worker_state import Clock, spec


def _started(cpus: int = 1, standby: bool = False) -> WorkerState:
    state = WorkerState(cpus, actor_standby=standby, clock=Clock())
    state.open()
    for ex in state.starts:
        ex.proc, ex.pid = "process", 1000 + ex.serial
    state.starts = []
    return state


def _actor_up() -> tuple[WorkerState, Executor]:
    """Actor 1 up in an executor of its own (one CPU)."""
    state = _started()
    state.start_actor(spec(0, "Actor", actor=1), standby_alive=False)
    ex = state.actors[1]
    ex.proc, ex.pid = "process", 2000
    state.on_executor(ex, [(m.EXEC_READY,)])
    return state, ex


def test_calls_left_on_an_actor_that_exited_are_not_run_as_tasks():
    # An actor calls exit() with a call queued behind: the head fails that call
    # on ACTOR_DIED; when the process ends, the call must not be requeued as a
    # task for the rank's CPU executors, nor the exit reported as a crash.
    state, ex = _actor_up()
    call = spec(0, "method", actor=1)
    state.actor_call(call)
    state.on_executor(ex, [(m.ACTOR_DIED, 1, "exit() called in method", False)])
    state.out = []
    state.executor_died(ex, 0)
    assert not state.queue and not state.zero_cpu_queue
    [ended] = [msg for msg in state.out if msg[0] == m.PROCESS_ENDED]
    assert ended[6] == [] and ended[7] is None       # nothing lost, no exit code


def test_an_actor_that_exits_while_a_thread_waits_gives_back_no_cpu():
    # An actor's waiting threads lend no CPU (LEND sends no BLOCKED): when the
    # actor then exits cleanly, its end must not give one back to the head.
    state, ex = _actor_up()
    state.actor_call(spec(0, "method", actor=1))
    state.on_executor(ex, [(m.LEND, 1)])
    assert not [msg for msg in state.out if msg[0] == m.BLOCKED]
    state.on_executor(ex, [(m.ACTOR_DIED, 1, "exit() called in method", False)])
    state.executor_died(ex, 0)
    [ended] = [msg for msg in state.out if msg[0] == m.PROCESS_ENDED]
    assert ended[5] == 0


def _waiting_with_one_nested(nested: list) -> tuple[WorkerState, Executor]:
    """One CPU: a task waits in get (BLOCKED), and ``nested`` was sent to run in it."""
    state = _started()
    [ex] = state.executors
    state.on_executor(ex, [(m.EXEC_READY,)])
    state.task_arrived(spec())
    state.dispatch()
    state.on_executor(ex, [(m.BLOCKED, 1)])
    state.task_arrived(nested)
    state.dispatch()
    assert nested[m.T_ID] in ex.assigned and len(ex.assigned) == 2
    state.out = []
    return state, ex


def _spare_up(state: WorkerState) -> Executor:
    [spare] = [e for e in state.executors if e.spare]
    assert spare in state.starts
    spare.proc, spare.pid = "process", 1000 + spare.serial
    state.on_executor(spare, [(m.EXEC_READY,)])
    state.dispatch()
    return spare


def test_a_cpu_lent_by_a_deep_wait_runs_its_task_in_a_spare():
    # fib(n) on one CPU: the executor's tasks are nested down to the limit, and
    # the deepest one waits (DEEP). Its CPU is lent to the head, and the task the
    # head sends for it must start a spare executor, not queue on the deep stack.
    state, ex = _waiting_with_one_nested(spec())
    state.on_executor(ex, [(m.DEEP, 1)])
    assert state.out == [(m.BLOCKED, 1)]              # the deep wait lends its CPU
    task = spec()
    state.task_arrived(task)
    state.dispatch()
    assert task[m.T_ID] not in ex.assigned
    assert task[m.T_ID] in _spare_up(state).assigned


def test_a_task_sent_nested_as_the_wait_went_deep_is_given_back_to_run_in_a_spare():
    # A tree of nested tasks in the suite failed with RecursionError: the tasks
    # the rank sent nested before it heard DEEP all ran on the deep stack, one
    # level each. The deep wait gives them back; the rank runs them elsewhere,
    # with the function's blob again for an executor that never read it.
    late = spec(fn="late")
    late[m.T_BLOB] = b"late's blob"
    state, ex = _waiting_with_one_nested(late)
    assert "late" in ex.known_fns
    state.on_executor(ex, [(m.DEEP, 1), (m.RETURNED, [late[m.T_ID]])])
    assert state.out == [(m.BLOCKED, 1)]
    assert late[m.T_ID] not in ex.assigned and "late" not in ex.known_fns
    state.dispatch()
    [(_, sent)] = _spare_up(state).outbox
    assert sent[m.T_ID] == late[m.T_ID] and sent[m.T_BLOB] == b"late's blob"


def test_a_level_that_closes_keeps_its_cpu_lent_until_it_resumes():
    # A task whose get() had its answer runs the nested task sent before the
    # rank heard (UNBLOCK), and that one waits for its own subtasks. With its CPU
    # taken back at UNBLOCK, the head counted both tasks on the one CPU with one
    # lent; two such levels left it no room for subtasks, and a tree of nested
    # tasks hung (tree(5, 4) on two ranks in CI). The closing level lends its
    # CPU until BLOCKED -1, and is sent no more nested tasks meanwhile.
    state, ex = _waiting_with_one_nested(spec())     # nested: sent before UNBLOCK
    state.on_executor(ex, [(m.UNBLOCK, 5)])
    assert ex.outbox[-1] == (m.REPLY, 5, None)
    assert state.out == []                            # still lent
    later = spec()
    state.task_arrived(later)
    state.dispatch()
    assert later[m.T_ID] not in ex.assigned           # nothing more for that level
    state.on_executor(ex, [(m.BLOCKED, 1)])           # the nested task waits too
    assert state.out == [(m.BLOCKED, 1)]              # two CPUs lent now
    state.dispatch()
    assert later[m.T_ID] in ex.assigned               # nested in the task that waits
    state.out = []
    state.on_executor(ex, [(m.UNBLOCK, 6), (m.BLOCKED, -1), (m.BLOCKED, -1)])
    assert state.out == [(m.BLOCKED, -1), (m.BLOCKED, -1)]
    assert ex.blocked == ex.closing == 0


def test_an_actor_that_exited_is_watched_until_its_process_ends():
    # After ACTOR_DIED the executor runs its clean-up (atexit handlers, finalizers):
    # the loop keeps reading it (its printed lines, its RELEASEs) until its EOF,
    # sends it nothing more, and reports its end, which gives back its holds.
    state = _started()
    state.start_actor(spec(0, "Actor", actor=1), standby_alive=False)
    ex = state.actors[1]
    ex.proc, ex.pid = "process", 2000
    state.on_executor(ex, [(m.EXEC_READY,), (m.HOLD, [77])])
    state.on_executor(ex, [(m.ACTOR_DIED, 1, "terminated by __ray_terminate__", False)])
    assert ex in state.all_executors() and ex in state.leaving
    ex.outbox = []
    state.send_all((m.RUN_FUNCTION, b"fn"))
    assert not ex.outbox
    state.out = []
    state.executor_died(ex, 0)
    assert ex not in state.all_executors() and not state.leaving
    [ended] = [msg for msg in state.out if msg[0] == m.PROCESS_ENDED]
    assert ended[2] == [77] and ended[7] is None       # its hold goes back; no crash


def test_an_executor_that_ends_with_messages_queued_is_not_written_to():
    # Found by the machine: an actor given the started standby and killed in
    # the same turn (ray.kill(A.remote())) ended with its CREATE_ACTOR queued;
    # the executor stayed listed to be written to after it was gone.
    state = _started(standby=True)
    state.standby_started()
    [standby] = state.standby
    standby.proc, standby.pid = "process", 1000 + standby.serial
    state.starts = []
    ex = state.start_actor(spec(0, "Actor", actor=1), standby_alive=True)
    assert ex is standby and ex in state.to_write
    state.forget_actor(1)
    state.executor_ended(ex)
    assert ex.gone and ex not in state.to_write and not ex.outbox


def test_a_stolen_tasks_function_blob_stays_for_the_next_task():
    # The head ships a function's definition to a rank once. A queued task that
    # carried it may be stolen back before an executor took it, and the next task
    # of that function comes without it: the rank must still have it to give.
    state = _started()
    [ex] = state.executors
    state.on_executor(ex, [(m.EXEC_READY,)])
    busy = spec(1, "g")
    state.task_arrived(busy)
    state.dispatch()
    first = spec(1, "f")
    state.task_arrived(first)
    state.steal(1)
    assert (m.RETURNED, [first[m.T_ID]]) in state.out
    second = spec(1, "f")
    second[m.T_BLOB] = None
    state.task_arrived(second)
    ex.outbox.clear()
    state.on_executor(ex, [(m.TASK_DONE, busy[m.T_ID], [], None, 1.0, 1.001, ex.pid)])
    state.dispatch()
    [sent] = [msg[1] for msg in ex.outbox if msg[0] == m.EXECUTE]
    assert sent[m.T_ID] == second[m.T_ID] and sent[m.T_BLOB] == b"blob-f"
