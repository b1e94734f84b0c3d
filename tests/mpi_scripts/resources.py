"""Resources: CPUs per rank, custom resources, GPUs, and requests no rank can meet.

argv[1]: "custom" (init(resources={"custom": 2})) or "gpus" (init(num_gpus=2)).
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys
import time
import warnings

from _harness import NUM_WORKERS, TMPDIR, check, expect_raises, init_kwargs, ok, report, section

import hpc_ray as ray

variant = sys.argv[1]
if variant == "custom":
    ray.init(**init_kwargs(resources={"custom": 2}))
else:
    ray.init(**init_kwargs(num_gpus=2))
report("cluster_resources", ray.cluster_resources())


@ray.remote
def rendezvous(directory, name, expected):
    open(os.path.join(directory, f"started-{name}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sum(f.startswith(f"started-{name}-") for f in os.listdir(directory)) >= expected:
            return (os.getpid(), [str(g) for g in ray.get_gpu_ids()],
                    os.environ.get("CUDA_VISIBLE_DEVICES"), sorted(ray.get_resource_ids()))
        time.sleep(0.01)
    raise TimeoutError(f"only some of {expected} tasks started")


@ray.remote
def plain():
    return "ran"


def infeasible(remote_fn, name):
    """Submit a task no rank can run: it must fail or warn, naming the resource."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ref = remote_fn.remote()
        except Exception as err:
            outcome = ("submit", type(err).__name__, str(err))
        else:
            try:
                ray.get(ref, timeout=1)
            except ray.exceptions.GetTimeoutError:
                outcome = ("pending", "", "")
            except Exception as err:
                outcome = ("get", type(err).__name__, str(err))
            else:
                outcome = ("ran", "", "")
        messages = [str(w.message) for w in caught]
    report(f"infeasible_{name}", {"outcome": outcome, "warnings": messages})
    print(f"INFEASIBLE {name} {outcome[0]}", flush=True)
    check(ray.get(plain.remote()) == "ran")  # the runtime still works


if variant == "custom":
    @ray.remote(resources={"custom": 2})
    def needs_two():
        return sorted(ray.get_resource_ids())

    @ray.remote(resources={"custom": 2})
    def hold_all(directory, i):
        t0 = time.time()
        time.sleep(0.2)
        with open(os.path.join(directory, f"span-{i}"), "w") as f:
            f.write(f"{t0} {time.time()}")

    with section("custom resources"):
        # init(resources={"custom": 2}) is the job's total, as in Ray: two tasks
        # holding one unit each run at once (on two ranks) ...
        both = ray.get([rendezvous.options(resources={"custom": 1}).remote(TMPDIR, "c", 2)
                        for _ in range(2)], timeout=60)
        report("custom_concurrent", len({pid for pid, *_ in both}))
        ids = ray.get(needs_two.remote())
        check("custom" in ids, f"get_resource_ids() in a task that holds 'custom': {ids}")
        # ... and tasks that each need both units run one after another.
        ray.get([hold_all.remote(TMPDIR, i) for i in range(NUM_WORKERS)], timeout=60)
        spans = sorted(tuple(map(float, open(os.path.join(TMPDIR, f"span-{i}")).read().split()))
                       for i in range(NUM_WORKERS))
        overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
        report("custom_all_overlaps", len(overlaps))

    @ray.remote
    def span(directory, name, seconds):
        t0 = time.time()
        time.sleep(seconds)
        with open(os.path.join(directory, f"span-{name}"), "w") as f:
            f.write(f"{t0} {time.time()}")
        return os.getpid()

    @ray.remote
    class Wide:
        def pid(self):
            return os.getpid()

    with section("a task wider than one rank"):
        # CPUs count per node, as in Ray: a task asking for every CPU of the node
        # runs on one rank while its siblings lend theirs, and nothing else
        # that needs a CPU runs beside it.
        node_cpus = int(ray.cluster_resources()["CPU"])
        wide = span.options(num_cpus=node_cpus).remote(TMPDIR, "wide", 0.5)
        narrow = [span.remote(TMPDIR, f"narrow-{i}", 0.1) for i in range(2 * NUM_WORKERS)]
        ray.get(narrow + [wide], timeout=60)
        read = lambda name: tuple(map(float, open(os.path.join(TMPDIR, f"span-{name}")).read().split()))
        w0, w1 = read("wide")
        beside = [i for i in range(2 * NUM_WORKERS)
                  if read(f"narrow-{i}")[0] < w1 and read(f"narrow-{i}")[1] > w0]
        report("wide_task_ran", True)
        report("wide_task_beside", beside)
        # An actor may be as wide; once it is gone, its CPUs come back.
        actor = Wide.options(num_cpus=node_cpus).remote()
        report("wide_actor_answers", ray.get(actor.pid.remote(), timeout=60) > 0)
        ray.kill(actor)
        again = span.options(num_cpus=node_cpus).remote(TMPDIR, "wide-again", 0.0)
        report("wide_after_actor", ray.get(again, timeout=60) > 0)

    @ray.remote
    def outer(cpus):
        return ray.get(span.options(num_cpus=cpus).remote(TMPDIR, "inner", 0.0), timeout=30)

    with section("a task blocked in get gives its CPU to a wider task"):
        # Ray's resources docs: a task "will release its CPU resources when it
        # gets blocked in the call to ray.get", so a one-CPU task may wait for
        # one that needs every CPU of the node.
        report("wide_inside_task", ray.get(outer.remote(node_cpus), timeout=60) > 0)

    for name, kwargs in [("custom", {"resources": {"custom": 1000}}),
                         ("tpu", {"resources": {"TPU": 1}}),
                         ("cpu", {"num_cpus": 1000}),
                         ("gpu", {"num_gpus": 1})]:
        with section(f"infeasible {name}"):
            infeasible(ray.remote(**kwargs)(lambda: 1), name)
    with section("negative num_cpus"):
        err = expect_raises(Exception, lambda: ray.remote(num_cpus=-1)(lambda: 1))
        check(isinstance(err, ValueError), repr(err))
else:
    with section("gpus"):
        pairs = ray.get([rendezvous.options(num_gpus=1).remote(TMPDIR, "g", 2) for _ in range(2)])
        report("gpu_tasks", [[ids, env] for _, ids, env, _ in pairs])

ray.shutdown()
ok(f"resources {variant}")
