"""Issue 38: node_pool.py's facts with worker ranks on two nodes (one CPU each;
init(resources={"X": 1}) is one X, on one node, as Ray gives it to the head's
node): fractional requests pack on every rank of both nodes, whole-CPU actors
hold their CPU while they live, and a task waits until one of them is killed.

Reports the number of worker ranks it saw, the stores (nodes) each packed batch
ran in, and how many started before a release.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import (check, init_kwargs, mark_started, ok, poll_for, report, section,
                      started_before_release)

import hpc_ray as ray

ray.init(**init_kwargs(resources={"X": 1}))
W = int(ray.cluster_resources().get("CPU", 0))
report("cluster_cpus", W)
report("cluster_x", ray.cluster_resources().get("X"))
report("x_nodes", [n["NodeID"] for n in ray.nodes() if "X" in n["Resources"]])


def store():
    with open("/proc/self/maps") as f:
        return next(int(line.split()[4]) for line in f if "memfd:hpc_ray_store" in line)


@ray.remote
def gate(name, release):
    """Start, wait for ``release``; return this task's store."""
    mark_started(name)
    poll_for(lambda: os.path.exists(release), 60)
    return store()


@ray.remote
def quick():
    return store()


@ray.remote(num_cpus=1)
class OneCPU:
    def where(self):
        return store()


def released_batch(name, n, **options):
    """How many of ``n`` gated tasks started before the release, and the number
    of stores they ran in."""
    before, stores = started_before_release(gate, name, n, **options)
    return before, len(set(stores))


with section("fractional CPUs pack on every rank of both nodes"):
    report("quarters", released_batch("quarter", 4 * W + 1, num_cpus=0.25))

with section("a fractional custom resource packs on its node"):
    report("halves", released_batch("half", 3, num_cpus=0, resources={"X": 0.5}))

with section("whole-CPU actors hold their CPUs while they live"):
    actors = [OneCPU.remote() for _ in range(W)]
    report("actor_stores", len(set(ray.get([a.where.remote() for a in actors], timeout=60))))
    report("actors_driver_sees", ray.available_resources().get("CPU", 0))
    task = quick.remote()
    ready, _ = ray.wait([task], timeout=1)
    report("task_waits", not ready)
    ray.kill(actors[0])
    check(ray.get(task, timeout=30) is not None)
    report("task_after_kill", "ran")
    for a in actors[1:]:
        ray.kill(a)
    report("cpus_back", poll_for(lambda: ray.available_resources().get("CPU", 0) >= W and
                                 ray.available_resources()["CPU"], 30))

ray.shutdown()
ok("node_pool_nodes")
