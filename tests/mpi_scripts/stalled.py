"""Work that waits for CPUs every one of which an actor holds gets one warning
(HPC_RAY_STALL_WARN_S, 1 s here), as Ray warns; a backlog behind running tasks
gets none. Before, both waited without a word."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys
import time

from _harness import NUM_WORKERS, check, init_kwargs, ok, section

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def nap(s):
    time.sleep(s)
    return s


@ray.remote
class Hog:
    def ping(self):
        return 1


with section("a backlog behind running tasks: no warning"):
    check(ray.get([nap.remote(1.5) for _ in range(2 * NUM_WORKERS)], timeout=30)
          == [1.5] * (2 * NUM_WORKERS))
    sys.stderr.write("MARK backlog done\n")   # (the warning goes to stderr too)
    sys.stderr.flush()

with section("every CPU held by actors: one warning, and the task runs once one goes"):
    hogs = [Hog.options(num_cpus=1).remote() for _ in range(NUM_WORKERS)]
    ray.get([h.ping.remote() for h in hogs], timeout=30)
    waiting = nap.remote(0)
    check(ray.wait([waiting], timeout=3)[0] == [], "the task ran while actors held every CPU")
    ray.kill(hogs[0])
    check(ray.get(waiting, timeout=30) == 0)

ray.shutdown()
ok("stalled")
