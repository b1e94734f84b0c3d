"""A reusable variable defined at the top of a script, before init(): under
mpiexec every rank runs that line, embedded only the driver; either way the
workers have it once init() has started the job."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import NUM_WORKERS, check, init_kwargs, ok

import hpc_ray as ray

ray.reusables.counter = ray.Reusable(lambda: [0])


@ray.remote
def use():
    ray.reusables.counter.append(1)
    return list(ray.reusables.counter)


ray.init(**init_kwargs())
check(ray.get([use.remote() for _ in range(4 * NUM_WORKERS)]) == [[0, 1]] * 4 * NUM_WORKERS)
check(ray.reusables.counter == [0], ray.reusables.counter)
ray.shutdown()
ok("reusable_before_init")
