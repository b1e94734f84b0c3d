"""A task iterates a torch DataLoader with worker processes and the file_system
sharing strategy (the usual cure for "too many open files"), and stops early.
torch's shared-memory manager removes its /dev/shm files once its clients are
gone; the end-of-job sweep of stray processes killed it first, and the files
stayed (the harness checks /dev/shm after the run)."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

import torch
import torch.multiprocessing
from torch.utils.data import DataLoader, Dataset

from _harness import check, init_kwargs, ok

import hpc_ray as ray


class Noise(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.full((256,), float(i))


@ray.remote
def first_batches():
    torch.multiprocessing.set_sharing_strategy("file_system")
    loader = DataLoader(Noise(), batch_size=16, num_workers=2, prefetch_factor=4)
    sums = []
    for i, batch in enumerate(loader):
        sums.append(float(batch[:, 0].sum()))
        if i == 3:
            break
    return sums


ray.init(**init_kwargs())
check(ray.get(first_batches.remote(), timeout=60) == [sum(range(16 * i, 16 * i + 16))
                                                      for i in range(4)])
ray.shutdown()
deadline = time.monotonic() + 20
while [f for f in os.listdir("/dev/shm") if f.startswith("torch_")] and time.monotonic() < deadline:
    time.sleep(0.1)
left = [f for f in os.listdir("/dev/shm") if f.startswith("torch_")]
check(not left, left)
ok("torch_loader")
