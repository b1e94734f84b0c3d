"""A driver that ends without shutdown(): the job must still end promptly and cleanly.

argv[1] is how it ends:
    noshutdown  falls off the end of the script       (rc 0)
    exit3       os._exit(3)                           (rc != 0)
    sigkill     SIGKILL to its own process            (rc != 0)
    raise       an uncaught exception                 (rc != 0)
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import signal
import sys
import time

import numpy as np

from _harness import init_kwargs, ok

import hpc_ray as ray

how = sys.argv[1]
ray.init(**init_kwargs(object_store_memory=64 << 20))


@ray.remote
def forever():
    # Work the driver abandons: the job must not wait for it.
    time.sleep(3600)


@ray.remote
def make(n):
    return np.ones(n, dtype=np.uint8)


# Objects in every node's store, and a task running on each worker.
held = [ray.put(np.zeros(4 << 20, dtype=np.uint8)), make.remote(4 << 20)]
check = ray.get(held[1])
assert check.sum() == 4 << 20
abandoned = [forever.remote() for _ in range(8)]
ray.wait(abandoned, timeout=0.5)
ok(f"driver_exit {how}")
sys.stdout.flush()

if how == "noshutdown":
    pass
elif how == "exit3":
    os._exit(3)
elif how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "raise":
    raise RuntimeError("the driver failed")
else:
    raise SystemExit(f"unknown variant {how!r}")
