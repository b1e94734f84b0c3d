"""Issue 36, core part: Ray 0.7 behaviours outside the runtime.

Global-state calls after shutdown() raise Ray 0.7's error; a remote function
and an actor class defined before shutdown() work after the next init();
_remote(num_return_vals=0) returns None; ending an actor on purpose
(__ray_terminate__, kill, its last handle gone) leaves nothing in errors(),
while a task that raised does show there.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import functools

from _harness import check, expect_raises, init_kwargs, ok, poll_for, report, section, tmp_path

import hpc_ray as ray
from hpc_ray.exceptions import RayError

ray.init(**init_kwargs())


@ray.remote
def add_one(x):
    return x + 1


SCALE = 1


@ray.remote
def scaled(x):
    return x * SCALE


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


@logged
@ray.remote
def add_two(x):
    return x + 2


@ray.remote
def touch(path):
    with open(path, "w") as f:
        f.write("ran")
    return "dropped"


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def inc(self, path=None):
        self.n += 1
        if path:
            with open(path, "w") as f:
                f.write(str(self.n))
        return self.n


with section("actor subclass"):
    def define_subclass():
        class Sub(Counter):
            pass

    err = expect_raises(TypeError, define_subclass)
    check("Inheriting from actor classes is not currently supported" in str(err), err)
    report("subclass_error", str(err))

with section("first session"):
    check(ray.get(add_one.remote(1)) == 2)
    check(ray.get(scaled.remote(2)) == 2)
    # (A decorator above @remote that copies __dict__ keeps .remote, as in Ray 0.7.)
    check(ray.get(add_two.remote(1)) == 3)
    c = Counter.remote()
    check(ray.get(c.inc.remote()) == 1)
    del c
    # Kept past shutdown(): dropped in the next session, they must not release
    # or end what that session makes (ids go on counting, not start again).
    old_handle = Counter.remote()
    old_ref = ray.put("first session")

ray.shutdown()

with section("after shutdown"):
    for call in (ray.objects, ray.tasks, ray.cluster_resources, ray.available_resources,
                 ray.nodes, ray.errors, ray.timeline):
        err = expect_raises(RayError, call)
        check(str(err).endswith("ray.init has been called."), (call.__name__, err))
    report("state_error", str(err))

ray.init(**init_kwargs())

SCALE = 10

with section("second session"):
    check(ray.get(add_one.remote(41)) == 42)
    # A session pickles the function anew, with its globals as they are now.
    check(ray.get(scaled.remote(2)) == 20)
    c = Counter.remote()
    check(ray.get([c.inc.remote() for _ in range(3)]) == [1, 2, 3])
    kept = ray.put("second session")
    del old_handle, old_ref
    import gc
    gc.collect()
    check(ray.get([c.inc.remote() for _ in range(2)]) == [4, 5])   # not ended
    check(ray.get(kept) == "second session")
    c = Counter.remote()
    check(ray.get([c.inc.remote() for _ in range(3)]) == [1, 2, 3])

with section("num_return_vals=0"):
    marker = tmp_path("touched")
    check(touch._remote(args=[marker], num_return_vals=0) is None)
    check(poll_for(lambda: os.path.exists(marker), 20), "the task did not run")
    marker2 = tmp_path("inc")
    check(c.inc._remote(args=[marker2], num_return_vals=0) is None)
    check(poll_for(lambda: os.path.exists(marker2), 20), "the call did not run")
    check(ray.get(c.inc.remote()) == 5)

with section("actors ended on purpose"):
    for _ in range(4):  # (how such an end is reported varies from run to run)
        a = Counter.remote()
        ray.get(a.inc.remote())
        a.__ray_terminate__.remote()
        b = Counter.remote()
        ray.get(b.inc.remote())
        ray.kill(b)
        d = Counter.remote()
        ray.get(d.inc.remote())
        del a, b, d
    ray.get(c.inc.remote())          # the job goes on

    # Nothing shows up, also once the ends have been reported (in batches).
    check(not poll_for(ray.errors, 1.5), ray.errors())
    check(ray.errors() == [], ray.errors())

    @ray.remote
    def fails():
        raise ValueError("on purpose")

    expect_raises(ValueError, ray.get, fails.remote())
    errs = ray.errors()
    check([e["function"].rsplit(".", 1)[-1] for e in errs] == ["fails"], errs)

with section("an actor method that raised, called straight from the driver and a task"):
    from hpc_ray.experimental import signal

    @ray.remote
    class Flaky:
        def ok(self):
            return 1

        def fails(self, why):
            raise KeyError(why)

    @ray.remote
    def call_fails(actor):
        ray.get([actor.ok.remote() for _ in range(3)])
        try:
            ray.get(actor.fails.remote("from a task"))
        except KeyError:
            return "raised"

    flaky = Flaky.remote()
    for _ in range(3):      # (by then its calls go straight to its process)
        ray.get([flaky.ok.remote() for _ in range(3)])
    expect_raises(KeyError, ray.get, flaky.fails.remote("from the driver"))
    check(ray.get(call_fails.remote(flaky)) == "raised")
    def flaky_errors():
        texts = [e["message"] for e in ray.errors() if e["function"].endswith("Flaky.fails")]
        return texts if len(texts) >= 2 else None

    texts = poll_for(flaky_errors, 30) or ray.errors()
    check(len(texts) == 2 and all("Traceback" in t and "KeyError" in t for t in texts), texts)
    check(sorted("from a task" in t for t in texts) == [False, True], texts)
    got = signal.receive([flaky], timeout=10)
    check([type(s) for _, s in got] == [signal.ErrorSignal] * 2, got)
    check(all("KeyError" in str(s.get_error()) for _, s in got), got)

with section("init() in a task: its process already belongs to the session"):
    @ray.remote
    def starts_ray(outer):
        before = ray.is_initialized()
        try:
            ray.init(num_cpus=2)
            refused = None
        except RayError as exc:
            refused = str(exc)
        again = ray.init(num_cpus=2, ignore_reinit_error=True)
        # (Its subtasks and gets are the driver's session's.)
        return before, refused, again, ray.get(outer[0]), ray.get(add_one.remote(1))

    before, refused, again, outer, sub = ray.get(starts_ray.remote([ray.put("outer")]),
                                                 timeout=60)
    check(before is True and again is None and (outer, sub) == ("outer", 2),
          (before, again, outer, sub))
    check(refused is not None and "called in a task or actor" in refused, refused)

ray.shutdown()
ok("core_api07")
