"""What is measured, in which unit, and the targets hpc_ray is held to.

Shared by the child (which runs the workloads) and the parent (which reports them).
No runtime is imported here.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Marks the child's result lines on stdout; Ray and MPI write there too.
MARK = "@@bench "

#: 100 MiB, the size of the "large" array (float64). GB/s means 1e9 bytes/s.
LARGE_BYTES = 100 * 2**20

#: Batch sizes. Big enough that per-batch overhead (thread start, list build) is
#: noise, small enough that a slow system still finishes a batch well inside a rep.
ASYNC_BATCH = 1000
#: Two-actor chains per batch of actor_chain.
CHAIN_BATCH = 100
SYNC_THREAD_BATCH = 200
#: Calls per caller task in ``actor_nn_sync_long_tasks``: long enough that the
#: callers' periodic reports to the head (every 256 calls) happen during the batch.
LONG_CALLER_CALLS = 2000
TREE_LEAVES = 256
WAIT_REFS = 1000
#: Floats in the array argument and result of ``actor_sync_array`` (8 KB: a small
#: model's weights or gradient, as a parameter server passes them).
ARRAY_FLOATS = 1000

#: A rep during which other jobs kept more than this share of all CPUs busy is
#: "noisy": its rate is used only if every rep was noisy (and then marked so).
NOISY = 0.10

#: hpc_ray_mpi and futures_mpi run under ``mpiexec -n 3`` (driver + 2 workers).
#: ``pipe`` is no runtime: a second Python process answering pickled calls over a
#: socketpair, the floor of any sync round trip between two processes here.
SYSTEMS = ("hpc_ray", "hpc_ray_mpi", "ray", "futures", "futures_mpi", "pipe")
HPC_SYSTEMS = ("hpc_ray", "hpc_ray_mpi")
DEFAULT_SYSTEMS = "hpc_ray,ray,futures"


@dataclass(frozen=True)
class Workload:
    name: str
    unit: str
    what: str
    #: Whether an mpi4py.futures version exists (it has no objects, refs or actors).
    futures: bool = False


WORKLOADS = [
    Workload("task_sync", "tasks/s", "get(f.remote()) in a loop: one task round trip", True),
    Workload("task_async", "tasks/s",
             f"get([f.remote() for _ in range({ASYNC_BATCH})]): task throughput", True),
    Workload("put_large", "GB/s", "put(a) of a 100 MiB float64 array (1 GB = 1e9 bytes)"),
    Workload("get_large", "calls/s", "get(ref), ref = put(a) of the 100 MiB array"),
    Workload("put_small", "calls/s", "put(0)"),
    Workload("get_small", "calls/s", "get(ref), ref = put(0)"),
    Workload("wait_1k", "calls/s",
             f"wait(refs, num_returns={WAIT_REFS}) on {WAIT_REFS} finished task refs"),
    Workload("tree_reduce", "reductions/s",
             f"{TREE_LEAVES} leaf refs summed pairwise by {TREE_LEAVES - 1} add(a, b) "
             f"tasks whose arguments are refs; get the root", True),
    Workload("actor_sync", "calls/s", "1:1, get(a.m.remote()) in a loop"),
    Workload("actor_sync_array", "calls/s",
             f"1:1, get(a.half.remote(w)) in a loop, w and the result {ARRAY_FLOATS} float64s"),
    Workload("actor_async", "calls/s",
             f"1:1, get([a.m.remote() for _ in range({ASYNC_BATCH})])"),
    Workload("actor_chain", "chains/s",
             f"get([b.inc.remote(a.inc.remote(i)) for i in range({CHAIN_BATCH})]): each "
             f"call of b takes the ref of a call of a still running"),
    Workload("actor_nn_sync", "calls/s",
             "n:n, 2 actors, 2 driver threads, each looping get(a_i.m.remote())"),
    Workload("actor_nn_async", "calls/s",
             f"n:n, 2 actors, 2 driver threads, each getting batches of {ASYNC_BATCH // 2}"),
    Workload("actor_nn_sync_tasks", "calls/s",
             "n:n, 2 actors, 2 caller tasks, each looping get(a_i.m.remote())"),
    Workload("actor_nn_sync_long_tasks", "calls/s",
             f"n:n, 2 actors, 2 caller tasks, each looping get(a_i.m.remote()) "
             f"{LONG_CALLER_CALLS} times"),
    Workload("actor_nn_async_tasks", "calls/s",
             f"n:n, 2 actors, 2 caller tasks, each getting batches of {ASYNC_BATCH}"),
]
WORKLOAD_BY_NAME = {w.name: w for w in WORKLOADS}

#: workload -> [(reference system, minimum hpc_ray / reference ratio)]; the
#: actor rows' targets are issue 12's (sync 1:1 and n:n, async 1:1: 10x Ray).
TARGETS: dict[str, list[tuple[str, float]]] = {
    "task_sync": [("ray", 5.0)],
    "task_async": [("ray", 10.0), ("futures", 1.0)],
    "put_large": [("ray", 1.0)],
    "get_large": [("ray", 1.0)],
    "actor_sync": [("ray", 10.0)],
    "actor_async": [("ray", 10.0)],
    "actor_nn_sync": [("ray", 10.0)],
    "actor_nn_async": [("ray", 5.0)],
    "actor_nn_sync_tasks": [("ray", 10.0)],
    "actor_nn_sync_long_tasks": [("ray", 10.0)],
    "actor_nn_async_tasks": [("ray", 5.0)],
}


#: The workloads the ``pipe`` floor has: one round trip to another process.
PIPE_WORKLOADS = ("task_sync", "actor_sync")


def applies(system: str, workload: str) -> bool:
    if system == "pipe":
        return workload in PIPE_WORKLOADS
    if system.startswith("futures"):
        return WORKLOAD_BY_NAME[workload].futures
    return True
