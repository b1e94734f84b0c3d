"""num_cpus=0 tasks do not wait for a CPU (the rank starts extra executors for
them and stops them once idle), and a num_cpus=1 actor waiting in get keeps its CPU.

Every worker rank has 1 CPU. Run with HPC_RAY_EXTRA_EXECUTOR_IDLE=1 and
HPC_RAY_ACTOR_STANDBY=0 (no executor started ahead for a next actor).
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

from _harness import NUM_WORKERS, TMPDIR, check, executor_pids, init_kwargs, ok, poll_for, report, section, tmp_path

import hpc_ray as ray
from hpc_ray.exceptions import ActorDiedError

ray.init(**init_kwargs())
ZERO_TASKS = 4


@ray.remote
def hold_cpu(directory, name):
    """Hold a CPU until the file ``name`` appears (polling: no get, nothing lent)."""
    t0 = time.time()
    open(os.path.join(directory, f"holding-{name}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(directory, name)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return t0, time.time()


def hold_every_cpu(name):
    refs = [hold_cpu.remote(TMPDIR, name) for _ in range(NUM_WORKERS)]
    started = poll_for(lambda: sum(f.startswith(f"holding-{name}-")
                                   for f in os.listdir(TMPDIR)) == NUM_WORKERS, 30)
    check(started, f"{NUM_WORKERS} CPU holders never all started")
    return refs


@ray.remote(num_cpus=0)
def meet(directory, name, expected):
    """Wait (up to 30 s) until ``expected`` of these run at once."""
    t0 = time.time()
    open(os.path.join(directory, f"met-{name}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sum(f.startswith(f"met-{name}-") for f in os.listdir(directory)) >= expected:
            time.sleep(0.2)
            return os.getpid(), os.getppid(), t0, time.time()
        time.sleep(0.01)
    raise TimeoutError(f"only some of {expected} num_cpus=0 tasks ran at once")


@ray.remote(num_cpus=0)
def release(path):
    open(path, "w").close()
    return os.getpid()


@ray.remote
def square(x):
    return x * x, time.time()


@ray.remote(num_cpus=0)
def square_via_cpu_task(x):
    return ray.get(square.remote(x))


@ray.remote(num_cpus=1)
class Waiter:
    def pid(self):
        return os.getpid()

    def wait_on(self, refs):
        return ray.get(refs[0])[0]


rank_pids = set()

with section("num_cpus=0 tasks beside busy CPUs"):
    holders = hold_every_cpu("free-1")
    met = ray.get([meet.remote(TMPDIR, "z", ZERO_TASKS) for _ in range(ZERO_TASKS)], timeout=60)
    rank_pids |= {ppid for _, ppid, _, _ in met}
    spans = [(t0, t1) for _, _, t0, t1 in met]
    check(max(t0 for t0, _ in spans) < min(t1 for _, t1 in spans), spans)
    report("zero_cpu_overlap", len({pid for pid, *_ in met}))
    ray.get(release.remote(tmp_path("free-1")), timeout=60)
    ray.get(holders, timeout=60)

with section("num_cpus=0 task waiting on a CPU task"):
    # Every CPU is held until a num_cpus=0 task frees them; another num_cpus=0
    # task waits meanwhile for a CPU task, which runs once a CPU is free.
    holders = hold_every_cpu("free-2")
    via = square_via_cpu_task.remote(7)
    ready, _ = ray.wait([via], timeout=1)
    check(not ready, "a CPU task ran while every CPU was held")
    ray.get(release.remote(tmp_path("free-2")), timeout=60)
    ends = [t1 for _, t1 in ray.get(holders, timeout=60)]
    value, started = ray.get(via, timeout=60)
    check(value == 49, value)
    check(started >= min(ends), ("the CPU task started before any CPU was free", started, ends))
    report("zero_cpu_waits", "ok")

with section("a num_cpus=1 actor waiting in get keeps its CPU"):
    actors = [Waiter.remote() for _ in range(NUM_WORKERS)]
    actor_pids = ray.get([a.pid.remote() for a in actors], timeout=60)
    cpu_ref = square.remote(3)
    calls = [a.wait_on.remote([cpu_ref]) for a in actors]
    ready, _ = ray.wait([cpu_ref], timeout=2)
    check(not ready, "a CPU task ran on a CPU held by a waiting actor")
    ray.kill(actors[0])   # its CPU returns: the task runs, the other actors get it
    check(ray.get(cpu_ref, timeout=60)[0] == 9)
    check(ray.get(calls[1:], timeout=60) == [9] * (NUM_WORKERS - 1))
    try:
        ray.get(calls[0], timeout=60)
        check(False, "the killed actor's call returned")
    except ActorDiedError:
        pass
    for a in actors[1:]:
        ray.kill(a)
    report("actor_keeps_cpu", "ok")


with section("extra executors stop once idle"):
    # HPC_RAY_EXTRA_EXECUTOR_IDLE=1: a rank is back to one executor per CPU.
    check(rank_pids and all(rank_pids), rank_pids)
    settled = poll_for(lambda: all(len(executor_pids(p)) == 1 for p in rank_pids), 30)
    check(settled, {p: len(executor_pids(p)) for p in rank_pids})
    check(ray.get(meet.remote(TMPDIR, "again", 1), timeout=60))  # and start again on demand
    report("extras_retired", "ok")

ray.shutdown()
ok("zero_cpu")
