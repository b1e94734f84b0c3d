"""ray.util.ActorPool (Ray 0.8+) over actors on the worker ranks."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

from _harness import check, expect_raises, init_kwargs, ok, report

import hpc_ray as ray
from hpc_ray.util import ActorPool

ray.init(**init_kwargs())


@ray.remote
class Doubler:
    def double(self, v):
        time.sleep(0.02 * (v % 3))     # later values finish first now and then
        return 2 * v


pool = ActorPool([Doubler.remote() for _ in range(2)])
ordered = list(pool.map(lambda a, v: a.double.remote(v), range(12)))
report("ordered", ordered)
check(sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(12)))
      == [2 * v for v in range(12)])
for v in (5, 6, 7):                   # the third waits for an idle actor
    pool.submit(lambda a, x: a.double.remote(x), v)
check(not pool.has_free())
check([pool.get_next(timeout=30) for _ in range(3)] == [10, 12, 14])
check(not pool.has_next() and pool.has_free())
expect_raises(StopIteration, pool.get_next)
ray.shutdown()
ok("newer_ray_names")
