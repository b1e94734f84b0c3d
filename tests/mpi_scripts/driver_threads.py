"""Rank 0's MPI hand-over under load: eight user threads submit, get, put and wait
at once while the comm thread serves the workers; every result must be right."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import threading

import numpy as np

from _harness import check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def square(x):
    return x * x


@ray.remote
def total(arr):
    return int(arr.sum())


errors = []
done = [0] * 8


def hammer(t):
    try:
        for i in range(150):
            x = t * 1000 + i
            if ray.get(square.remote(x), timeout=60) != x * x:
                errors.append(("square", t, i))
            ref = ray.put(np.full(20_000, i, dtype=np.int64))    # 160 KB: in the store
            if ray.get(total.remote(ref), timeout=60) != 20_000 * i:
                errors.append(("total", t, i))
            refs = [square.remote(j) for j in range(4)]
            ready, rest = ray.wait(refs, num_returns=4, timeout=60)
            if len(ready) != 4 or ray.get(refs, timeout=60) != [0, 1, 4, 9]:
                errors.append(("wait", t, i))
            done[t] += 1
    except Exception as exc:  # reported below; the thread must not die silently
        errors.append(("exception", t, repr(exc)))


threads = [threading.Thread(target=hammer, args=(t,)) for t in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join(timeout=240)
check(not any(th.is_alive() for th in threads), "a thread is stuck")
check(not errors, f"wrong results: {errors[:5]}")
report("iterations", sum(done))
check(sum(done) == 8 * 150, f"iterations done: {done}")
ray.shutdown()
ok("driver_threads")
