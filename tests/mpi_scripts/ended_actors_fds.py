"""Actors that end while none of the driver's calls is in flight there (ended by
__ray_terminate__, or killed through a handle from get_actor) leave no socket
open in the driver: it kept one per such actor until it ran out of file
descriptors ("Too many open files")."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import check, init_kwargs, ok, poll_for, report, section

import hpc_ray as ray

ray.init(**init_kwargs())
T = 30


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def inc(self):
        self.n += 1
        return self.n


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def settled(before):
    # The driver looks for ended actors' links in a call such as this one, at
    # most once per driver_calls.ENDED_LOOK (1 s): ask until the actors, which
    # may end late on a loaded machine, are all seen gone.
    return poll_for(lambda: ray.available_resources() and open_fds() - before <= 6, 30)


with section("terminated"):
    before = open_fds()
    for _ in range(25):
        a = Counter.remote()
        ray.get(a.inc.remote(), timeout=T)
        b = Counter.remote()
        ray.get([a.inc.remote(), b.inc.remote()], timeout=T)
        a.__ray_terminate__.remote()
        b.__ray_terminate__.remote()
        del a, b
    check(settled(before), f"{open_fds() - before} more fds after 50 actors ended")
    report("terminated", open_fds() - before)

with section("named, called through get_actor, killed"):
    before = open_fds()
    for i in range(25):
        for name in ("first", "second"):
            Counter.options(name=f"{name}-{i}").remote()
        for name in ("first", "second"):
            handle = ray.get_actor(f"{name}-{i}")
            ray.get(handle.inc.remote(), timeout=T)
            ray.kill(handle)
    check(settled(before), f"{open_fds() - before} more fds after 50 named actors ended")
    report("named", open_fds() - before)

ray.shutdown()
ok("ended_actors_fds")
