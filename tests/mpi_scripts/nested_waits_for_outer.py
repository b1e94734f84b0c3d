"""A task that gets, through a ref nested in its arguments, the result of a task
that waits (directly or through other tasks): run nested on the waiting task's
stack it could never have it (found by differential fuzzing against local mode;
it hung every time). A task whose nested refs' objects do not exist yet now runs
in another executor, and all finish."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

from _harness import NUM_WORKERS, check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def slow():
    time.sleep(1)
    return 1


@ray.remote
def after(xs):
    return ray.get(xs[0]) + 1          # waits for the task of the ref in the list


@ray.remote
def plus_one(x):
    return x + 1


@ray.remote
def nested_refs(depth, xs):
    if depth == 0:
        return sum(ray.get(xs))
    sub = [nested_refs.remote(depth - 1, xs[i:] + xs[:i]) for i in range(2)]
    return sum(ray.get(sub)) + 1


# A chain on two workers: slow runs on one, the first link waits on the other,
# and the second link, sent to the first link's lent CPU, needs the first link's result.
first = after.remote([slow.remote()])
check(ray.get(after.remote([first]), timeout=45) == 3)
# The same through others: the last link waits for a task that waits, through a
# top-level argument, for the first link.
first = after.remote([slow.remote()])
second = plus_one.remote(first)
check(ray.get(after.remote([after.remote([second])]), timeout=45) == 5)
# Every worker busy with such a chain.
chains = [after.remote([after.remote([slow.remote()])]) for _ in range(NUM_WORKERS)]
check(ray.get(chains, timeout=45) == [3] * NUM_WORKERS)
for _ in range(3):
    base = ray.put(12)
    tree = nested_refs.remote(2, [base])
    leaf = nested_refs.remote(0, [base, tree])
    check(ray.get([tree, leaf], timeout=45) == [51, 63])
report("chains", len(chains))
ray.shutdown()
ok("nested_waits_for_outer")
