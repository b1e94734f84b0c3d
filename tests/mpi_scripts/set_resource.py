"""Issue 38: experimental.set_resource creates, changes and deletes a node's custom
resource at run time, as in Ray 0.7.

A task that asks for a resource no node has waits and runs once it is created;
queued tasks run when it grows; a shrink or a delete takes nothing from the
tasks that hold it (they finish, and the capacity shrinks as they release);
cluster_resources(), available_resources() and nodes() show each change.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time
import warnings

from _harness import check, expect_raises, init_kwargs, ok, poll_for, report, section, tmp_path

import hpc_ray as ray
from hpc_ray.experimental import set_resource

warnings.simplefilter("ignore")   # (the "stays pending until it fits" warnings)
ray.init(**init_kwargs())


@ray.remote(num_cpus=0)
def rendezvous(name, expected):
    """Start, then wait until ``expected`` tasks of ``name`` have started;
    returns how many had started (all of them, or fewer after 30 s)."""
    open(tmp_path(f"started-{name}-{os.getpid()}"), "w").close()
    seen = lambda: sum(f.startswith(f"started-{name}-") for f in os.listdir(tmp_path("")))
    poll_for(lambda: seen() >= expected, 30)
    return seen()


@ray.remote(num_cpus=0)
def hold_until(path):
    """Hold what it asked for until ``path`` exists."""
    open(path + ".started", "w").close()
    poll_for(lambda: os.path.exists(path), 30)
    return "held"


@ray.remote(num_cpus=0)
def quick():
    return "ran"


@ray.remote(num_cpus=0)
def create_here(name, capacity):
    set_resource(name, capacity)
    return ray.cluster_resources().get(name)


@ray.remote(num_cpus=0)
class Box:
    def node_resource(self, name):
        return ray.available_resources().get(name)


def started(path):
    return poll_for(lambda: os.path.exists(path + ".started"), 30)


def not_done(ref):
    ready, _ = ray.wait([ref], timeout=1)
    return not ready


nodes = ray.nodes()
node_ids = [n["NodeID"] for n in nodes]
report("client_ids", [n["ClientID"] for n in nodes] == node_ids)
driver_node = node_ids[0]

with section("create on the driver's node"):
    set_resource("R", 2)
    report("created_total", ray.cluster_resources().get("R"))
    report("created_available", ray.available_resources().get("R"))
    report("created_on_node", nodes_r := {n["NodeID"]: n["Resources"].get("R")
                                          for n in ray.nodes()})
    check(nodes_r[driver_node] == 2, nodes_r)

with section("a task for a resource no node has runs once it is created"):
    waiting = quick.options(resources={"Q": 1}).remote()
    check(not_done(waiting), "a task for a resource no node has ran")
    set_resource("Q", 1, client_id=node_ids[-1])
    report("infeasible_then_created", ray.get(waiting, timeout=30))
    box = Box.options(resources={"QA": 1}).remote()
    call = box.node_resource.remote("QA")
    check(not_done(call), "an actor for a resource no node has started")
    set_resource("QA", 1)
    report("actor_then_created", ray.get(call, timeout=30))   # the actor holds it: 0 left
    ray.kill(box)

with section("queued tasks run when the resource grows"):
    set_resource("G", 1)
    refs = [rendezvous.options(resources={"G": 1}).remote("grow", 3) for _ in range(3)]
    check(poll_for(lambda: any(f.startswith("started-grow-") for f in os.listdir(tmp_path(""))),
                   30))
    set_resource("G", 3)
    report("grown_concurrent", ray.get(refs, timeout=60))

with section("a shrink takes nothing from holders; the capacity shrinks as they end"):
    holder = hold_until.options(resources={"R": 2}).remote(tmp_path("free-shrink"))
    check(started(tmp_path("free-shrink")))
    set_resource("R", 1)
    report("shrunk_total", ray.cluster_resources().get("R"))
    report("shrunk_available", ray.available_resources().get("R", 0))
    late = quick.options(resources={"R": 1}).remote()
    check(not_done(late), "a task took R while more than its capacity was held")
    open(tmp_path("free-shrink"), "w").close()
    report("shrunk_holder", ray.get(holder, timeout=30))
    report("shrunk_late", ray.get(late, timeout=30))
    report("shrunk_available_after",
           poll_for(lambda: ray.available_resources().get("R"), 30))

with section("a delete waits for the tasks that hold it"):
    holder = hold_until.options(resources={"R": 1}).remote(tmp_path("free-delete"))
    check(started(tmp_path("free-delete")))
    set_resource("R", 0)
    report("deleted_in_cluster", "R" in ray.cluster_resources())
    report("deleted_on_nodes", any("R" in n["Resources"] for n in ray.nodes()))
    open(tmp_path("free-delete"), "w").close()
    report("deleted_holder", ray.get(holder, timeout=30))
    time_left = quick.options(resources={"R": 1}).remote()
    check(not_done(time_left), "a task took a deleted resource")
    set_resource("R", 1)
    check(ray.get(time_left, timeout=30) == "ran")

with section("from a task: the task's node"):
    report("from_task", ray.get(create_here.remote("T", 3), timeout=30))
    report("from_task_seen_by_driver", ray.cluster_resources().get("T"))

with section("bad input"):
    errors = {}
    for args in [("Z", -1), ("Z", 1.5), ("CPU", 4), ("GPU", 1), ("Z", 1, "no-such-node")]:
        err = expect_raises(ValueError, set_resource, *args)
        errors[repr(args)] = str(err)
    report("bad_input", errors)
    check(ray.get(quick.remote()) == "ran")   # the runtime still works

ray.shutdown()
ok("set_resource")
