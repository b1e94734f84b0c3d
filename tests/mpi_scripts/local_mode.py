"""init(local_mode=True): every task runs serially in the driver process.

Usage: local_mode.py [then-init]. Under a launcher only rank 0 runs the script
past init() (the other ranks wait for a session); with ``then-init`` the script
then calls a plain init(), whose tasks run on those ranks."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys

import psutil

from _harness import check, expect_raises, ok, report

import hpc_ray as ray

ray.init(local_mode=True)
print("LOCAL BODY RAN", flush=True)
check(ray.is_initialized())
report("children_after_init", len(psutil.Process().children(recursive=True)))

order = []


@ray.remote
def pid_and_value(x):
    order.append(x)  # same process, so this list is the driver's
    return os.getpid(), x


@ray.remote(num_returns=2)
def pair(x):
    return x, -x


@ray.remote
def fails():
    raise KeyError("local boom")


@ray.remote
def nested(depth):
    if depth == 0:
        return 0
    return 1 + ray.get(nested.remote(depth - 1))


results = ray.get([pid_and_value.remote(i) for i in range(5)])
check({pid for pid, _ in results} == {os.getpid()}, results)
check([v for _, v in results] == list(range(5)))
# Ray's local mode calls the function object itself (arguments copied), so a
# task's side effects on the driver's globals are visible: that is what makes it
# useful for debugging.
check(order == list(range(5)),
      f"tasks did not run on the driver's own function objects, in order: {order}")

a, b = pair.remote(3)
check(ray.get([a, b]) == [3, -3])
check(ray.get(pid_and_value.remote(ray.put(11)))[1] == 11)
check(ray.get(nested.remote(5)) == 5)


@ray.remote
def worker_mode():
    return ray.worker.global_worker.mode


# Ray 0.7: in local mode the driver and its tasks are in LOCAL_MODE.
check(ray.worker.global_worker.mode == ray.LOCAL_MODE == 2, ray.worker.global_worker.mode)
check(ray.get(worker_mode.remote()) == ray.LOCAL_MODE)

ready, pending = ray.wait([ray.put(1), a], num_returns=2, timeout=5)
check(len(ready) == 2 and pending == [])

err = expect_raises(Exception, ray.get, fails.remote())
check(isinstance(err, ray.exceptions.TaskError), repr(err))
check(isinstance(err, KeyError), repr(err))
check("local boom" in str(err), str(err))



@ray.remote
class Doubler:
    async def twice(self, x):
        import asyncio
        await asyncio.sleep(0)
        return 2 * x


check(ray.get(Doubler.remote().twice.remote(4)) == 8)   # an async def method

# Reusable variables (seed 000) as on workers: no task sees another's mutation,
# and the driver's own copy is its own.
ray.reusables.seen = ray.Reusable(lambda: [0])


@ray.remote
def use_seen():
    ray.reusables.seen.append(1)
    return list(ray.reusables.seen)


check(ray.get([use_seen.remote() for _ in range(3)]) == [[0, 1]] * 3)
check(ray.reusables.seen == [0], ray.reusables.seen)

# Signals (the 0.7 docs' first two examples): a task's, then a failed task's.
from hpc_ray.experimental import signal


class UserSignal(signal.Signal):
    def __init__(self, value):
        self.value = value


@ray.remote
def send_signal(value):
    signal.send(UserSignal(value))


@ray.remote
def fails_signalled():
    raise ValueError("signalled")


sent = send_signal.remote("simple signal")
got = signal.receive([sent], timeout=5)
check([(src, s.value) for src, s in got] == [(sent, "simple signal")], got)
check(signal.receive([sent], timeout=0) == [])
failed = fails_signalled.remote()
got = signal.receive([failed], timeout=5)
check(len(got) == 1 and type(got[0][1]) is signal.ErrorSignal
      and "signalled" in str(got[0][1].get_error()), got)


@ray.remote
class Leaver:
    def leave(self):
        ray.actor.exit_actor()


leaver = Leaver.remote()
expect_raises(ray.exceptions.RayActorError, ray.get, leaver.leave.remote())
got = signal.receive([leaver], timeout=5)
check([type(s) for _, s in got] == [signal.ActorDiedSignal], got)

kept = ray.put("from the local session")
ray.shutdown()
check(not ray.is_initialized())

if sys.argv[1:] == ["then-init"]:
    ray.init()

    @ray.remote
    def where(*_):
        return os.getpid()

    # A ref kept from the session shutdown() ended raises instead of waiting forever.
    for use in (lambda: ray.get(kept), lambda: ray.wait([kept]), lambda: where.remote(kept)):
        err = expect_raises(ray.exceptions.RayError, use)
        check("earlier session" in str(err), err)

    report("task_pids_after_local", len({ray.get(where.remote()) for _ in range(4)} -
                                        {os.getpid()}))
    ray.shutdown()
ok("local_mode")
