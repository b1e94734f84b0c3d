"""Rank 0's comm thread sleeps on its doorbell while long tasks run, and the work
still moves on.

The test sets HPC_RAY_HEAD_IDLE_POLL_MS (and the worker ranks' HPC_RAY_IDLE_POLL_MS)
to minutes: once quiet, the loops' back-off sleeps double towards that. The
driver makes no hpc_ray call while it waits for a step (it would poll MPI
itself), so only the comm thread can move the work on:

- a task submitted while the comm thread sleeps runs (the driver's wake() rings);
- a task queued behind long ones runs when one of them ends (the worker rank,
  which sent nothing for seconds, rings when it sends that task's result).

The sleeps have not grown past a few seconds by then, so a missing ring would
delay these steps rather than stop them; test_idle_polling.py tests each ring.
On one host the loops sleep with their flags up (``comm.SleepFlags``), so
every message rings them.

Last, the driver thread stops spinning through waits that outlast its spin
(``driver.DRIVER_SPINS``): the moving average of its spins that paid drops
below ``wait.KEEP``.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import threading
import time

from _harness import NUM_WORKERS, TMPDIR, check, init_kwargs, ok, report

import hpc_ray as ray
from hpc_ray.runtime import context
from hpc_ray.transport import wait

ray.init(**init_kwargs())
loop = context.current().loop


@ray.remote
def nap(seconds, x):
    time.sleep(seconds)
    return x


@ray.remote
def touch(path):
    with open(path, "w") as f:
        f.write("ran")
    return path


def wait_for_file(path, seconds):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.path.exists(path)


check(ray.get([nap.remote(0, i) for i in range(4)]) == [0, 1, 2, 3])

seen = []
stop = threading.Event()


def watch():
    while not stop.is_set():
        seen.append(loop.bell.sleeping)
        time.sleep(0.005)


watcher = threading.Thread(target=watch)
watcher.start()
naps = [nap.remote(6.0, i) for i in range(NUM_WORKERS)]     # every CPU busy
queued = os.path.join(TMPDIR, "queued")
after_nap = touch.remote(queued)                            # waits for a CPU
deadline = time.monotonic() + 4.0
while not any(seen) and time.monotonic() < deadline:
    time.sleep(0.01)
slept = any(seen)
now = os.path.join(TMPDIR, "now")
zero_cpu = touch.options(num_cpus=0).remote(now)            # needs no CPU: runs now
check(wait_for_file(now, 20), "a task submitted while the comm thread slept never ran")
check(wait_for_file(queued, 30), "a task queued behind long ones never ran after them")
check(ray.get([zero_cpu, after_nap], timeout=20) == [now, queued])
check(ray.get(naps, timeout=20) == list(range(NUM_WORKERS)))
stop.set()
watcher.join()
report("slept_on_bell", slept)
check(slept, "the comm thread never slept on its doorbell during long tasks")
report("flagged", loop.bell.flags is not None)

ctx = context.current()
for _ in range(14):
    check(ray.get(nap.remote(0.1, 7)) == 7)     # each wait outlasts the driver's spin
report("wait_score", ctx.wait_spinner.score)
check(ctx.wait_spinner.score < wait.KEEP,
      f"the driver kept spinning: score {ctx.wait_spinner.score:.2f}")
ray.shutdown()
ok("head_doorbell")
