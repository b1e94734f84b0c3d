"""Idle ranks of a one-host job sleep on their doorbells up to
HPC_RAY_IDLE_POLL_MS (with their sleep flags up within a millisecond or so of
quiet; without flags, after 10 ms); the test sets it to minutes, so each step
after a pause finishes within the test's timeout only if the head's message
woke the rank through its doorbell."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

from _harness import NUM_WORKERS, check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def square(x):
    return x * x


@ray.remote
class Pair:
    def __init__(self):
        self.calls = 0

    def both(self, x):
        self.calls += 1
        return x, self.calls


check(ray.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)])
pair = Pair.remote()
check(ray.get(pair.both.remote(0)) == (0, 1))
steps = []
for i in range(3):
    time.sleep(0.3)   # every worker rank goes quiet
    t = time.monotonic()
    check(ray.get([square.remote(i) for i in range(2 * NUM_WORKERS)])
          == [j * j for j in range(2 * NUM_WORKERS)])
    time.sleep(0.3)
    # Two return values: the call goes through the head and the actor's rank.
    a, b = pair.both.options(num_returns=2).remote(i)
    check(ray.get([a, b]) == [i, i + 2])
    steps.append(round(time.monotonic() - t - 0.3, 3))
report("seconds_per_step", steps)
ray.shutdown()
ok("idle_wakeup")
