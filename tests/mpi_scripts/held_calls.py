"""``.remote()`` with the ref of a direct actor call still running returns at
once, as in Ray: the call is held in the caller until that answer comes
(runtime/held_calls.py). Before, the caller waited in ``.remote()``, so a call
made before the one that lets the first finish never returned, and an actor
created with such a ref as an argument never started. Checked from the driver
and from inside a task; order per actor, refs dropped while held, kill and
wait with held calls."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

from _harness import check, expect_raises, init_kwargs, ok, poll_for, section

import hpc_ray as ray
from hpc_ray.exceptions import ActorDiedError

ray.init(**init_kwargs())


@ray.remote
class Flag:
    def __init__(self):
        self.up = False

    def raise_it(self):
        self.up = True

    def is_up(self):
        return self.up


@ray.remote
class Waiter:
    def ping(self):
        return 0

    def until(self, flag, value):
        while not ray.get(flag.is_up.remote()):
            time.sleep(0.005)
        return value


@ray.remote
class Log:
    def __init__(self, *first):
        self.seen = list(first)

    def add(self, x):
        self.seen.append(x)
        return x

    def seen_list(self):
        return self.seen


@ray.remote
def plus_one(x):
    return x + 1


def trio():
    """A flag, a waiter and a log, up and taking direct calls (a first call answered)."""
    flag, waiter, log = Flag.remote(), Waiter.remote(), Log.remote()
    ray.get([flag.is_up.remote(), waiter.ping.remote(), log.seen_list.remote()], timeout=30)
    return flag, waiter, log


baseline = len(ray.objects())

with section("a call made before the one that lets its argument finish"):
    flag, waiter, log = trio()
    pending = waiter.until.remote(flag, 41)
    t0 = time.monotonic()
    step = log.add.remote(pending)          # held: `pending` runs until raise_it
    task = plus_one.remote(pending)         # held too (a task through the head)
    in_list = log.add.remote([pending])     # a ref nested in an argument
    made = time.monotonic() - t0
    flag.raise_it.remote()
    check(ray.get(step, timeout=30) == 41)
    check(ray.get(task, timeout=30) == 42)
    check(ray.get(ray.get(in_list, timeout=30)[0], timeout=30) == 41)
    check(made < 10, f".remote() waited {made:.1f} s")

@ray.remote
def first_use(x):
    return x if isinstance(x, int) else ray.get(x[0])


with section("a held task's function reaches the head with the task sent after it"):
    # The first call of a function carries its definition; held, it leaves after
    # a later call of the same function, which must then carry it too.
    flag, waiter, _ = trio()
    pending = waiter.until.remote(flag, 5)
    held = first_use.remote([pending])     # a direct result in flight, nested: held
    free = first_use.remote(6)             # sent at once
    check(ray.get(free, timeout=30) == 6)
    flag.raise_it.remote()
    check(ray.get(held, timeout=30) == 5)

with section("an actor created with a direct result as its argument"):
    flag, waiter, _ = trio()
    pending = waiter.until.remote(flag, 7)
    made = Log.remote(pending, [pending])    # held: the creation and its calls
    made.add.remote(8)
    flag.raise_it.remote()
    seen = ray.get(made.seen_list.remote(), timeout=30)
    check(seen[0] == 7 and ray.get(seen[1][0], timeout=30) == 7 and seen[2] == 8, seen)
    # A direct result already answered (no holding): the value itself.
    done = waiter.until.remote(flag, 9)
    ray.wait([done], timeout=30)
    check(ray.get(Log.remote(done).seen_list.remote(), timeout=30) == [9])

with section("a caller's calls to one actor keep their order around a held call"):
    flag, waiter, log = trio()
    pending = waiter.until.remote(flag, "held")
    log.add.remote("before")
    log.add.remote(pending)
    after = [log.add.remote(f"after {i}") for i in range(20)]
    check(ray.wait(after, num_returns=1, timeout=0.2)[0] == [],
          "a call behind the held one ran first")
    flag.raise_it.remote()
    ray.get(after, timeout=30)
    seen = ray.get(log.seen_list.remote(), timeout=30)
    check(seen == ["before", "held"] + [f"after {i}" for i in range(20)], seen)

with section("refs dropped while their calls are held"):
    flag, waiter, log = trio()
    pending = waiter.until.remote(flag, 1)
    log.add.remote(log.add.remote(pending))   # the inner ref dies at once, held
    plus_one.remote(pending)                   # nobody keeps its ref
    del pending
    flag.raise_it.remote()
    check(poll_for(lambda: ray.get(log.seen_list.remote(), timeout=30) == [1, 1], 30),
          ray.get(log.seen_list.remote(), timeout=30))

with section("kill() after a held call: the call goes first when it may"):
    flag, waiter, log = trio()
    pending = waiter.until.remote(flag, 5)
    out = plus_one.remote(log.add.remote(pending))
    flag.raise_it.remote()
    ray.wait([pending], timeout=30)
    ray.kill(waiter)
    check(ray.get(out, timeout=30) == 6)

# A control call waits for no held call: the answer it waits for may come only
# after it. (Before, kill() and get_actor() sent every held call first, waiting
# for those answers: each of these never returned.)
with section("kill() of the actor computing a held call's argument"):
    flag, waiter, log = trio()
    pending = waiter.until.remote(flag, 5)     # the flag is never raised
    step, task = log.add.remote(pending), plus_one.remote(pending)
    ray.kill(waiter)
    for ref in (pending, step, task):          # the held calls fail as their argument
        check("killed by kill()" in str(expect_raises(ActorDiedError, ray.get, ref,
                                                      timeout=30)))
    check(ray.get(log.seen_list.remote(), timeout=30) == [])

with section("kill() of the actor a held call goes to"):
    flag, waiter, log = trio()
    pending = waiter.until.remote(flag, 5)
    step = log.add.remote(pending)
    ray.kill(log)
    flag.raise_it.remote()
    expect_raises(ActorDiedError, ray.get, step, timeout=30)
    check(ray.get(pending, timeout=30) == 5)

with section("kill() of an actor whose creation is held: held behind it"):
    flag, waiter, _ = trio()
    pending = waiter.until.remote(flag, 5)
    made = Log.remote(pending)
    made.add.remote(6)
    ray.kill(made)
    after = made.add.remote(7)
    flag.raise_it.remote()
    expect_raises(ActorDiedError, ray.get, after, timeout=30)

with section("get_actor() while calls are held: the actor it names lets them finish"):
    flag, waiter, log = trio()
    named = Flag.options(name="held-calls-flag").remote()
    pending = waiter.until.remote(named, 5)
    step = log.add.remote(pending)
    ray.get_actor("held-calls-flag").raise_it.remote()
    check(ray.get(step, timeout=30) == 5)
    ray.kill(named)


@ray.remote
def seen_by(log):
    return ray.get(log.seen_list.remote(), timeout=30)


# The handle of an actor whose creation is held carries a ref to its lifetime
# token: a call taking the handle is held behind the creation, and a handle
# dropped meanwhile lets the token go once the head knows the actor. (Before,
# the task's call found no such actor, and the dropped actor never ended.)
with section("the handle of an actor whose creation is held, passed on or dropped"):
    flag, waiter, _ = trio()
    cpus = ray.available_resources().get("CPU", 0)
    pending = waiter.until.remote(flag, 7)
    made = Log.remote(pending)
    seen = seen_by.remote(made)
    Log.options(num_cpus=1).remote(pending)    # its handle dropped at once
    flag.raise_it.remote()
    check(ray.get(seen, timeout=30) == [7])
    check(poll_for(lambda: ray.available_resources().get("CPU", 0) == cpus, 30),
          f"{ray.available_resources()}: the dropped actor still holds its CPU")


@ray.remote
def chain(flag, waiter, log, raise_it):
    """A task that holds a call and ends without waiting for it."""
    ray.get([waiter.ping.remote(), log.seen_list.remote()], timeout=30)   # direct now
    pending = waiter.until.remote(flag, "from a task")
    log.add.remote(pending)
    if raise_it:
        flag.raise_it.remote()
    return "returned"


with section("a task's held calls go out after it ends, as their answers come"):
    for raise_it in (True, False):
        flag, waiter, log = trio()
        # (Not raised by the task: only once its caller has its result. Before,
        # the task's process waited for the answer to send the call, and the
        # task never ended.)
        check(ray.get(chain.remote(flag, waiter, log, raise_it), timeout=30) == "returned")
        flag.raise_it.remote()
        check(poll_for(lambda: ray.get(log.seen_list.remote(), timeout=30) == ["from a task"],
                       30), ray.get(log.seen_list.remote(), timeout=30))

with section("the head's tables end as they began"):
    del flag, waiter, log, made, pending, step, task, in_list, after, out, done, _, named, ref, seen
    del held, free
    check(poll_for(lambda: len(ray.objects()) <= baseline, 30) or print(ray.objects()),
          f"{len(ray.objects())} objects left, {baseline} at the start")

ray.shutdown()
ok("held_calls")
