"""Threads waiting in get() or wait() when another thread calls shutdown(): each
raises RayError at once (its results will not come), with or without a timeout,
for a task's result and for a call straight to an actor; the program then ends
(a thread pool's threads are joined at exit)."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import concurrent.futures
import threading
import time

from _harness import check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def slow():
    time.sleep(30)
    return "late"


@ray.remote
class Slow:
    def ping(self):
        return "pong"

    def slow(self):
        time.sleep(30)
        return "late"


actor = Slow.remote()
for _ in range(3):       # (by then its calls go straight to its process)
    ray.get(actor.ping.remote())
    time.sleep(0.1)

cases = {
    "get(task)": lambda: ray.get(slow.remote()),
    "get(actor)": lambda: ray.get(actor.slow.remote()),
    "get(task, timeout=20)": lambda: ray.get(slow.remote(), timeout=20),
    "wait(task)": lambda: ray.wait([slow.remote()]),
    "wait(task, timeout=20)": lambda: ray.wait([slow.remote()], timeout=20),
}
#: Set by each thread as it calls its case: then it is a call away from its wait.
calling = {name: threading.Event() for name in cases}


def outcome(name):
    calling[name].set()
    try:
        return ("returned", cases[name]())
    except ray.exceptions.RayError as exc:
        return ("raised", "shutdown() ended the session" in str(exc))


pool = concurrent.futures.ThreadPoolExecutor(len(cases))
futures = {name: pool.submit(outcome, name) for name in cases}
check(all(event.wait(30) for event in calling.values()), "a thread never started")
time.sleep(1.0)   # (from there into get or wait: a submission, microseconds)
started = time.monotonic()
threading.Thread(target=ray.shutdown).start()
got = {name: f.result(timeout=20) for name, f in futures.items()}
took = time.monotonic() - started
check(got == {name: ("raised", True) for name in cases}, got)
report("waiters_ended_after_s", round(took, 1))
pool.shutdown()
ok("shutdown_waiters")
