"""Two nodes of two ranks each, as a user checks them (run on 4 ranks).

    two_nodes.py

Prints ``RESULT key=<json>`` lines: the nodes ray.nodes() shows, the node and
store of every worker rank, the transfers each node received while a 50 MB
object crossed in each direction, and the sums the far side computed.
"""
import faulthandler
import json
import os

import numpy as np

import hpc_ray as ray

faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", 120)) - 5,
                                  exit=True)

BIG = 50 << 20


def store_inode():
    """The inode of the node's object store as this process maps it."""
    with open("/proc/self/maps") as f:
        for line in f:
            if "memfd:hpc_ray_store" in line:
                return int(line.split()[4])
    return None


def where():
    return {"store": store_inode(), "pid": os.getpid()}


@ray.remote
class Probe:
    def where(self):
        return where()

    def make(self, fill):
        return np.full(BIG // 8, fill, dtype=np.float64)

    def total(self, arr):
        return float(arr.sum())

    def total_of(self, refs):
        return float(ray.get(refs[0]).sum())


@ray.remote
def task_where(_):
    import time
    time.sleep(0.2)
    return where()


def report(key, value):
    print(f"RESULT {key}={json.dumps(value)}", flush=True)


def received():
    return [[n["NodeManagerHostname"], n["ObjectsReceived"], n["BytesReceived"]]
            for n in ray.nodes()]


def main():
    ray.init()
    nodes = ray.nodes()
    report("nodes", [[n["NodeManagerHostname"], n["Ranks"]] for n in nodes])
    report("driver", where())
    report("tasks", ray.get([task_where.remote(i) for i in range(6)]))
    probes = [Probe.remote() for _ in range(3)]
    places = ray.get([p.where.remote() for p in probes])
    report("actors", places)
    here = where()["store"]
    far = next(p for p, w in zip(probes, places) if w["store"] != here)
    near = next((p for p, w in zip(probes, places) if w["store"] == here), None)
    # The driver's 50 MB object, read on the far node, twice.
    mine = ray.put(np.ones(BIG // 8))
    sums = [ray.get(far.total.remote(mine)), ray.get(far.total.remote(mine))]
    report("after_put_read_far", received())
    # The far node's 50 MB object, read by the driver twice and by its neighbour.
    theirs = far.make.remote(2.0)
    a = ray.get(theirs)
    b = ray.get(theirs)
    sums += [float(a.sum()), float(b.sum())]
    if near is not None:
        sums.append(ray.get(near.total_of.remote([theirs])))
    report("after_far_read_here", received())
    report("sums", sums)
    report("readonly", [not a.flags.writeable])
    # Both far actors read one object at once, 60% of a store: their node holds
    # one copy (two would not fit: ObjectStoreFullError).
    store = nodes[0]["ObjectStoreMemory"]
    del a, b, mine, theirs
    shared = ray.put(np.ones(int(store * 0.6) // 8))
    far_both = [p for p, w in zip(probes, places) if w["store"] != here]
    report("both_far_read", ray.get([p.total.remote(shared) for p in far_both]))
    ray.shutdown()
    print("OK two_nodes", flush=True)


if __name__ == "__main__":
    main()
