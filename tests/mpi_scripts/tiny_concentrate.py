"""A node with more worker ranks than cores runs a burst of tiny tasks on as many
ranks as it has cores, and still runs longer tasks on every rank. Every process
of the job keeps to (at most) two CPUs here, whatever the machine has."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

# Before hpc_ray starts anything: ranks, executors and spawned ranks inherit it.
CORES = sorted(os.sched_getaffinity(0))[:2]
os.sched_setaffinity(0, CORES)

import collections
import time

from _harness import NUM_WORKERS, check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def tiny(x):
    return os.getpid()


@ray.remote
def nap(seconds):
    time.sleep(seconds)
    return os.getpid()


check(NUM_WORKERS > len(CORES))
ray.get([tiny.remote(i) for i in range(200)])      # the head times the function
pids = ray.get([tiny.remote(i) for i in range(4000)])
counts = collections.Counter(pids).most_common()
report("cores", len(CORES))
report("busiest_share", sum(n for _, n in counts[:len(CORES)]) / len(pids))
# A function that takes longer is not tiny: one nap on each worker rank.
report("nap_workers", len(set(ray.get([nap.remote(0.3) for _ in range(NUM_WORKERS)]))))
ray.shutdown()
ok("tiny_concentrate")
