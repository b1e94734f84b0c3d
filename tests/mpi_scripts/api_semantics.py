"""remote/options, arguments by value and by reference, get/put/wait, ObjectRef,
and nested tasks on a small pool (Ray 0.7 semantics)."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import pickle
import socket
import time
import warnings

from _harness import NUM_WORKERS, check, expect_raises, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray

# 0.7's init() keywords: a cluster address is ignored with a warning (the job is
# the cluster), keywords left at their defaults say nothing; the address fields.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    info = ray.init(**init_kwargs(redis_address="10.0.0.1:6379", temp_dir=None,
                                  include_webui=False))
check(len(caught) == 1 and str(caught[0].message).startswith(
    "init(redis_address='10.0.0.1:6379'): ignored"), [str(w.message) for w in caught])
check(info["redis_address"] is None and info["webui_url"] is None
      and info["node_ip_address"] == socket.gethostname(), info)


@ray.remote
def wait_for_file(path, value):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return value


# --- remote and options ---------------------------------------------------------


@ray.remote
def add(a, b=10):
    return a + b


@ray.remote(num_returns=3)
def three():
    return 1, 2, 3


@ray.remote(num_return_vals=2)
def two_old_name(x):
    return x, x + 1


@ray.remote(num_cpus=1, max_retries=0, max_calls=0)
def with_options(x):
    return x


@ray.remote
def as_tuple():
    return (1, 2)


with section("remote and options"):
    check(ray.get(add.remote(1)) == 11)
    check(ray.get(add.remote(1, b=2)) == 3)
    check(ray.get(add.remote(a=4, b=5)) == 9)
    refs = three.remote()
    check(isinstance(refs, list) and len(refs) == 3, repr(refs))
    check(all(isinstance(r, ray.ObjectRef) for r in refs))
    check(ray.get(refs) == [1, 2, 3])
    a, b = two_old_name.remote(5)
    check(ray.get([a, b]) == [5, 6])
    check(ray.get(with_options.remote("x")) == "x")
    p, q = as_tuple.options(num_returns=2).remote()
    check(ray.get(p) == 1 and ray.get(q) == 2)
    check(ray.get(as_tuple.remote()) == (1, 2))  # one return value: the tuple itself
    check(ray.get(add.options(num_cpus=1).remote(2, 2)) == 4)
    # Calling a remote function directly is a mistake Ray reports.
    err = expect_raises(Exception, add, 1, 2)
    check(isinstance(err, (TypeError, RuntimeError, ray.exceptions.RayError)), repr(err))

# --- ObjectRef ------------------------------------------------------------------

with section("ObjectRef"):
    r1, r2 = ray.put(5), ray.put(5)
    check(ray.ObjectID is ray.ObjectRef)
    check(isinstance(r1, ray.ObjectRef) and isinstance(r1, ray.ObjectID))
    check(r1 != r2 and r1 == r1 and hash(r1) != hash(r2))
    check(len({r1, r2, r1}) == 2)
    check({r1: "x"}[r1] == "x")
    h = r1.hex()
    # Ray 0.7: the hex of the 20-byte binary, from which the id is made again.
    check(isinstance(h, str) and h == r1.binary().hex() and len(h) == 40, h)
    check(ray.ObjectID(bytes.fromhex(h)) == r1)
    check(h != r2.hex())
    # The object table's entry, by the ref (as 0.7's objects(object_id)), its hex or bytes.
    check(ray.objects(r1)["ObjectID"] == ray.objects(h)["ObjectID"]
          == ray.objects(r1.binary())["ObjectID"] == h, ray.objects(r1))
    check(h in repr(r1), repr(r1))
    report("repr", repr(r1))
    copy = pickle.loads(pickle.dumps(r1))
    check(copy == r1 and hash(copy) == hash(r1) and ray.get(copy) == 5)

# --- arguments ------------------------------------------------------------------


@ray.remote
def identity(x):
    return x


@ray.remote
def inspect_nested(lst, dct):
    kinds = [isinstance(x, ray.ObjectRef) for x in lst] + [isinstance(dct["k"], ray.ObjectRef)]
    return kinds, ray.get(lst[0]) + ray.get(lst[1]) + ray.get(dct["k"])


with section("arguments"):
    inner = ray.put(3)
    check(ray.get(identity.remote(ray.put([1, 2]))) == [1, 2])    # top level: the value
    check(ray.get(add.remote(ray.put(1), b=ray.put(2))) == 3)     # kwargs too
    check(ray.get(add.remote(add.remote(1, 1), add.remote(2, 2))) == 6)
    kinds, total = ray.get(inspect_nested.remote([inner, add.remote(1, 1)], {"k": inner}))
    check(kinds == [True, True, True], kinds)  # nested: still references
    check(total == 3 + 2 + 3, total)
    nested_back = ray.get(identity.remote([inner]))
    check(isinstance(nested_back[0], ray.ObjectRef) and ray.get(nested_back[0]) == 3)


@ray.remote
def put_inside():
    return [ray.put("made in a task")]


with section("put inside a task"):
    check(ray.get(ray.get(put_inside.remote())[0]) == "made in a task")

# --- get ------------------------------------------------------------------------

with section("get"):
    check(ray.get([]) == [])
    check(ray.get([r1, inner, r1]) == [5, 3, 5])
    gate = tmp_path("gate-get")
    blocked = wait_for_file.remote(gate, "released")
    err = expect_raises(Exception, ray.get, blocked, timeout=0.3)
    check(isinstance(err, ray.exceptions.GetTimeoutError), repr(err))
    check(isinstance(err, TimeoutError), repr(err))
    err = expect_raises(Exception, ray.get, [r1, blocked], timeout=0.3)
    check(isinstance(err, ray.exceptions.GetTimeoutError), repr(err))
    open(gate, "w").close()
    check(ray.get(blocked, timeout=30) == "released")

open(tmp_path("gate-get"), "w").close()  # even if the section failed half-way

# --- wait -----------------------------------------------------------------------


def in_order(sub, full):
    it = iter(full)
    return all(any(x == y for y in it) for x in sub)


with section("wait"):
    gate = tmp_path("gate-wait")
    slow = wait_for_file.remote(gate, "slow")
    refs = [ray.put(1), slow, ray.put(2), ray.put(3)]
    ready, not_ready = ray.wait(refs, num_returns=3, timeout=30)
    check(ready == [refs[0], refs[2], refs[3]] and not_ready == [slow], (ready, not_ready))
    ready, not_ready = ray.wait(refs, num_returns=4, timeout=0.3)  # times out, no error
    check(ready == [refs[0], refs[2], refs[3]] and not_ready == [slow], (ready, not_ready))
    ready, not_ready = ray.wait(refs, timeout=0)
    check(len(ready) == 1 and len(not_ready) == 3, (ready, not_ready))
    check(in_order(ready, refs) and in_order(not_ready, refs))
    check(sorted(ready + not_ready, key=lambda r: r.hex()) == sorted(refs, key=lambda r: r.hex()))
    err = expect_raises(Exception, ray.wait, refs, num_returns=5)
    check(isinstance(err, ValueError), repr(err))
    err = expect_raises(Exception, ray.wait, [refs[0], refs[0]])
    check(isinstance(err, ValueError), repr(err))
    report("wait_duplicates_message", str(err))
    err = expect_raises(Exception, ray.wait, refs[0])
    check(isinstance(err, TypeError), repr(err))
    err = expect_raises(Exception, ray.wait, [refs[0], 5])
    check(isinstance(err, TypeError), repr(err))
    open(gate, "w").close()
    ready, not_ready = ray.wait(refs, num_returns=4, timeout=30)
    check(ready == refs and not_ready == [], (ready, not_ready))
open(gate, "w").close()  # even if the section failed half-way
with section("wait on an empty list"):
    check(tuple(ray.wait([])) == ([], []))

# --- tasks in tasks on a fixed pool of workers ---------------------------------


@ray.remote
def chain(depth):
    return 0 if depth == 0 else 1 + ray.get(chain.remote(depth - 1))


@ray.remote
def fib(n):
    if n < 2:
        return n
    return sum(ray.get([fib.remote(n - 1), fib.remote(n - 2)]))


@ray.remote
def tree(depth, width):
    if depth == 0:
        return 1
    return sum(ray.get([tree.remote(depth - 1, width) for _ in range(width)]))


@ray.remote
def submit_only(x):
    return [add.remote(x, 1)]  # a reference made inside a task, returned nested


with section("nested tasks"):
    check(ray.get(chain.remote(4 * NUM_WORKERS)) == 4 * NUM_WORKERS)
    check(ray.get(fib.remote(7)) == 13)
    check(ray.get(tree.remote(3, 3)) == 27)
    # Deeper than one executor's stack holds (executor_transport.MAX_NESTED): the
    # waits at the limit lend their CPU to spare executors instead of nesting.
    check(ray.get(fib.remote(12), timeout=120) == 144)
    check(ray.get(tree.remote(5, 4), timeout=120) == 1024)
    check(ray.get(ray.get(submit_only.remote(1))[0]) == 2)
    report("nested", "done")


@ray.remote
def node_address():
    time.sleep(0.01)
    return ray.services.get_node_ip_address()


with section("ray.services.get_node_ip_address"):
    # The docs' check that every node joined (0.2's "Using Ray on a Cluster", 0.7's
    # tutorial): the names match nodes()'s, on the driver and in tasks.
    names = {n["NodeManagerAddress"] for n in ray.nodes()}
    check(ray.services.get_node_ip_address() in names, names)
    check(set(ray.get([node_address.remote() for _ in range(20)])) <= names, names)
    check(isinstance(ray.services.get_node_ip_address("8.8.8.8:53"), str))


@ray.remote
def worker_mode():
    return ray.worker.global_worker.mode


with section("ray.worker.global_worker.mode"):
    # Ray 0.7's constants: the driver is in SCRIPT_MODE, tasks and actors in WORKER_MODE.
    check((ray.SCRIPT_MODE, ray.WORKER_MODE, ray.LOCAL_MODE) == (0, 1, 2))
    check(ray.worker.global_worker.mode == ray.SCRIPT_MODE, ray.worker.global_worker.mode)
    check(ray.get(worker_mode.remote()) == ray.WORKER_MODE)

ray.shutdown()
ok("api_semantics")
