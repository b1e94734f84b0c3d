"""Issue 12: tasks and actors call actors on their host straight over a socket
(runtime/peer_calls.py), and what the user sees is what the head's path gives:
results of every kind, errors, order when some calls must take the head's path,
refs that leave the caller, wait and get timeouts, a dead actor, a dropped
handle, CPU lending while a caller waits, and no object left at the head."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import threading
import time

import numpy as np

from _harness import check, expect_raises, init_kwargs, ok, poll_for, report, section

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
class Box:
    def __init__(self):
        self.seen = []

    def add(self, x):
        self.seen.append(x if isinstance(x, int) else f"array{np.shape(x)}")
        return len(self.seen)

    def seen_list(self):
        return self.seen

    def big(self, n):
        return np.full(n, 3.0)          # 8 * n bytes: past the inline limit

    def nested(self, x):
        return [ray.put(x)]             # a ref inside the result

    def fail(self):
        raise ValueError("boom in Box.fail")

    def nap(self, s):
        time.sleep(s)
        return s

    def die(self):
        os._exit(1)

    def pid(self):
        return os.getpid()

    def echo(self, x):
        return x

    def keep(self, arr):
        self.kept = arr
        return arr.sum()

    def kept_sum(self):
        return self.kept.sum()

    def size(self, arr):
        return arr.size

    def run_task(self):
        return ray.get(plus_one.remote(41))   # needs a CPU while the callers wait


@ray.remote
def plus_one(x):
    return x + 1


@ray.remote
def boom():
    raise ValueError("boom task")


@ray.remote
def far_array():
    return np.zeros(1 << 15)


@ray.remote
def total(values):
    return sum(ray.get(values))


def used_direct_calls():
    """Inside a task: whether this process has a direct socket to some actor."""
    from hpc_ray.runtime import context
    peer = getattr(context.current(), "peer", None)
    return peer is not None and bool(peer.links)


@ray.remote
def results_of_every_kind(box):
    out = {}
    out["plain"] = ray.get(box.add.remote(1))
    arr = ray.get(box.big.remote(1 << 15))
    out["big"] = [int(arr.shape[0]), float(arr[-1])]
    inner = ray.get(box.nested.remote("inside"))
    out["nested"] = ray.get(inner[0])
    try:
        ray.get(box.fail.remote())
        out["error"] = "no error"
    except ValueError as err:
        out["error"] = "ValueError" if "boom in Box.fail" in str(err) else str(err)
    out["direct"] = used_direct_calls()
    return out


@ray.remote
def ordered_calls(box, n):
    # Calls with retries take the head's path, the others go direct (with refs
    # among their arguments or not): one order all the same.
    refs = [box.add.remote(far_array.remote()) if i % 6 == 2 else
            box.add.options(max_retries=1).remote(i) if i % 6 == 4 else
            box.add.remote(i) for i in range(n)]
    return ray.get(refs)


@ray.remote
def arguments_with_refs(box):
    small = ray.put(5)
    big = ray.put(np.arange(1 << 15, dtype=np.float64))      # a view into the store
    failed = boom.remote()
    out = {"small": ray.get(box.echo.remote(small)),
           "big": float(ray.get(box.keep.remote(big)))}
    del big                       # the actor keeps a view of it: it must stay valid,
    filler = [ray.put(np.full(1 << 15, -1.0)) for _ in range(8)]   # not be reused
    out["kept"] = float(ray.get(box.kept_sum.remote()))
    del filler
    out["nested"] = ray.get(box.echo.remote([small]))[0] == small
    out["large_args"] = int(ray.get(box.size.remote(np.ones(1 << 16))))
    try:
        ray.get(box.echo.remote(failed))
        out["failed_arg"] = "returned"
    except ValueError as err:
        out["failed_arg"] = "ValueError" if "boom task" in str(err) else str(err)
    return out


@ray.remote
def refs_that_leave(box):
    a = box.add.remote(10)
    b = box.add.remote(20)
    c = box.add.remote(30)
    return {"returned": a, "in_a_list": total.remote([b]), "as_arg": plus_one.remote(c),
            "put": ray.put([box.add.remote(40)])}


@ray.remote
def waits(box):
    slow = box.nap.remote(1.0)
    fast = plus_one.remote(1)
    ready, rest = ray.wait([slow, fast], num_returns=1, timeout=20)
    first = "fast" if ready == [fast] else "slow" if ready == [slow] else repr(ready)
    ready, rest = ray.wait([slow], timeout=0.05)
    timed_out = (ready, len(rest))
    try:
        ray.get(box.nap.remote(1.0), timeout=0.1)
        get_timeout = "returned"
    except ray.exceptions.GetTimeoutError:
        get_timeout = "GetTimeoutError"
    ready, rest = ray.wait([slow, fast], num_returns=2, timeout=20)
    return {"first": first, "timed_out": [timed_out[0], timed_out[1]],
            "get_timeout": get_timeout, "both": len(ready)}


@ray.remote
def dropped_handle():
    box = Box.remote()
    ray.get(box.pid.remote())
    ref = box.add.remote(5)
    del box
    return ray.get(ref)


@ray.remote
def call_dead_actor(box):
    pid = ray.get(box.pid.remote())
    errors = []
    for ref in (box.die.remote(), box.add.remote(1)):
        try:
            ray.get(ref, timeout=30)
            errors.append("returned")
        except ray.exceptions.RayActorError as err:
            # Worded as the head words the calls it loses or that reach a dead actor
            # (the calls may have gone either way): which actor, which call.
            text = str(err)
            errors.append("RayActorError" if "actor Box" in text and
                          ("Box.die" in text or "Box.add" in text) else text)
    return pid, errors


@ray.remote
class Caller:
    def __init__(self, box):
        self.box = box

    def calls(self, n):
        return ray.get([self.box.add.remote(i) for i in range(n)])


@ray.remote
def waits_on_actor_that_needs_a_cpu(box):
    return ray.get(box.run_task.remote())


box = Box.remote()
ray.get(box.pid.remote(), timeout=30)

with section("results of every kind"):
    got = ray.get(results_of_every_kind.remote(box), timeout=60)
    direct = os.environ.get("HPC_RAY_TEST_EXPECT_DIRECT", "1") == "1"
    check(got == {"plain": 1, "big": [1 << 15, 3.0], "nested": "inside",
                  "error": "ValueError", "direct": direct}, got)

with section("order across both paths"):
    box2 = Box.remote()
    ray.get(box2.pid.remote(), timeout=30)
    got = ray.get(ordered_calls.remote(box2, 40), timeout=60)
    check(got == list(range(1, 41)), f"every call ran once, in order: {got}")
    seen = ray.get(box2.seen_list.remote(), timeout=30)
    want = ["array(32768,)" if i % 6 == 2 else i for i in range(40)]
    check(seen == want, f"the actor saw the calls in the order made: {seen}")

with section("arguments with refs"):
    got = ray.get(arguments_with_refs.remote(box), timeout=60)
    want_sum = float(np.arange(1 << 15).sum())
    check(got == {"small": 5, "big": want_sum, "kept": want_sum, "nested": True,
                  "large_args": 1 << 16, "failed_arg": "ValueError"}, got)

@ray.remote
def chained_in_a_task(box):
    a = box.echo.remote(np.arange(4.0))
    b = box.echo.remote(a)                 # a's value goes with the call
    return {"array": ray.get(b, timeout=30).tolist(),
            "int": ray.get(box.echo.remote(box.echo.remote(7)), timeout=30),
            "a_at_head": a.hex() in ray.objects()}


with section("results passed on as arguments"):
    # A caller's own small result as the argument of its next call travels with
    # that call (peer_calls.inline_args): the value the actor gets is the same,
    # and the result never becomes an object at the head. (``direct``: set in the
    # first section.)
    w = box.echo.remote(np.arange(5.0))
    for _ in range(3):
        w = box.echo.remote(w)              # in flight each time: waited for first
    check(ray.get(w, timeout=30).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0], "chained array")
    r = box.echo.remote(b"xy" * 3000)
    check(ray.get(box.echo.remote(r), timeout=30) == b"xy" * 3000, "chained bytes")
    on_head = ray.objects()
    check((r.hex() in on_head, w.hex() in on_head) == (not direct, not direct),
          f"direct results at the head: {r.hex() in on_head}, {w.hex() in on_head}")
    nested = box.nested.remote(3)           # a ref inside: it goes through the head
    check(ray.get(ray.get(box.echo.remote(nested), timeout=30)[0], timeout=30) == 3,
          "a result holding a ref, passed on")
    err = expect_raises(ValueError, ray.get, box.echo.remote(box.fail.remote()), timeout=30)
    check(err is not None and "boom in Box.fail" in str(err), f"a failed result passed on: {err}")
    # The driver's calls also take the head's small objects with them.
    put_ref, task_ref = ray.put(np.arange(3)), plus_one.remote(4)
    check(ray.get(box.echo.remote(put_ref), timeout=30).tolist() == [0, 1, 2], "a put")
    check(ray.get(box.echo.remote(task_ref), timeout=30) == 5, "a task's result")
    holder = ray.put([put_ref])             # a ref inside: the actor fetches it
    check(ray.get(ray.get(box.echo.remote(holder), timeout=30)[0], timeout=30).tolist()
          == [0, 1, 2], "a put holding a ref")
    err = expect_raises(ValueError, ray.get, box.echo.remote(boom.remote()), timeout=30)
    check(err is not None and "boom task" in str(err), f"a failed task passed on: {err}")
    del put_ref, task_ref, holder
    got = ray.get(chained_in_a_task.remote(box), timeout=60)
    check(got == {"array": [0.0, 1.0, 2.0, 3.0], "int": 7, "a_at_head": not direct}, got)
    del w, r, nested, err

with section("refs that leave the caller"):
    box3 = Box.remote()
    ray.get(box3.pid.remote(), timeout=30)
    out = ray.get(refs_that_leave.remote(box3), timeout=60)
    check(ray.get(out["returned"], timeout=30) == 1, "a returned ref")
    check(ray.get(out["in_a_list"], timeout=30) == 2, "a ref inside a task's argument")
    check(ray.get(out["as_arg"], timeout=30) == 4, "a ref as a task's argument")
    inner = ray.get(out["put"], timeout=30)
    check(ray.get(inner[0], timeout=30) == 4, "a ref inside a put value")
    del out, inner

with section("wait and timeouts"):
    got = ray.get(waits.remote(box), timeout=60)
    check(got == {"first": "fast", "timed_out": [[], 1], "get_timeout": "GetTimeoutError",
                  "both": 2}, got)

with section("a dropped handle"):
    check(ray.get(dropped_handle.remote(), timeout=60) == 1, "the call in flight finished")

with section("an actor calling an actor"):
    caller = Caller.remote(box)
    got = ray.get(caller.calls.remote(20), timeout=60)
    check(len(got) == 20 and got == sorted(got), got)

with section("callers waiting lend their CPUs"):
    # Two tasks hold both CPUs while they wait for the actor, whose call needs a CPU.
    got = ray.get([waits_on_actor_that_needs_a_cpu.remote(box) for _ in range(2)],
                  timeout=60)
    check(got == [42, 42], got)

def batches_from_threads(actors, rounds, n):
    """Threads each getting batches of calls to their own actor; the answers of one
    thread's calls are often read by the other (a race lost a result once)."""
    import threading
    got = []

    def loop(a):
        for _ in range(rounds):
            got.append(len(ray.get([a.add.remote(1) for _ in range(n)], timeout=30)))

    threads = [threading.Thread(target=loop, args=(a,)) for a in actors]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return got


@ray.remote
def batches_in_a_task(actors, rounds, n):
    return batches_from_threads(actors, rounds, n)


with section("threads of the driver and of a task, batches of calls"):
    pair = [Box.remote(), Box.remote()]
    got = batches_from_threads(pair, 100, 200)
    check(got == [200] * 200, f"driver threads: {len(got)} of 200 batches answered")
    got = ray.get(batches_in_a_task.remote(pair, 100, 200), timeout=60)
    check(got == [200] * 200, f"a task's threads: {len(got)} of 200 batches answered")
    del pair

@ray.remote
def sync_calls_from_threads(actors, n):
    """Threads of one task, each making sync calls to its own actor: a thread
    waiting for its answer reads only its own actor's socket while no other
    thread waits (ExecutorTransport.recv_answer), every socket otherwise."""
    import threading
    counts = {}

    def loop(i, a):
        counts[i] = [ray.get(a.add.remote(1)) for _ in range(n)]

    threads = [threading.Thread(target=loop, args=(i, a)) for i, a in enumerate(actors)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return counts


with section("sync calls from a task's threads"):
    pair = [Box.remote(), Box.remote()]
    counts = ray.get(sync_calls_from_threads.remote(pair, 300), timeout=60)
    check(counts == {0: list(range(1, 301)), 1: list(range(1, 301))},
          f"answers: {[(i, c[:3], len(c)) for i, c in counts.items()]}")
    del pair

with section("driver threads whose calls share actors"):
    # Each thread reads the sockets of the actors it waits on; one that waits
    # on an actor another thread is reading waits for that thread's turn.
    pair = [Box.remote(), Box.remote()]
    answers = {}

    def mixed(i):
        got = []
        for k in range(300):
            if i < 2:
                got.append(ray.get(pair[i].add.remote(1), timeout=30))
            else:
                got.extend(ray.get([a.add.remote(1) for a in pair], timeout=30))
        answers[i] = got

    threads = [threading.Thread(target=mixed, args=(i,)) for i in range(3)]
    [t.start() for t in threads]
    [t.join(timeout=60) for t in threads]
    check(sorted(answers) == [0, 1, 2], f"threads that finished: {sorted(answers)}")
    seen = ray.get([a.seen_list.remote() for a in pair])
    check([len(x) for x in seen] == [600, 600], f"calls the actors ran: {[len(x) for x in seen]}")
    for i in (0, 1):
        # A thread's own answers grow: each counts the calls its actor ran so far.
        check(answers[i] == sorted(answers[i]) and len(set(answers[i])) == 300,
              f"thread {i}'s answers: {answers[i][:5]}...")
    del pair

with section("sync calls from two driver threads, one actor each"):
    pair = [Box.remote(), Box.remote()]
    counts = {}

    def sync_loop(i, a):
        counts[i] = [ray.get(a.add.remote(1), timeout=30) for _ in range(400)]

    threads = [threading.Thread(target=sync_loop, args=(i, a)) for i, a in enumerate(pair)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    check(counts == {0: list(range(1, 401)), 1: list(range(1, 401))},
          f"answers: {[(i, c[:3], len(c)) for i, c in counts.items()]}")
    del pair

with section("a dead actor"):
    doomed = Box.remote()
    pid, errors = ray.get(call_dead_actor.remote(doomed), timeout=60)
    check(errors == ["RayActorError", "RayActorError"], errors)
    err = expect_raises(ray.exceptions.RayActorError, ray.get, doomed.add.remote(2), timeout=30)
    check(err is not None, "the driver's call fails too")

with section("tasks() and the timeline show direct calls"):
    tasks = ray.tasks()
    adds = [t for t in tasks.values() if t["FunctionName"] == "Box.add"]
    # ordered_calls alone made 40 calls to Box.add, some direct, some through the head.
    check(len(adds) >= 40 and all(t["State"] in ("FINISHED", "FAILED") for t in adds),
          f"{len(adds)} Box.add calls in tasks(): {adds[:3]}")
    events = [ev for ev in ray.timeline() if ev.get("name") == "Box.add"]
    check(len(events) >= 40, f"{len(events)} Box.add spans in the timeline")

with section("nothing left at the head"):
    # Every handle gone: the actors end and their lifetime tokens go; no result
    # of a direct call was ever an object there, those that left the callers were.
    del got, err, box, box2, box3, caller, doomed
    check(poll_for(lambda: not ray.objects(), 30), f"objects left: {ray.objects()}")

report("done", True)
ray.shutdown()
ok("peer_calls")
