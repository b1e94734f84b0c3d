"""After a burst of tiny tasks (ranks batch many of one function per executor),
a rank hands its executor only an eighth of its queue of a function it has not
timed yet (here one task at a time): the rest stay in the rank's queue, where
the head can take them back for a rank that went idle. So one long task of a
new function does not hold back the short ones queued with it while the other
worker idles: they all end while it runs. (``test_introspection`` has the same
for a function that returned at once the few times it ran before.)"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import collections
import time

from _harness import NUM_WORKERS, check, init_kwargs, ok, poll_for, report, tmp_path

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def tiny(x):
    return x


@ray.remote
def nap(seconds, gate=None):
    time.sleep(seconds)
    # The long one is held until the driver has every short one's result: one
    # batched behind it would hold up that get for good (cut by its timeout).
    if gate is not None:
        poll_for(lambda: os.path.exists(gate), 60)
    return os.getpid()


check(NUM_WORKERS == 2)
check(ray.get([tiny.remote(i) for i in range(3000)]) == list(range(3000)))
# The long nap is placed first; the short ones alternate between the two workers.
gate = tmp_path("long-nap-may-end")
long_ref = nap.remote(0.0, gate)
short = ray.get([nap.remote(0.05) for _ in range(9)], timeout=60)
open(gate, "w").close()
pids = [ray.get(long_ref, timeout=60)] + short
long_pid = pids[0]
report("naps_with_the_long_one", collections.Counter(pids)[long_pid])
report("workers_used", len(set(pids)))
ray.shutdown()
ok("batch_balance")
