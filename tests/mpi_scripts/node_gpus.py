"""GPUs per node as Ray 0.7 counts them (run on the driver's host alone, then two
hosts of two ranks, CUDA_VISIBLE_DEVICES=0,1 everywhere: each worker rank holds
one id). Prints the cluster's GPUs, the ids two ``num_gpus=2`` tasks got, and
the stores they ran on."""
import faulthandler
import json
import os
import tempfile

from _harness import poll_for

import hpc_ray as ray

faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", 120)) - 5,
                                  exit=True)


@ray.remote(num_gpus=2)
def two_gpus(meeting):
    # Both run at once, one per node: each waits (up to 30 s) for the other.
    open(os.path.join(meeting, str(os.getpid())), "w").close()
    poll_for(lambda: len(os.listdir(meeting)) >= 2, 30)
    with open("/proc/self/maps") as f:
        store = next(int(l.split()[4]) for l in f if "memfd:hpc_ray_store" in l)
    return sorted(ray.get_gpu_ids()), store


def report(key, value):
    print(f"RESULT {key}={json.dumps(value)}", flush=True)


ray.init()
report("gpus", ray.cluster_resources().get("GPU"))
with tempfile.TemporaryDirectory(prefix="hpc_ray-test-meet-") as meeting:
    got = ray.get([two_gpus.remote(meeting) for _ in range(2)], timeout=60)
report("two_gpu_tasks", [ids for ids, _ in got])
report("stores", [store for _, store in got])
ray.shutdown()
print("OK node_gpus", flush=True)
