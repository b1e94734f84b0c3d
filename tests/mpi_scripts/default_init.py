"""hpc_ray.init() with no arguments at all, whatever the launch."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import check, ok, report

import hpc_ray as ray

ray.init()


@ray.remote
def square(x):
    return x * x


report("cluster_cpus", ray.cluster_resources().get("CPU"))
report("squares", ray.get([square.remote(i) for i in range(5)]))
ray.shutdown()
check(not ray.is_initialized())
ok("default_init")
