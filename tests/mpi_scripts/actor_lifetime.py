"""Actor lifetime as in Ray: an actor ends when the last handle to it (in the driver
and in every task that got a copy) goes out of scope, after its pending calls; its
resources, GPUs included, go back to the pool. Named actors live until killed."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import gc
import time

from _harness import check, expect_raises, init_kwargs, ok, poll_for, report, section

import hpc_ray as ray

ray.init(**init_kwargs(num_gpus=1))
T = 30


@ray.remote(num_gpus=1)
class GPUActor:
    def gpus(self):
        return ray.get_gpu_ids()


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def inc(self):
        self.n += 1
        return self.n

    def pid(self):
        return os.getpid()


@ray.remote
def use_later(counter, seconds):
    time.sleep(seconds)
    return ray.get(counter.inc.remote())


@ray.remote
def call_from_thread(counter, gate, path):
    """Return at once; a thread of this process calls the actor once ``gate`` is
    there."""
    import threading

    def later(c=counter):
        poll_for(lambda: os.path.exists(gate), T)
        with open(path, "w") as f:
            f.write(str(ray.get(c.inc.remote(), timeout=T)))
    threading.Thread(target=later, daemon=True).start()
    return "started"


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def exited(pid):
    """Whether the process ``pid`` ends within 15 s."""
    return poll_for(lambda: not alive(pid), 15)


def dropped_counter_exits(use=None):
    """A new Counter's pid, and whether its process ends once the driver drops
    its handle (after ``use(handle)``, if given)."""
    c = Counter.remote()
    pid = ray.get(c.pid.remote(), timeout=T)
    if use is not None:
        use(c)
    del c
    gc.collect()
    return pid, exited(pid)


with section("a dropped actor whose last call nobody waited for gives its GPU back"):
    first = GPUActor.remote()
    for _ in range(3):      # up, and its calls go straight to it (peer_calls)
        check(ray.get(first.gpus.remote(), timeout=T) == [0])
        time.sleep(0.25)
    first.gpus.remote()     # its answer is never asked for
    del first
    second = GPUActor.remote()
    got = ray.get(second.gpus.remote(), timeout=T)   # waited forever before
    check(got == [0], got)
    report("gpu_after_unread_call", got)
    del second

with section("a dropped GPU actor gives its GPU to the next one"):
    first = GPUActor.remote()
    check(ray.get(first.gpus.remote(), timeout=T) == [0])
    del first
    gc.collect()
    second = GPUActor.remote()
    got = ray.get(second.gpus.remote(), timeout=T)   # waited forever before
    check(got == [0], got)
    report("second_gpu_actor", got)
    del second

with section("calls pending when the last handle goes still run"):
    ref = Counter.remote().inc.remote()
    check(ray.get(ref, timeout=T) == 1)

with section("the actor ends once no handle is left"):
    pid, gone = dropped_counter_exits()
    check(gone, f"actor process {pid} still alive without handles")
    report("unreferenced_actor_exited", bool(gone))

with section("a handle keeps its methods without a cycle: dropped, it ends its actor"):
    gc.disable()     # the handle must go with its last reference, not at a collection
    try:
        c = Counter.remote()
        pid = ray.get(c.pid.remote(), timeout=T)
        check(c.inc is c.inc, "the handle did not keep its method")
        check([ray.get(c.inc.remote(), timeout=T) for _ in range(3)] == [1, 2, 3])
        del c
        gone = exited(pid)
        check(gone, f"actor process {pid} still alive: its handle is in a cycle")
    finally:
        gc.enable()

with section("a method outlives its handle and keeps the actor"):
    inc = Counter.remote().inc
    check([ray.get(inc.remote(), timeout=T) for _ in range(2)] == [1, 2])
    del inc

with section("a handle in a running task keeps the actor alive"):
    c = Counter.remote()
    r = use_later.remote(c, 0.5)
    del c
    gc.collect()
    check(ray.get(r, timeout=T) == 1, "the task's copy of the handle did not keep it")

with section("a handle a task used and dropped does not keep the actor"):
    # The task's hold of the handle's ref and its release cancel out in the
    # executor (neither reaches the head); one left over would keep the actor.
    pid, gone = dropped_counter_exits(
        lambda c: check(ray.get(use_later.remote(c, 0.0), timeout=T) == 1))
    check(gone, f"actor process {pid} still alive after the task and the driver let go")
    report("used_handle_released", bool(gone))

with section("a handle a task's thread keeps after the task returned keeps the actor"):
    # The thread's call is answered while the main thread waits for work (it
    # waited for the next task only, and the call timed out). The task's hold of
    # the handle goes to the head with its result, not before: the handle it
    # leaves behind must count once the task's own hold of its arguments ends.
    import tempfile
    fd, path = tempfile.mkstemp(prefix="hpc_ray-test-")
    os.close(fd)
    try:
        c = Counter.remote()
        pid = ray.get(c.pid.remote(), timeout=T)
        check(ray.get(call_from_thread.remote(c, path + ".go", path), timeout=T) == "started")
        del c
        gc.collect()
        time.sleep(0.5)
        check(alive(pid), "the actor ended while a task's thread still held a handle")
        open(path + ".go", "w").close()
        got = poll_for(lambda: open(path).read(), 15)
        check(got == "1", f"the thread's call answered {got!r}")
        report("thread_handle_call", got)
    finally:
        for name in (path, path + ".go"):
            if os.path.exists(name):
                os.unlink(name)

with section("named actors live until killed"):
    Counter.options(name="keeper").remote()
    gc.collect()
    time.sleep(0.3)
    keeper = ray.get_actor("keeper")
    check(ray.get(keeper.inc.remote(), timeout=T) == 1)
    ray.kill(keeper)

ray.shutdown()
ok("actor_lifetime")
