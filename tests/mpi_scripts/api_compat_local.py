"""init(local_mode=True, num_cpus=0) and the issue-11 API in local mode: writable
copies of numpy arguments, _remote, argument checks, exit(), named actors, profile."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys

import numpy as np

from _harness import check, expect_raises, ok, section

import hpc_ray as ray
from hpc_ray import experimental

ray.run_function_on_all_workers(lambda info: os.environ.__setitem__("LOCAL_PRE", "1"))
ray.init(local_mode=True, num_cpus=0)
check(os.environ.get("LOCAL_PRE") == "1", "run_function_on_all_workers before init()")


@ray.remote
def bump(a, extra=None):
    a += 1  # in place: needs a writable array
    return a


@ray.remote
def pair(x):
    return x, x + 1


@ray.remote
class Acc:
    def __init__(self):
        self.total = 0

    def add(self, x):
        self.total += x
        return self.total

    def quit(self):
        sys.exit(0)


with section("writable copies of numpy arguments"):
    big = np.zeros(100_000)
    small = np.zeros(3)
    for arr in (big, small):
        out = ray.get(bump.remote(arr))
        check(float(out.sum()) == arr.size, "the task's copy changed")
        check(float(arr.sum()) == 0.0, "the caller's array unchanged")
    ref = ray.put(np.zeros(4))
    check(float(ray.get(bump.remote(ref)).sum()) == 4.0)
    check(float(ray.get(ref).sum()) == 0.0, "the stored object unchanged")
    nested = ray.get(bump.remote(np.ones(2), extra=[np.zeros(2)]))
    check(nested.tolist() == [2.0, 2.0])

with section("_remote and argument checks"):
    x, y = pair._remote(args=[1], num_return_vals=2)
    check(ray.get([x, y]) == [1, 2])
    expect_raises(TypeError, bump.remote)
    expect_raises(TypeError, bump.remote, 1, 2, 3)
    acc = Acc._remote(args=[], num_cpus=0)
    check(ray.get(acc.add._remote(args=[5])) == 5)
    expect_raises(TypeError, acc.add.remote)

with section("named actors and exit()"):
    experimental.register_actor("acc", acc)
    check(ray.get(experimental.get_actor("acc").add.remote(1)) == 6)
    expect_raises(ray.exceptions.RayActorError, ray.get, acc.quit.remote())
    expect_raises(ray.exceptions.RayActorError, ray.get, acc.add.remote(1))

with section("profile category"):
    with ray.profile("local_span"):
        pass
    check("local_span" in {ev.get("cat") for ev in ray.timeline()})

ray.shutdown()
ok("api_compat_local")
