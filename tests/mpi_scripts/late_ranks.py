"""Under mpiexec every rank runs the script and calls init(). Here ranks 1..N-1
come to it late; rank 0's init() says, once it has waited RANKS_LATE_S (set to
1 s here), what most likely keeps them (``if rank == 0: ray.init()`` would keep
them for good), then goes on when they come."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

from _harness import check, init_kwargs, ok

import hpc_ray as ray
from hpc_ray.transport import comm

comm.RANKS_LATE_S = 1.0
if os.environ.get("PMI_RANK", "0") != "0":
    time.sleep(4)
ray.init(**init_kwargs())


@ray.remote
def square(x):
    return x * x


check(ray.get([square.remote(i) for i in range(4)], timeout=60) == [0, 1, 4, 9])
ray.shutdown()
ok("late_ranks")
