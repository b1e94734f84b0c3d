"""A driver script that ends without starting a session: the job must end at once,
with the script's own exit status, and its worker ranks must leave.

argv[1] is how it ends:
    end       prints a line and falls off the end    (rc 0)
    help      argparse's --help                      (rc 0)
    exit3     sys.exit(3)                            (rc 3)
    raise     an uncaught exception                  (rc 1)
    bad-init  init(num_gpus=2) raises ValueError     (rc 1; run with CUDA_VISIBLE_DEVICES=0)
    bad-store init(object_store_memory="1GB") raises ValueError (rc 1)
    bad-resource  init(resources={"R": "x"}) raises ValueError (rc 1)
    no-room   init() fails after its set-up reached the worker ranks: rank 0 cannot map
              the store within its address-space limit (rc 1)
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import argparse
import sys

import hpc_ray as ray

how = sys.argv[1]
print(f"NO_INIT {how}", flush=True)
if how == "end":
    pass
elif how == "help":
    parser = argparse.ArgumentParser(prog="no_init.py", description="a script's own help")
    parser.add_argument("how")
    parser.parse_args(sys.argv[1:] + ["--help"])
elif how == "exit3":
    sys.exit(3)
elif how == "raise":
    raise RuntimeError("the script failed before init()")
elif how == "bad-init":
    ray.init(num_gpus=2)
elif how == "bad-store":
    ray.init(object_store_memory="1GB")
elif how == "bad-resource":
    ray.init(resources={"R": "x"})
elif how == "no-room":
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, resource.RLIM_INFINITY))
    ray.init(num_cpus=2, object_store_memory=2 << 30)
else:
    raise SystemExit(f"unknown variant {how!r}")
