"""The head's bookkeeping as a user sees it: nothing freed while held, nothing
leaked when a process dies, deep chains of refs, dead actors forgotten."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import gc
import signal
import time

import numpy as np

from _harness import check, expect_raises, init_kwargs, ok, poll_for, report, section

import hpc_ray as ray

ray.init(**init_kwargs(object_store_memory=256 << 20))
T = 30


def store_used() -> int:
    return sum(n["ObjectStoreUsed"] for n in ray.nodes())


@ray.remote
def boom():
    raise ValueError("boom")


@ray.remote
def add(a, b):
    return a + b


@ray.remote
def crash_holding(n_bytes):
    ref = ray.put(np.ones(n_bytes, dtype=np.uint8))   # sealed in the store, held here
    os.kill(os.getpid(), signal.SIGSEGV)
    return ref


@ray.remote
class Acc:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x
        return self.total

    def nap(self, seconds):
        time.sleep(seconds)


with section("failed argument does not free a held one"):
    failed = boom.remote()
    held = ray.put(np.full(1 << 20, 7, dtype=np.int64))     # 8 MB, in the store
    view = ray.get(held)
    err = expect_raises(ValueError, ray.get, add.remote(failed, held), timeout=T)
    check(err is not None and "boom" in str(err), f"the sum should fail with boom: {err!r}")
    again = ray.get(held, timeout=T)
    check(np.shares_memory(again, view), "the held object moved")
    other = ray.put(np.zeros(1 << 20, dtype=np.int64))       # would reuse a freed block
    check(int(view[0]) == 7 and int(view[-1]) == 7 and int(view.sum()) == 7 << 20,
          "a view of the held object was overwritten")
    del other, again

with section("actor killed with calls queued on failed refs"):
    acc = Acc.remote()
    check(ray.get(acc.add.remote(1), timeout=T) == 1)
    x = ray.put(5)
    # The first call naps, so that every other call is still queued when the kill
    # comes (a call the actor has finished before the kill returns its value).
    calls = [acc.nap.remote(30)] + [acc.add.remote(failed) for _ in range(5)] + \
        [acc.add.remote(x)]
    ray.kill(acc)
    for c in calls:
        expect_raises(Exception, ray.get, c, timeout=T)
    check(ray.get(x, timeout=T) == 5, "an argument of the killed actor's calls was freed")
    check(int(ray.get(held, timeout=T)[0]) == 7)
    del calls

with section("a 2,000-deep chain of puts"):
    before = len(ray.objects())
    ref = ray.put(0)
    for i in range(2000):
        ref = ray.put([ref, i])
    value = ray.get(ref, timeout=T)
    check(value[1] == 1999, f"chain head holds {value!r}")
    del ref, value
    gc.collect()
    poll_for(lambda: len(ray.objects()) <= before + 5, 10)
    report("chain_objects_left", len(ray.objects()) - before)
    check(len(ray.objects()) <= before + 5, f"the chain was not freed: "
          f"{len(ray.objects()) - before} objects left")
    check(ray.get(add.remote(1, 2), timeout=T) == 3, "the runtime is unusable after the chain")

with section("a crash holding 50 MiB gives the store back"):
    gc.collect()
    used_before = poll_for(lambda: store_used(), 2) or store_used()
    r = crash_holding.options(max_retries=0).remote(50 << 20)
    expect_raises(Exception, ray.get, r, timeout=T)
    del r
    back = poll_for(lambda: store_used() <= used_before, 15)
    report("store_used_before", used_before)
    report("store_used_after", store_used())
    check(back, f"store fill {store_used()} after the crash, {used_before} before")
    check(ray.get(add.remote(2, 3), timeout=T) == 5)

with section("actors killed one after another"):
    for _ in range(20):
        a = Acc.remote()
        check(ray.get(a.add.remote(1), timeout=T) == 1)
        ray.kill(a)

ok("head_lifecycle")
