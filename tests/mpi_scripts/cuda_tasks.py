"""Real GPUs, as a user on a GPU node meets them: ``init()`` with no ``num_gpus``
offers the node's GPUs (as Ray 0.7 finds them), a ``num_gpus=1`` task and actor
run torch on CUDA and see only their id, two ``num_gpus=0.5`` tasks share one
GPU at once, and a task without GPUs sees ``CUDA_VISIBLE_DEVICES=""``, and a CUDA tensor
a task returns reaches the driver.
Run by tests/test_gpu_cuda.py where torch sees a CUDA device.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

from _harness import TMPDIR, check, init_kwargs, ok, report, section

import hpc_ray as ray


def _on_gpu():
    import torch
    x = torch.ones(256, 256, device="cuda")
    return (ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"),
            torch.cuda.device_count(), float((x @ x).sum().item()))


@ray.remote(num_gpus=1)
def whole():
    return _on_gpu()


@ray.remote(num_gpus=0.5)
def half(directory):
    open(os.path.join(directory, f"half-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while sum(f.startswith("half-") for f in os.listdir(directory)) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("the two half-GPU tasks did not run at once")
        time.sleep(0.01)
    return _on_gpu()


@ray.remote
def no_gpu():
    # (Not torch.cuda.is_available(): an executor that ran a GPU task before keeps
    # the CUDA context torch made then, as a reused Ray worker does.)
    return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")


@ray.remote(num_gpus=1)
class Trainer:
    def __init__(self):
        import torch
        self.w = torch.zeros(4, device="cuda")

    def step(self):
        self.w += 1
        return ray.get_gpu_ids(), self.w.device.type, float(self.w.sum().item())


ray.init(**init_kwargs())
report("gpus", ray.cluster_resources().get("GPU"))
with section("a num_gpus=1 task runs torch on CUDA"):
    report("whole", ray.get(whole.remote(), timeout=60))
with section("two num_gpus=0.5 tasks share the GPU at once"):
    report("halves", ray.get([half.remote(TMPDIR) for _ in range(2)], timeout=60))
with section("a task without GPUs sees none"):
    report("no_gpu", ray.get(no_gpu.remote(), timeout=60))
with section("an actor keeps its GPU and its CUDA state"):
    t = Trainer.remote()
    report("actor", [ray.get(t.step.remote(), timeout=60) for _ in range(2)])
    ray.kill(t)        # it holds the GPU for its life
with section("a CUDA tensor comes back to the driver"):
    import torch
    back = ray.get(ray.remote(num_gpus=1)(lambda: torch.arange(3, device="cuda")).remote(),
                   timeout=60)
    check(back.tolist() == [0, 1, 2], back)
ray.shutdown()
ok("cuda_tasks")
