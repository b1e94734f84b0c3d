"""An actor runs its calls one at a time, in submission order, even when a call
waits for the head (a control call, a large put, a get) while later calls for
the same actor are already queued in its executor.

A regression test: an executor used to run queued calls nested inside the wait
of the current one, so two collective ops of one actor could overlap and
deadlock against another actor's (found as an intermittent hang of the
collective tests)."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import numpy as np

from _harness import check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def value(i):
    return i


@ray.remote
class Log:
    def __init__(self):
        self.entries = []
        self.running = 0
        self.overlaps = 0

    def add(self, i, how):
        self.running += 1
        if self.running > 1:
            self.overlaps += 1
        # Each of these waits for a reply from the head.
        if how == "control":
            ray.cluster_resources()
        elif how == "put":
            ray.put(np.zeros(200_000))        # over the inline limit: an ALLOC request
        elif how == "get":
            check(ray.get(value.remote(i)) == i, f"get {i}")
        self.entries.append(i)
        self.running -= 1

    def result(self):
        return self.entries, self.overlaps


calls = 0
for how in ("control", "put", "get"):
    log = Log.remote()
    n = 40
    refs = [log.add.remote(i, how) for i in range(n)]
    ray.get(refs)
    entries, overlaps = ray.get(log.result.remote())
    check(entries == list(range(n)), f"{how}: calls ran out of order: {entries}")
    check(overlaps == 0, f"{how}: {overlaps} calls started while another was running")
    calls += len(entries)
    ray.kill(log)
report("calls", calls)
ray.shutdown()
ok("actor_calls_serial")
