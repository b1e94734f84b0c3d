"""set_resource on chosen nodes: the driver alone on node 0, two nodes of two
worker ranks (fake hosts). A resource set with a node's id is that node's only;
one set from a task with no id is the task's node's. Prints the stores (one per
node) the tasks ran on."""
import faulthandler
import json
import os

import hpc_ray as ray
from hpc_ray.experimental import set_resource

faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", 120)) - 5,
                                  exit=True)


def store(default=StopIteration):
    """The inode of the node store this process maps (``default`` if none)."""
    with open("/proc/self/maps") as f:
        found = (int(line.split()[4]) for line in f if "memfd:hpc_ray_store" in line)
        return next(found) if default is StopIteration else next(found, default)


@ray.remote(num_cpus=0)
def where():
    return store()


@ray.remote
def set_here(name):
    set_resource(name, 2)
    return store()


def report(key, value):
    print(f"RESULT {key}={json.dumps(value)}", flush=True)


ray.init()
nodes = ray.nodes()
report("node_ids", [n["NodeID"] for n in nodes])
report("driver_store", store(None))        # None where the driver's node has no store
last = nodes[-1]["NodeID"]
set_resource("R", 1, client_id=last)
report("r_on", [n["NodeID"] for n in ray.nodes() if "R" in n["Resources"]])
report("r_stores", sorted(set(ray.get([where.options(resources={"R": 1}).remote()
                                       for _ in range(4)], timeout=60))))
report("last_node_store", ray.get(where.options(resources={"R": 1}).remote(), timeout=60))
task_store = ray.get(set_here.remote("Mine"), timeout=60)
report("mine_on", [n["NodeID"] for n in ray.nodes() if "Mine" in n["Resources"]])
report("mine_stores_match", set(ray.get([where.options(resources={"Mine": 1}).remote()
                                         for _ in range(4)], timeout=60)) == {task_store})
ray.shutdown()
print("OK set_resource_nodes", flush=True)
