"""A task that runs a small MPI solver of its own (MPI_Comm_spawn from its
process, a singleton) gets its answer, and the job goes on when that process
ends: MPICH's launcher then SIGKILLs the process group of the process that
started it, which was the worker rank's, so the rank died with it (an embedded
session broke; under mpiexec the job was killed, status 9)."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys

from _harness import check, init_kwargs, ok, poll_for, report, section, tmp_path

import hpc_ray as ray

ray.init(**init_kwargs())
SOLVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_spawned_solver.py")


@ray.remote(max_calls=1)   # (its process ends right after: the case that killed the rank)
def solve(n, done):
    from mpi4py import MPI
    child = MPI.COMM_SELF.Spawn(sys.executable, [SOLVER, done], maxprocs=2)
    child.bcast(n, root=MPI.ROOT)
    total = child.reduce(None, op=MPI.SUM, root=MPI.ROOT)
    child.Disconnect()
    # (The solver's processes end on their own; waited for, they take their
    # /dev/shm segment with them before this process's end stops them.)
    poll_for(lambda: all(os.path.exists(f"{done}-{r}") for r in (0, 1)), 30)
    return total


@ray.remote
def plain(x):
    return x + 1


with section("one solver"):
    check(ray.get(solve.remote(1000, tmp_path("first")), timeout=60) == 499500)
with section("the ranks serve on"):
    check(ray.get([plain.remote(i) for i in range(6)], timeout=60) == [1, 2, 3, 4, 5, 6])
with section("two solvers at once"):
    got = ray.get([solve.remote(100, tmp_path("a")), solve.remote(10, tmp_path("b"))],
                  timeout=60)
    check(got == [4950, 45], got)
    report("solved", got)
ray.shutdown()
print("AFTER SHUTDOWN", flush=True)
ok("task_spawns_mpi")
