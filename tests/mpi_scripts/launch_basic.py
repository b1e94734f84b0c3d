"""Start-up, lifecycle and basic tasks; the same driver in every launch mode."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys
import time

from _harness import MODE, NUM_WORKERS, TMPDIR, check, expect_raises, init_kwargs, ok, report

# Every rank that runs this file prints this line; the test counts them.
print("BEFORE_INIT", flush=True)

import hpc_ray as ray

check(not ray.is_initialized(), "initialized before init()")
ray.init(**init_kwargs())
# Only the driver gets here: worker ranks serve inside init() and exit from it.
print("AFTER_INIT", flush=True)
check(ray.is_initialized())
report("argv", sys.argv[1:])
report("argv0", os.path.basename(sys.argv[0]))

# A second init() is an error unless asked to ignore it.
err = expect_raises(Exception, ray.init, **init_kwargs())
report("reinit_error", type(err).__name__)
check(isinstance(err, (RuntimeError, ray.exceptions.RayError)), repr(err))
ray.init(ignore_reinit_error=True, **init_kwargs())
check(ray.is_initialized())


@ray.remote
def square(x):
    return x * x


@ray.remote
def whoami():
    return os.getpid()


@ray.remote
def environment_of_task():
    return dict(os.environ)


@ray.remote
def rendezvous(directory, name, expected):
    # Proves `expected` workers run at the same time: each announces itself and
    # waits for the others.
    open(os.path.join(directory, f"started-{name}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sum(f.startswith(f"started-{name}-") for f in os.listdir(directory)) >= expected:
            return os.getpid()
        time.sleep(0.01)
    raise TimeoutError(f"only some of {expected} workers started")


check(ray.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)])
check(ray.get(square.remote(ray.put(7))) == 49)
ready, pending = ray.wait([square.remote(3)], timeout=30)
check(len(ready) == 1 and not pending)

pids = ray.get([whoami.remote() for _ in range(4 * NUM_WORKERS)])
check(os.getpid() not in pids, "a task ran in the driver process")
report("distinct_pids_many_tasks", len(set(pids)))

together = ray.get([rendezvous.remote(TMPDIR, "all", NUM_WORKERS) for _ in range(NUM_WORKERS)])
report("concurrent_workers", len(set(together)))
report("cluster_cpus", ray.cluster_resources().get("CPU"))
# The embedded launcher's HWLOC_XMLFILE (runtime/launch.py) is its own: a task
# sees the driver's value, or none.
task_env = ray.get(environment_of_task.remote())
check(task_env.get("HWLOC_XMLFILE") == os.environ.get("HWLOC_XMLFILE"),
      task_env.get("HWLOC_XMLFILE"))

ray.shutdown()
check(not ray.is_initialized())
ray.shutdown()  # safe twice
check(not ray.is_initialized())
ok("launch_basic")
