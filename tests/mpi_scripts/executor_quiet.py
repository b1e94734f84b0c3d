"""init(log_to_driver=False): tasks' prints are not passed to the driver."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs(log_to_driver=False))


@ray.remote
def chatty(i):
    print(f"quiet line {i}", flush=True)
    return i


check(ray.get([chatty.remote(i) for i in range(4)], timeout=60) == [0, 1, 2, 3])
report("pids", "ok")
ray.shutdown()
ok("executor_quiet")
