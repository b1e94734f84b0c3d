"""Issue 38: what actors hold, and fractional requests packed as Ray packs them.

Run with one worker rank of one CPU (embedded n=2, or mpiexec -n 2) and
init(resources={"R": 1, "X": 1}):

- a default actor holds no CPU for its lifetime: it and a task run at once;
- an actor declared with num_cpus=1 (or a custom resource) holds it while it
  lives, and its method calls take nothing more;
- num_cpus=0.25 tasks run four at once on the one CPU; resources={"X": 0.5}
  tasks two at once on X=1.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import (check, init_kwargs, mark_started, ok, poll_for, report, section,
                      started, started_before_release, tmp_path)

import hpc_ray as ray

ray.init(**init_kwargs(resources={"R": 1, "X": 1}))
report("cluster_cpus", ray.cluster_resources().get("CPU"))


def meet(name, expected, seconds=30):
    """Start, then wait until ``expected`` of ``name`` have started (at most
    ``seconds``); returns how many had started."""
    mark_started(name)
    poll_for(lambda: started(name) >= expected, seconds)
    return started(name)


@ray.remote
def meet_task(name, expected, seconds=30):
    return meet(name, expected, seconds)


@ray.remote
def quick():
    return "ran"


@ray.remote
class Default:
    def meet(self, name, expected):
        return meet(name, expected)

    def available(self):
        return ray.available_resources()


@ray.remote(num_cpus=1)
class OneCPU:
    def available(self):
        return ray.available_resources()


@ray.remote(num_cpus=0, resources={"R": 1})
class HoldsR:
    def available(self):
        return ray.available_resources()


def not_done(ref):
    ready, _ = ray.wait([ref], timeout=1)
    return not ready


with section("a default actor holds no CPU"):
    actor = Default.remote()
    report("default_available", ray.get(actor.available.remote(), timeout=30).get("CPU", 0))
    both = [actor.meet.remote("default", 2), meet_task.remote("default", 2)]
    report("default_and_task", ray.get(both, timeout=60))
    ray.kill(actor)

with section("an actor with num_cpus=1 holds it while it lives"):
    actor = OneCPU.remote()
    report("one_cpu_available", ray.get(actor.available.remote(), timeout=30).get("CPU", 0))
    report("one_cpu_driver_sees", ray.available_resources().get("CPU", 0))
    task = quick.remote()
    report("one_cpu_task_waits", not_done(task))
    ray.kill(actor)
    report("one_cpu_task_after_kill", ray.get(task, timeout=30))
    report("one_cpu_back", poll_for(lambda: ray.available_resources().get("CPU", 0), 30))

with section("an actor with a custom resource holds it while it lives"):
    actor = HoldsR.remote()
    during = [ray.get(actor.available.remote(), timeout=30).get("R", 0) for _ in range(3)]
    report("custom_during_calls", during)
    report("custom_cpu_during_calls", ray.get(actor.available.remote()).get("CPU", 0))
    ray.kill(actor)
    report("custom_back", poll_for(lambda: ray.available_resources().get("R", 0), 30))

@ray.remote
def gate(name, release):
    mark_started(name)
    poll_for(lambda: os.path.exists(release), 30)
    return "released"


with section("fractional CPUs pack"):
    quarters = [meet_task.options(num_cpus=0.25).remote("quarter", 4) for _ in range(4)]
    report("quarters_at_once", ray.get(quarters, timeout=60))
    report("quarters_of_five", started_before_release(gate, "five", 5, num_cpus=0.25))

with section("fractions and whole CPUs share the one CPU"):
    whole = gate.remote("whole-1", tmp_path("release-whole-1"))
    poll_for(lambda: started("whole-1") >= 1, 30)
    quarters = [gate.options(num_cpus=0.25).remote("q-1", tmp_path("release-q-1"))
                for _ in range(2)]
    ray.wait(quarters, timeout=1)
    report("quarters_beside_whole", started("q-1"))
    open(tmp_path("release-whole-1"), "w").close()
    check(poll_for(lambda: started("q-1") >= 2, 30))
    open(tmp_path("release-q-1"), "w").close()
    ray.get(quarters + [whole], timeout=60)
    quarters = [gate.options(num_cpus=0.25).remote("q-2", tmp_path("release-q-2"))
                for _ in range(2)]
    poll_for(lambda: started("q-2") >= 2, 30)
    whole = gate.remote("whole-2", tmp_path("release-whole-2"))
    ray.wait([whole], timeout=1)
    report("whole_beside_quarters", started("whole-2"))
    open(tmp_path("release-q-2"), "w").close()
    check(poll_for(lambda: started("whole-2") >= 1, 30))
    open(tmp_path("release-whole-2"), "w").close()
    ray.get(quarters + [whole], timeout=60)

with section("fractional custom resources pack"):
    halves = [meet_task.options(num_cpus=0, resources={"X": 0.5}).remote("half", 2)
              for _ in range(2)]
    report("halves_at_once", ray.get(halves, timeout=60))
    report("halves_of_three",
           started_before_release(gate, "three", 3, num_cpus=0, resources={"X": 0.5}))

check(ray.get(quick.remote(), timeout=30) == "ran")
ray.shutdown()
ok("node_pool")
