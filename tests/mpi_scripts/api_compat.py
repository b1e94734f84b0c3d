"""Issue 11, the rest of Ray 0.7's public API: _remote, argument checks at .remote(),
hpc_ray.actor (Checkpointable used on restart), ObjectID, custom serializers,
errors(), get_webui_url(), hpc_ray.experimental, run_function_on_all_workers
before init(), actor class attributes, exit() in tasks and actors, profile()."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import pickle
import sys

import numpy as np

from _harness import check, expect_raises, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray import actor as ray_actor
from hpc_ray import experimental
from hpc_ray.experimental import signal


def mark_worker(info):
    os.environ["API_COMPAT_PRE_INIT"] = "ran"


# --- 5. run_function_on_all_workers before init() ---------------------------------
ray.worker.global_worker.run_function_on_all_workers(mark_worker)
check(not ray.is_initialized())
ray.init(**init_kwargs())
check(os.environ.get("API_COMPAT_PRE_INIT") == "ran", "not run on the driver")


@ray.remote
def read_mark():
    return os.environ.get("API_COMPAT_PRE_INIT")


with section("run_function_on_all_workers before init"):
    marks = ray.get([read_mark.remote() for _ in range(4)])
    check(marks == ["ran"] * 4, marks)


# --- 1. _remote on functions, actor classes and methods ---------------------------
@ray.remote
def add(a, b=10):
    return a + b


@ray.remote
def pair(x):
    return x, -x


@ray.remote
class Counter:
    LIMIT = 7

    def __init__(self, start=0):
        self.n = start

    def inc(self, by=1):
        self.n += by
        return self.n

    @ray.method(num_return_vals=2)
    def both(self):
        return self.n, -self.n

    def split(self):
        return self.n, self.n + 1

    @staticmethod
    def helper(x):
        return x * 3

    @classmethod
    def limit(cls):
        return cls.LIMIT

    def limit_through_class(self):
        # Inside the actor the global name is the remote class: its attributes work.
        return Counter.LIMIT + Counter.helper(1)


with section("_remote"):
    check(ray.get(add._remote(args=[1], kwargs={"b": 2})) == 3)
    check(ray.get(add._remote([5])) == 15)
    a, b = pair._remote(args=[4], num_return_vals=2)
    check(ray.get([a, b]) == [4, -4])
    a, b = pair._remote(args=[5], num_returns=2, num_cpus=1, resources={})
    check(ray.get([a, b]) == [5, -5])
    c = Counter._remote(args=[10], kwargs={}, num_cpus=0)
    check(ray.get(c.inc._remote(args=[5])) == 15)
    x, y = c.split._remote(num_return_vals=2)
    check(ray.get([x, y]) == [15, 16])
    err = expect_raises(ValueError, add._remote, args=[1], bogus_option=3)
    check(err is not None and "bogus_option" in str(err), err)

# --- 2. argument checks at .remote() ----------------------------------------------
@ray.remote
def call_with_bad_args(handle):
    return handle.inc.remote(1, 2, 3)


with section("argument checks"):
    for call in (lambda: add.remote(), lambda: add.remote(1, 2, 3),
                 lambda: add.remote(1, c=3), lambda: Counter.remote(1, 2),
                 lambda: c.inc.remote(1, 2), lambda: c.inc.remote(step=2),
                 lambda: add._remote(args=[1, 2, 3])):
        err = expect_raises(TypeError, call)
        check(err is None or "argument" in str(err), err)
    err = expect_raises(TypeError, add.remote, 1, 2, 3)
    check(err is not None and "add" in str(err), err)
    check(ray.get(add.remote(a=1, b=1)) == 2)
    check(ray.get(c.inc.remote(by=0)) == 15)
    # A handle passed to a task checks there too: the task's .remote() raises.
    err = expect_raises(TypeError, ray.get, call_with_bad_args.remote(c))
    check(err is not None and "Counter.inc()" in str(err), err)

# --- 6. actor classes -------------------------------------------------------------
with section("actor class attributes"):
    check(Counter.LIMIT == 7)
    check(Counter.helper(2) == 6)
    check(Counter.limit() == 7)
    check(ray.get(c.limit_through_class.remote()) == 10)
    check(ray.get(c.helper.remote(3)) == 9)
    check(ray.get(c.limit.remote()) == 7)
    m1, m2 = c.both.remote()
    check(ray.get([m1, m2]) == [15, -15])
    expect_raises(AttributeError, lambda: Counter.inc)


@ray.remote
class Shadow:
    def __init__(self):
        self.value = "instance attribute"

    def value(self):  # noqa: F811  (named like the instance attribute, on purpose)
        return "method"


with section("method named like an instance attribute"):
    check(ray.get(Shadow.remote().value.remote()) == "method")

with section("@remote() with empty parentheses"):
    err = expect_raises(TypeError, lambda: ray.remote()(lambda: 1))
    check(err is not None and "parentheses" in str(err), err)


@ray.remote
def exits():
    sys.exit(3)


@ray.remote
def exits_builtin():
    exit()


@ray.remote
class Quitter:
    def ping(self):
        return "pong"

    def quit(self):
        sys.exit(0)


with section("exit() in tasks and actors"):
    err = expect_raises(ray.exceptions.RayWorkerError, ray.get, exits.remote())
    check("exits called exit(3)" in str(err), str(err))   # the code the task gave
    err = expect_raises(ray.exceptions.RayWorkerError, ray.get, exits_builtin.remote())
    check("called exit() " in str(err), str(err))
    check(ray.get(add.remote(1, 1)) == 2, "the worker goes on")
    q = Quitter.remote()
    check(ray.get(q.ping.remote()) == "pong")
    expect_raises(ray.exceptions.RayActorError, ray.get, q.quit.remote())
    expect_raises(ray.exceptions.RayActorError, ray.get, q.ping.remote())

# --- 3. hpc_ray.actor: Checkpointable used on restart ------------------------------
CKPT_DIR = tmp_path("api_compat_ckpt")
os.makedirs(CKPT_DIR, exist_ok=True)


@ray.remote(max_reconstructions=1)
class Saver(ray_actor.Checkpointable):
    def __init__(self, directory):
        self.directory = directory
        self.value = 0
        self.restored_from = None

    def inc(self):
        self.value += 1
        return self.value

    def get(self):
        return self.value, self.restored_from

    def die(self):
        os._exit(1)

    def should_checkpoint(self, checkpoint_context):
        check_ctx = checkpoint_context.num_tasks_since_last_checkpoint >= 1
        return check_ctx and checkpoint_context.actor_id.hex() != ""

    def save_checkpoint(self, actor_id, checkpoint_id):
        with open(os.path.join(self.directory, checkpoint_id.hex()), "wb") as f:
            pickle.dump(self.value, f)

    def load_checkpoint(self, actor_id, available_checkpoints):
        newest = available_checkpoints[0]
        with open(os.path.join(self.directory, newest.checkpoint_id.hex()), "rb") as f:
            self.value = pickle.load(f)
        self.restored_from = len(available_checkpoints)
        return newest.checkpoint_id

    def checkpoint_expired(self, actor_id, checkpoint_id):
        pass


with section("Checkpointable"):
    check(ray.actor.ActorHandle is ray.ActorHandle and ray.actor.ActorClass is ray.ActorClass)
    check(isinstance(c, ray_actor.ActorHandle) and isinstance(Counter, ray_actor.ActorClass))
    s = Saver.remote(CKPT_DIR)
    check(ray.get([s.inc.remote() for _ in range(3)]) == [1, 2, 3])
    check(ray.get(s.get.remote()) == (3, None))
    expect_raises(ray.exceptions.RayActorError, ray.get, s.die.remote())
    value, restored_from = ray.get(s.get.remote(), timeout=30)
    check(value == 3, value)
    # Each call is followed by a checkpoint: inc x3 and get, newest first.
    check(restored_from == 4, restored_from)
    report("checkpoint_value_after_restart", value)

    class Incomplete(ray_actor.Checkpointable):
        def should_checkpoint(self, checkpoint_context):
            return False
    expect_raises(TypeError, ray.remote, Incomplete)

# --- 4. ObjectID, serializers, errors, web UI, experimental -------------------------
with section("ObjectID"):
    for n, cls in ((20, ray.ObjectID), (28, ray.ObjectRef)):
        raw = bytes(range(n))
        check(cls(raw).binary() == raw)
        check(cls(raw) == cls(raw) and not cls(raw).is_nil())
    check(ray.ObjectID.nil().is_nil() and len(ray.ObjectID.nil().binary()) == 20)
    check(ray.ObjectID.from_random() != ray.ObjectID.from_random())
    ref = ray.put(41)
    check(ray.ObjectID(ref.binary()) == ref)
    check(ray.get(ray.ObjectID(ref.binary())) == 41)
    expect_raises(ValueError, ray.ObjectID, b"short")   # (issue 36: names 20 or 28)


class Point:
    def __init__(self, x):
        self.x = x


class Opaque:
    def __init__(self):
        self.payload = [1, 2, 3]


def point_to_tuple(p):
    return ("point", p.x)


def tuple_to_point(t):
    return Point(t[1] * 10)


@ray.remote
def echo(v):
    return v


@ray.remote
def make_point(x):
    return Point(x)


with section("register_custom_serializer"):
    ray.register_custom_serializer(Point, serializer=point_to_tuple,
                                   deserializer=tuple_to_point)
    check(ray.get(echo.remote(Point(1))).x == 100, "driver -> task -> driver")
    check(ray.get(make_point.remote(2)).x == 20, "made in a task")
    ray.register_custom_serializer(Opaque, use_pickle=True)
    check(ray.get(echo.remote(Opaque())).payload == [1, 2, 3])
    expect_raises(ValueError, ray.register_custom_serializer, Opaque)
    expect_raises(ValueError, ray.register_custom_serializer, Opaque, use_pickle=True,
                  serializer=point_to_tuple, deserializer=tuple_to_point)


@ray.remote
def fails():
    raise KeyError("for errors()")


with section("errors, web UI, transfer timeline"):
    expect_raises(KeyError, ray.get, fails.remote())
    errs = ray.errors()
    check(isinstance(errs, list) and any(e["function"].endswith("fails") for e in errs), errs)
    check(ray.error_info() == errs, ray.error_info())   # Ray 0.2's name
    # ray.ray_constants.INFINITE_RECONSTRUCTIONS, as the 0.7 docs use it.
    check(ray.ray_constants.INFINITE_RECONSTRUCTIONS == 2 ** 30)
    check(ray.get_webui_url() is None)
    check(ray.object_transfer_timeline() == [])


@ray.remote
def use_named(name):
    return ray.get(experimental.get_actor(name).inc.remote(1))


@ray.remote
def signaller(n):
    for i in range(n):
        signal.send(UserSignal(i))
    return n


class UserSignal(signal.Signal):
    def __init__(self, value):
        self.value = value


with section("hpc_ray.experimental"):
    refs = [ray.put(i) for i in range(3)]
    check(experimental.get(tuple(refs)) == [0, 1, 2])
    check(experimental.get({"a": refs[0], "b": "plain"}) == {"a": 0, "b": "plain"})
    check(experimental.get(np.array(refs, dtype=object)) == [0, 1, 2])
    ready, rest = experimental.wait(tuple(refs), num_returns=3, timeout=30)
    check(len(ready) == 3 and rest == [])
    experimental.set_resource("Custom", 2)
    check(ray.cluster_resources().get("Custom") == 2, ray.cluster_resources())
    experimental.set_resource("Custom", 0)
    check("Custom" not in ray.cluster_resources(), ray.cluster_resources())
    named = Counter.remote(100)
    experimental.register_actor("api_compat_counter", named)
    check(ray.get(use_named.remote("api_compat_counter")) == 101)
    check(ray.get(experimental.named_actors.get_actor("api_compat_counter").inc.remote()) == 102)
    expect_raises(ValueError, experimental.register_actor, "api_compat_counter", named)
    import hpc_ray.sgd
    from hpc_ray.experimental.sgd import DistributedSGD
    check(DistributedSGD is hpc_ray.sgd.DistributedSGD)
    src = signaller.remote(3)
    ray.get(src)
    signal.forget([src])
    check(signal.receive([src], timeout=0.2) == [], "forget skips what was sent")


@ray.remote
class BadInit:
    def __init__(self):
        raise ValueError("no start")

    def ping(self):
        return 1


with section("an actor whose __init__ raises sends its ErrorSignal"):
    bad = BadInit.remote()
    got = signal.receive([bad], timeout=20)
    check(len(got) == 1 and isinstance(got[0][1], signal.ErrorSignal), got)
    check(got and "no start" in str(got[0][1].get_error()), got)

# --- 8. profile(name): the span's name is the trace event's category ----------------
@ray.remote
def profiled():
    with ray.profile("inside_task"):
        return 1


with section("profile category"):
    with ray.profile("driver_span", extra_data={"name": "shown"}):
        pass
    ray.get(profiled.remote())
    import time
    deadline = time.monotonic() + 20
    cats = set()
    while time.monotonic() < deadline and not {"driver_span", "inside_task"} <= cats:
        cats = {ev.get("cat") for ev in ray.timeline()}
        time.sleep(0.1)
    check({"driver_span", "inside_task"} <= cats, cats)

ray.shutdown()
ok("api_compat")
