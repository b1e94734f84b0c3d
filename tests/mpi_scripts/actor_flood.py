"""The Ray docs' "Passing Around Actor Handles" example: tasks loop forever on
``counter.inc.remote()``. The driver's own calls, a new actor and shutdown must
still be served while they run.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

import psutil

from _harness import NUM_WORKERS, check, init_kwargs, ok, report, section

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
class Counter(object):
    def __init__(self):
        self.counter = 0

    def inc(self):
        self.counter += 1

    def get_counter(self):
        return self.counter


@ray.remote
def f(counter):
    while True:
        counter.inc.remote()


@ray.remote
class Other:
    def ping(self):
        return "pong"


counter = Counter.remote()
[f.remote(counter) for _ in range(NUM_WORKERS + 2)]   # more loops than CPUs, as the docs do
with section("the driver's calls are answered during the flood"):
    counts = []
    rss = []
    for _ in range(8):
        time.sleep(0.5)
        counts.append(ray.get(counter.get_counter.remote(), timeout=20))
        rss.append(psutil.Process().memory_info().rss)
    report("counts", counts)
    check(counts == sorted(counts) and counts[-1] > counts[0], counts)
    # The head's memory stays bounded (loops are slowed to what the actor runs):
    # within 200 MB of where it was after the first second.
    report("rss_growth_mb", (rss[-1] - rss[1]) >> 20)
with section("a new actor answers during the flood"):
    report("new_actor", ray.get(Other.remote().ping.remote(), timeout=30))
t0 = time.monotonic()
ray.shutdown()
report("shutdown_s", round(time.monotonic() - t0, 1))
ok("actor_flood")
