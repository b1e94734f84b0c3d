"""GPU ids as Ray hands them out: CUDA_VISIBLE_DEVICES="" without GPUs, fractions
of one id shared, an actor's ids kept for its life and given back when it is
killed, and the ids taken from the driver's CUDA_VISIBLE_DEVICES.

argv[1]: "fractions" (init(num_gpus=1), CUDA_VISIBLE_DEVICES unset) or "masked"
(CUDA_VISIBLE_DEVICES=2,3 and init(num_gpus=2)).
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys
import time

from _harness import TMPDIR, check, expect_raises, init_kwargs, ok, report, section

import hpc_ray as ray

variant = sys.argv[1]


@ray.remote(num_cpus=0)
def gpus_seen():
    return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")


@ray.remote(num_cpus=0)
def meet(directory, name, expected):
    """What a task sees, once ``expected`` of these run at once (up to 30 s)."""
    open(os.path.join(directory, f"met-{name}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sum(f.startswith(f"met-{name}-") for f in os.listdir(directory)) >= expected:
            return (ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"),
                    ray.get_resource_ids()["GPU"])
        time.sleep(0.01)
    raise TimeoutError(f"only some of {expected} tasks ran at once")


@ray.remote
def sets_visible_devices():
    os.environ["CUDA_VISIBLE_DEVICES"] = "7"
    return os.getpid()


@ray.remote
def visible_devices_in_process():
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")


@ray.remote
class GPUActor:
    def __init__(self):
        self.at_start = ray.get_gpu_ids()

    def seen(self):
        return self.at_start, ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")

    def set_visible(self, value):
        os.environ["CUDA_VISIBLE_DEVICES"] = value


if variant == "fractions":
    ray.init(**init_kwargs(num_gpus=1))
    report("gpus", ray.cluster_resources().get("GPU"))
    with section("no GPU"):
        check(ray.get(gpus_seen.remote(), timeout=60) == ([], ""),
              ray.get(gpus_seen.remote(), timeout=60))
        a = GPUActor.remote()
        check(ray.get(a.seen.remote(), timeout=60) == ([], [], ""))
        # Set once when the actor was created: a method's change stays, as in Ray.
        ray.get(a.set_visible.remote("7"), timeout=60)
        check(ray.get(a.seen.remote(), timeout=60) == ([], [], "7"))
        ray.kill(a)
    with section("a task that sets CUDA_VISIBLE_DEVICES does not set it for the next"):
        setters = set(ray.get([sets_visible_devices.remote() for _ in range(4)], timeout=60))
        seen = ray.get([visible_devices_in_process.remote() for _ in range(8)], timeout=60)
        check({pid for pid, _ in seen} & setters, ("no task ran where one set it", seen))
        check(all(visible == "" for _, visible in seen), seen)
    with section("two halves of GPU 0"):
        seen = ray.get([meet.options(num_gpus=0.5).remote(TMPDIR, "half", 2)
                        for _ in range(2)], timeout=60)
        report("halves", seen)
    with section("an actor keeps its GPU until killed"):
        a = GPUActor.options(num_gpus=1).remote()
        report("actor", [ray.get(a.seen.remote(), timeout=60) for _ in range(2)])
        half = gpus_seen.options(num_gpus=0.5).remote()
        ready, _ = ray.wait([half], timeout=2)
        check(not ready, "a task got a share of the GPU the actor holds")
        ray.kill(a)
        report("after_kill", ray.get(half, timeout=60))
    with section("num_gpus above 1 must be whole"):
        err = expect_raises(ValueError, lambda: ray.remote(num_gpus=1.5)(lambda: 1))
        check(err is not None and "whole" in str(err), err)
else:
    err = expect_raises(ValueError, ray.init, **init_kwargs(num_gpus=3))
    check(err is not None and "CUDA_VISIBLE_DEVICES" in str(err), err)
    ray.init(**init_kwargs(num_gpus=2))
    report("gpus", ray.cluster_resources().get("GPU"))
    with section("ids from CUDA_VISIBLE_DEVICES"):
        report("tasks", [seen[:2] for seen in ray.get(
            [meet.options(num_gpus=1).remote(TMPDIR, "whole", 2) for _ in range(2)],
            timeout=60)])
        a = GPUActor.options(num_gpus=1).remote()
        report("actor", ray.get(a.seen.remote(), timeout=60))
        check(ray.get(gpus_seen.remote(), timeout=60) == ([], ""))

ray.shutdown()
ok(f"gpu_ids {variant}")
