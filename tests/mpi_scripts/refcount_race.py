"""Refs dropped right after the submissions that use them: a tree reduction whose
intermediate refs die while the driver keeps submitting (a regression test for a
release that overtook the submission it belonged to and freed its argument)."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def add(a, b):
    return a + b


leaves = [ray.put(i) for i in range(256)]
done = 0
for _ in range(150):
    level = leaves
    while len(level) > 1:
        level = [add.remote(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    check(ray.get(level[0], timeout=20) == sum(range(256)), "tree sum")
    done += 1
report("reductions", done)
ray.shutdown()
ok("refcount_race")
