"""init(num_cpus=0): Ray's driver-only cluster. Tasks and actors that ask for no CPU
run; the cluster reports no CPUs."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import check, ok, report, section

import hpc_ray as ray

ray.init(num_cpus=0)
report("cluster_cpus", ray.cluster_resources().get("CPU", 0))


@ray.remote(num_cpus=0)
def square(x):
    return x * x


@ray.remote(num_cpus=0)
class Box:
    def __init__(self):
        self.items = []

    def add(self, x):
        self.items.append(x)
        return len(self.items)


with section("num_cpus=0 work runs"):
    check(ray.get([square.remote(i) for i in range(5)]) == [0, 1, 4, 9, 16])
    box = Box.remote()
    check(ray.get([box.add.remote(i) for i in range(3)]) == [1, 2, 3])
    check(ray.cluster_resources().get("CPU", 0) == 0, ray.cluster_resources())

ray.shutdown()
ok("api_compat_zero")
