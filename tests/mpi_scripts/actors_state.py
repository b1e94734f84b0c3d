"""Issue 4 worker-side state: reusable variables, run_function_on_all_workers,
the experimental signal API, refs in asyncio code, and multiprocessing manager
proxies passed to tasks.

Each part runs in its own ``section``: a failure prints ``FAIL <section>`` with
its traceback and the script goes on, so one launch tells the test about every
part. The script prints ``SECTION <name> ok`` per part that passed and exits 1
if any failed.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import asyncio
import base64
import contextlib
import multiprocessing as mp
import sys
import time
import traceback

from _harness import (FAILURES, NUM_WORKERS, TMPDIR, check, expect_raises, init_kwargs,
                      mark_started, ok, poll_for, report, started, tmp_path)

import hpc_ray as ray
from hpc_ray.exceptions import TaskError

ray.init(**init_kwargs())

failed = []


@contextlib.contextmanager
def section(name):
    """A part of the script: passed if no check failed and nothing escaped it."""
    before = len(FAILURES)
    try:
        yield
    except Exception:
        FAILURES.append(f"{name}: {traceback.format_exc()}")
    if len(FAILURES) > before:
        failed.append(name)
        print(f"FAIL {name}", *FAILURES[before:], sep="\n", flush=True)
    else:
        print(f"SECTION {name} ok", flush=True)


def markers(prefix):
    """pids that left a ``prefix-<pid>`` file in TMPDIR."""
    return {int(f.rsplit("-", 1)[1]) for f in os.listdir(TMPDIR) if f.startswith(prefix + "-")}


def touch(prefix):
    with open(os.path.join(TMPDIR, f"{prefix}-{os.getpid()}"), "a"):
        pass


# --- reusable variables -----------------------------------------------------------
# The seed's contract: created once per worker, reinitialized after every task that
# used it (by default by running the initializer again), readable on the driver.

TMP = TMPDIR


def counting_initializer():
    # Defined in __main__, so it travels by value; the marker counts constructions.
    import os
    open(os.path.join(TMP, f"env-init-{os.getpid()}-{time.monotonic_ns()}"), "w").close()
    return {"log": [], "pid": os.getpid()}


def count_inits():
    out = {}
    for f in os.listdir(TMPDIR):
        if f.startswith("env-init-"):
            pid = int(f.split("-")[2])
            out[pid] = out.get(pid, 0) + 1
    return out


def clear_log(env):
    env["log"].clear()
    return env


@ray.remote
def use_env(i):
    env = ray.reusables.env
    before = list(env["log"])
    env["log"].append(i)           # a mutation no later task may see
    time.sleep(0.01)
    return before, env["pid"]


@ray.remote
def use_plain(i):
    seen = list(ray.reusables.plain)
    ray.reusables.plain.append(i)
    return seen


@ray.remote
def no_env(i):
    return i


with section("reusable"):
    ray.reusables.plain = ray.Reusable(lambda: [])
    # Default reinitializer (the initializer again): no task sees another's append.
    check(ray.get([use_plain.remote(i) for i in range(30)]) == [[]] * 30)
    # Driver reads it too.
    check(ray.reusables.plain == [], ray.reusables.plain)
    check("plain" in ray.reusables)
    expect_raises(AttributeError, getattr, ray.reusables, "never_defined")
    expect_raises(TypeError, setattr, ray.reusables, "bad", 42)

    # A custom reinitializer: the initializer runs once per process, the
    # reinitializer after every task that used it.
    ray.reusables.env = ray.Reusable(counting_initializer, clear_log)
    results = ray.get([use_env.remote(i) for i in range(40)])
    check(all(before == [] for before, _ in results), results)
    worker_pids = {pid for _, pid in results}
    inits = count_inits()
    check(all(inits.get(pid) == 1 for pid in worker_pids), (inits, worker_pids))
    # Tasks that do not use it leave it alone.
    ray.get([no_env.remote(i) for i in range(10)])
    check(count_inits() == inits, (count_inits(), inits))
    report("reusable_worker_pids", len(worker_pids))
    env = ray.reusables.env
    check(env["pid"] == os.getpid() and env["log"] == [], env)

with section("reusable_eager"):
    # "This line will cause env_initializer to run on each worker and on the
    # driver" (the seed): construction happens at assignment, before any task.
    ray.reusables.eager = ray.Reusable(lambda: touch("eager") or "made")
    on_driver = os.getpid() in markers("eager")
    poll_for(lambda: len(markers("eager") - {os.getpid()}) >= NUM_WORKERS, 10)
    on_workers = len(markers("eager") - {os.getpid()})
    check(on_driver and on_workers >= NUM_WORKERS,
          f"after the assignment the initializer ran on the driver: {on_driver}, in "
          f"{on_workers} worker processes (expected {NUM_WORKERS}, one per worker)")

@ray.remote
def nested_child():
    mine = ray.reusables.nest
    seen = list(mine)
    mine.append("child")
    return seen


@ray.remote
def nested_parent(parents):
    mine = ray.reusables.nest
    mine.append("parent")
    mark_started("nest-parent")
    # Every worker runs a parent before any child is submitted: the children
    # run in their parents' waits, in the parents' processes.
    poll_for(lambda: started("nest-parent") >= parents, 30)
    child_saw = ray.get(nested_child.remote())
    return child_saw, list(mine), ray.reusables.nest is mine


def bad_reinit(value):
    raise RuntimeError("reinitializer failed")


@ray.remote
def use_bad():
    return list(ray.reusables.bad_reinit)


with section("reusable_nested"):
    # A task run nested in another's wait builds its own value, and leaves the
    # waiting task's alone.
    ray.reusables.nest = ray.Reusable(lambda: [0])
    results = ray.get([nested_parent.remote(NUM_WORKERS) for _ in range(NUM_WORKERS)])
    check(results == [([0], [0, "parent"], True)] * NUM_WORKERS, results)
    # A reinitializer that raises: the tasks' results stand, the variable is built
    # afresh at its next use.
    ray.reusables.bad_reinit = ray.Reusable(lambda: [7], bad_reinit)
    check(ray.get([use_bad.remote() for _ in range(6)]) == [[7]] * 6)

# --- run_function_on_all_workers --------------------------------------------------


def set_flag(worker_info):
    os.environ["HPC_RAY_TEST_FLAG"] = "set-by-run-function"
    import json
    json._hpc_ray_test_global = ("global", worker_info.get("worker_rank") if isinstance(
        worker_info, dict) else None)


def set_other(*args):
    os.environ["HPC_RAY_TEST_OTHER"] = "via-global-worker"


@ray.remote
def read_flags():
    import json
    time.sleep(0.05)
    return (os.environ.get("HPC_RAY_TEST_FLAG"), os.environ.get("HPC_RAY_TEST_OTHER"),
            getattr(json, "_hpc_ray_test_global", None), os.getpid())


@ray.remote(max_calls=1)
def read_flags_fresh_process():
    return os.environ.get("HPC_RAY_TEST_FLAG"), os.environ.get("HPC_RAY_TEST_OTHER")


@ray.remote(max_retries=0)
def die():
    os._exit(1)


@ray.remote
class FlagReader:
    def read(self):
        return os.environ.get("HPC_RAY_TEST_FLAG"), os.environ.get("HPC_RAY_TEST_OTHER")


with section("run_function"):
    ray.run_function_on_all_workers(set_flag)
    ray.worker.global_worker.run_function_on_all_workers(set_other)
    got = ray.get([read_flags.remote() for _ in range(6 * NUM_WORKERS)])
    for flag, other, glob, _ in got:
        check(flag == "set-by-run-function" and other == "via-global-worker", got)
        check(glob is not None and glob[0] == "global", got)
    report("run_function_pids", len({pid for *_, pid in got}))
    # It also ran here, on the driver.
    check(os.environ.get("HPC_RAY_TEST_FLAG") == "set-by-run-function")
    # Processes started later (after a crash, by max_calls, for an actor) run it too.
    expect_raises(Exception, ray.get, die.remote(), timeout=60)
    got = ray.get([read_flags_fresh_process.remote() for _ in range(2 * NUM_WORKERS)])
    check(all(g == ("set-by-run-function", "via-global-worker") for g in got), got)
    got = ray.get([read_flags.remote() for _ in range(4 * NUM_WORKERS)])
    check(all(g[:2] == ("set-by-run-function", "via-global-worker") for g in got), got)
    reader = FlagReader.remote()
    check(ray.get(reader.read.remote()) == ("set-by-run-function", "via-global-worker"))
    ray.kill(reader)

# --- signals (the three examples of the 0.7 docs, and reset) ----------------------

from hpc_ray.experimental import signal


class UserSignal(signal.Signal):
    def __init__(self, value):
        self.value = value

    def get_value(self):
        return self.value


@ray.remote
def send_signal(value):
    signal.send(UserSignal(value))
    return


@ray.remote
def task():
    raise Exception('exception message')


@ray.remote
class ActorSendSignals(object):
    def send_signals(self, value, count):
        for i in range(count):
            signal.send(UserSignal(value + str(i)))


@ray.remote
class ActorGetAllSignals(object):
    def __init__(self, num_expected_signals, *source_ids):
        self.received_signals = []
        self.num_expected_signals = num_expected_signals
        self.source_ids = source_ids

    def register_handle(self, handle):
        self.this_actor = handle

    def get_signals(self):
        new_signals = signal.receive(self.source_ids, timeout=10)
        self.received_signals.extend(new_signals)
        if len(self.received_signals) < self.num_expected_signals:
            self.this_actor.get_signals.remote()

    def get_count(self):
        return len(self.received_signals)

    def values(self):
        return sorted(s.get_value() for _, s in self.received_signals)


@ray.remote
class Failing:
    def boom(self):
        raise KeyError("actor method failed")


with section("signal_user"):
    signal_value = 'simple signal'
    object_id = send_signal.remote(signal_value)
    result_list = signal.receive([object_id], timeout=10)
    check(len(result_list) == 1, result_list)
    check(result_list[0][0] == object_id)
    check(result_list[0][1].get_value() == 'simple signal')
    # Nothing new since the last receive: empty after the timeout.
    check(signal.receive([object_id], timeout=0.2) == [])
    # reset(): the next receive starts again from the first signal.
    signal.reset()
    again = signal.receive([object_id], timeout=10)
    check([s.get_value() for _, s in again] == ['simple signal'], again)

@ray.remote
class Crashing:
    def crash(self):
        os._exit(1)


with section("signal_error"):
    object_id = task.remote()
    try:
        ray.get(object_id)
    except Exception as e:
        pass
    finally:
        result_list = signal.receive([object_id], timeout=10)
    check(type(result_list[0][1]) == signal.ErrorSignal, result_list)
    error = result_list[0][1].get_error()
    check('exception message' in str(error), str(error))
    # An actor method that raises sends an ErrorSignal from the actor too.
    f = Failing.remote()
    expect_raises(KeyError, ray.get, f.boom.remote())
    got = signal.receive([f], timeout=10)
    check(len(got) == 1 and type(got[0][1]) == signal.ErrorSignal, got)
    check(got[0][0] == f)
    ray.kill(f)
    # A crashed actor signals when it is called (the 0.7 docs' Note): each call
    # that fails for it adds an ActorDiedSignal, an ErrorSignal.
    crashing = Crashing.remote()
    expect_raises(ray.exceptions.RayActorError, ray.get, crashing.crash.remote())
    got = signal.receive([crashing], timeout=10)
    check(len(got) == 1 and isinstance(got[0][1], signal.ErrorSignal)
          and type(got[0][1]) is signal.ActorDiedSignal
          and isinstance(got[0][1].get_error(), ray.exceptions.RayActorError), got)
    expect_raises(ray.exceptions.RayActorError, ray.get, crashing.crash.remote())
    check(len(signal.receive([crashing], timeout=10)) == 1)

with section("signal_actors"):
    a1 = ActorSendSignals.remote()
    a2 = ActorSendSignals.remote()
    signal_value = 'simple signal'
    count = 5
    a1.send_signals.remote(signal_value, count)
    a2.send_signals.remote(signal_value, count)
    b = ActorGetAllSignals.remote(2 * count, *[a1, a2])
    ray.get(b.register_handle.remote(b))
    b.get_signals.remote()
    check(poll_for(lambda: ray.get(b.get_count.remote()) == 2 * count, 30),
          ray.get(b.get_count.remote()))
    check(ray.get(b.values.remote()) == sorted(
        [signal_value + str(i) for i in range(count)] * 2))
    # The driver receives its own copies of the same signals, independently.
    mine = signal.receive([a1, a2], timeout=10)
    deadline = time.monotonic() + 10
    while len(mine) < 2 * count and time.monotonic() < deadline:
        mine += signal.receive([a1, a2], timeout=1)
    check(len(mine) == 2 * count, mine)
    check([s.get_value() for src, s in mine if src == a1] ==
          [signal_value + str(i) for i in range(count)], mine)  # in the order sent
    for a in (a1, a2, b):
        ray.kill(a)

# --- asyncio ----------------------------------------------------------------------

from hpc_ray.experimental import async_api


@ray.remote
def slow_value(x):
    time.sleep(0.2)
    return {'key1': [x]}


@ray.remote
def raises():
    raise ZeroDivisionError("async failure")


@ray.remote
class AsyncTarget:
    def value(self, x):
        return x * 2


async def main():
    direct = await slow_value.remote(1)
    via_future = await async_api.as_future(slow_value.remote(2))
    via_top_level = await ray.as_future(slow_value.remote(3))
    gathered = await asyncio.gather(*[slow_value.remote(i) for i in range(4)])
    try:
        await raises.remote()
    except ZeroDivisionError as e:
        caught = isinstance(e, TaskError)
    else:
        caught = False
    actor = AsyncTarget.remote()
    from_actor = await actor.value.remote(21)
    ray.kill(actor)
    # The loop is not blocked while a ref is awaited.
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    t = asyncio.ensure_future(ticker())
    await slow_value.remote(5)
    t.cancel()
    return direct, via_future, via_top_level, gathered, caught, from_actor, ticks


with section("async"):
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        future = async_api.as_future(slow_value.remote('value'))
        check(loop.run_until_complete(future) == {'key1': ['value']})
        direct, via_future, via_top, gathered, caught, from_actor, ticks = \
            loop.run_until_complete(main())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    check(direct == {'key1': [1]} and via_future == {'key1': [2]} and via_top == {'key1': [3]})
    check(gathered == [{'key1': [i]} for i in range(4)], gathered)
    check(caught, "awaiting a failed task did not raise a TaskError(ZeroDivisionError)")
    check(from_actor == 42)
    check(ticks > 1, ticks)

# --- multiprocessing manager proxies as task arguments (seed 003) ------------------


@ray.remote
def producer(q, i):
    q.put((i, os.getpid()))
    return i


@ray.remote
def waiter(ev, q):
    ok = ev.wait(timeout=30)
    q.put("woke")
    return ok


with section("manager_proxies"):
    # Encode base64 to avoid: Pickling an AuthenticationString object is disallowed.
    encoded = base64.b64encode(mp.current_process().authkey)

    def auth_fn(*args):
        mp.current_process().authkey = base64.b64decode(encoded)

    ray.worker.global_worker.run_function_on_all_workers(auth_fn)
    m = mp.get_context().Manager()
    try:
        q = m.Queue()
        stop = m.Event()
        stop.clear()
        check(ray.get([producer.remote(q, i) for i in range(10)], timeout=60) == list(range(10)))
        items = sorted(q.get(timeout=10) for _ in range(10))
        check([i for i, _ in items] == list(range(10)), items)
        waiters = [waiter.remote(stop, q) for _ in range(NUM_WORKERS)]
        ready, _ = ray.wait(waiters, timeout=0.5)
        check(ready == [], "waiters returned before the event was set")
        stop.set()
        check(ray.get(waiters, timeout=60) == [True] * NUM_WORKERS)
        check([q.get(timeout=10) for _ in range(NUM_WORKERS)] == ["woke"] * NUM_WORKERS)
    finally:
        m.shutdown()

report("failed_sections", failed)
ray.shutdown()
ok("actors_state")  # exits 1 if any check failed
