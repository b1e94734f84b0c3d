"""A small hpc_ray driver for the Slurm tests; run it on 3 ranks.

Prints one line ``RESULT {json}`` with what a user would check: the squares computed
by remote tasks, the world size, the session's job id, the nodes, the resources and
the GPUs that tasks asking for one were given.

    driver_squares.py [ARGS...] [--exit CODE] [--sleep SECONDS] [--unfinished N] [--atexit]

ARGS are echoed back; --exit ends the driver with CODE after printing; --sleep keeps
it running (printing a tick a second) so that a test can look at a running job;
--unfinished leaves N tiny tasks running when the driver exits (workers are
still reporting results while the job shuts down); --atexit registers, before
init(), an exit handler that prints "driver atexit ran" (it runs after hpc_ray's
shutdown, so it shows the shutdown ended within Slurm's KillWait).
"""
import atexit
import faulthandler
import json
import os
import sys
import time

import hpc_ray as ray

# A hung start-up or task shows up in the job's output, well before the test's
# 90 s wait for the job gives up (cancelled again before the --sleep phase).
faulthandler.dump_traceback_later(60, exit=True)


def option(name, default=None):
    if name in sys.argv:
        i = sys.argv.index(name)
        value = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return value
    return default


@ray.remote
def square(i):
    return i * i


@ray.remote(num_gpus=1)
def gpu_task():
    return os.getpid(), ray.get_gpu_ids()


def main():
    exit_code = int(option("--exit", 0))
    sleep = float(option("--sleep", 0))
    unfinished = int(option("--unfinished", 0))
    if "--atexit" in sys.argv:
        sys.argv.remove("--atexit")
        atexit.register(print, "driver atexit ran", flush=True)
    info = ray.init()
    resources = ray.cluster_resources()
    gpus = []
    if resources.get("GPU", 0) >= 1:
        gpus = ray.get([gpu_task.remote() for _ in range(int(resources["GPU"]))])
    result = {
        "squares": ray.get([square.remote(i) for i in range(10)]),
        "world_size": info.get("world_size"),
        "job_id": info.get("job_id"),
        "session_name": info.get("session_name"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "argv": sys.argv[1:],
        "nodes": sorted(n["NodeManagerHostname"] for n in ray.nodes()),
        "resources": resources,
        "gpu_tasks": gpus,
    }
    print("RESULT " + json.dumps(result), flush=True)
    left_running = [square.remote(i) for i in range(unfinished)]
    if left_running:
        ray.get(left_running[:unfinished // 2])
    faulthandler.cancel_dump_traceback_later()
    deadline = time.monotonic() + sleep
    while time.monotonic() < deadline:
        print("tick", flush=True)
        time.sleep(1)
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
