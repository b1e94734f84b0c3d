"""A driver that starts other hpc_ray drivers as its own child processes: one
with subprocess, one per worker of a multiprocessing pool that spawns (its
children re-import this file). Each child is a driver of its own (embedded: it
spawns its own workers), not a rank of the launch it inherited variables from."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import multiprocessing
import subprocess
import sys

from _harness import check, init_kwargs, ok, report, section

import hpc_ray as ray

CHILD = """
import os, hpc_ray as ray
ray.init(num_cpus=1)
print("CHILD", ray.get(ray.remote(lambda: 41).remote()) + 1, os.environ.get("PMI_RANK"))
ray.shutdown()
"""


def child_driver(x):
    ray.init(num_cpus=1)
    try:
        return ray.get(ray.remote(lambda y: y * y).remote(x))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    ray.init(**init_kwargs())
    check(ray.get(ray.remote(lambda: 1).remote(), timeout=30) == 1)
    with section("a subprocess that is a driver"):
        child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                               timeout=60)
        check(child.returncode == 0 and "CHILD 42 None" in child.stdout,
              (child.returncode, child.stdout[-300:], child.stderr[-1500:]))
    with section("a spawning pool's workers that are drivers"):
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            report("pool", pool.map(child_driver, [3, 4], chunksize=1))
    ray.shutdown()
    ok("child_driver")
