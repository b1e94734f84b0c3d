"""Real faults under tasks: the job lives on, the caller gets a clear error,
crashes (not exceptions) are retried, and max_calls retires processes."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import re
import signal
import time

from _harness import (NP, NUM_WORKERS, TMPDIR, check, expect_raises, init_kwargs, ok, report,
                      section, tmp_path)

import hpc_ray as ray
from hpc_ray.exceptions import RayError, TaskError, WorkerCrashedError

ray.init(**init_kwargs())


@ray.remote
def rendezvous(directory, name, expected):
    open(os.path.join(directory, f"started-{name}-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sum(f.startswith(f"started-{name}-") for f in os.listdir(directory)) >= expected:
            return os.getpid()
        time.sleep(0.01)
    raise TimeoutError(f"only some of {expected} workers started")


def all_workers_serve(tag):
    """Every worker rank runs a task at the same time, so none was lost."""
    pids = ray.get([rendezvous.remote(TMPDIR, tag, NUM_WORKERS) for _ in range(NUM_WORKERS)],
                   timeout=60)
    check(len(set(pids)) == NUM_WORKERS, pids)


@ray.remote(max_retries=0)
def segfault():
    faulthandler._sigsegv()


@ray.remote(max_retries=0)
def hard_exit():
    os._exit(1)


@ray.remote(max_retries=0)
def oom_killed():
    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does


@ray.remote
def memory_hog():
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, hard))  # far below the 24 GB here
    try:
        hog = bytearray(4 << 30)
        return len(hog)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@ray.remote
def downstream(x):
    return x


@ray.remote
def wait_for_file(path, value):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return value


messages = {}

# --- crashes --------------------------------------------------------------------

# A task that waits on another rank while the crashes happen: it must survive them.
gate = tmp_path("gate-bystander")
bystander = wait_for_file.remote(gate, "bystander done")
for name, fn in [("segfault", segfault), ("hard_exit", hard_exit), ("oom_killed", oom_killed)]:
    with section(f"crash {name}"):
        err = expect_raises(Exception, ray.get, fn.remote(), timeout=60)
        check(isinstance(err, WorkerCrashedError), repr(err))
        check(isinstance(err, RayError))
        text = str(err)
        check(name in text, text)
        found = re.search(r"rank\D{0,3}(\d+)", text)
        check(found and 1 <= int(found.group(1)) < NP, text)
        messages[name] = text
open(gate, "w").close()
with section("bystander"):
    check(ray.get(bystander, timeout=60) == "bystander done")
with section("all workers serve after the crashes"):
    all_workers_serve("after-crashes")
report("crash_messages", messages)

with section("memory hog"):
    err = expect_raises(Exception, ray.get, memory_hog.remote(), timeout=60)
    check(isinstance(err, TaskError) and isinstance(err, MemoryError),
          f"a task raised MemoryError; get() raised {type(err).__mro__}: {err}")
    all_workers_serve("after-memory-hog")

with section("downstream of a crash"):
    err = expect_raises(Exception, ray.get, downstream.remote(segfault.remote()), timeout=60)
    check(isinstance(err, RayError) and not isinstance(err, ray.exceptions.GetTimeoutError), repr(err))
    report("downstream_of_crash", [type(err).__name__, str(err)[:1000]])

# --- retries: crashes only, default max_retries = 3 ----------------------------


@ray.remote
def crash_first_time(path):
    if not os.path.exists(path):
        open(path, "w").close()
        os._exit(1)
    return "second attempt"


def attempts(path):
    with open(path) as f:
        return len(f.read().split())


@ray.remote
def count_and_crash(path):
    with open(path, "a") as f:
        f.write("x\n")
    os._exit(1)


@ray.remote
def count_and_raise(path):
    with open(path, "a") as f:
        f.write("x\n")
    raise ValueError("not retried")


with section("crash on the first attempt"):
    check(ray.get(crash_first_time.remote(tmp_path("crash-once")), timeout=60) == "second attempt")


with section("default max_retries"):
    path = tmp_path("crash-default")
    err = expect_raises(Exception, ray.get, count_and_crash.remote(path), timeout=90)
    check(isinstance(err, WorkerCrashedError), repr(err))
    check("retries (max_retries) are spent" in str(err), str(err))   # not "set max_retries"
    report("attempts_default_crash", attempts(path))

with section("max_retries=0"):
    path = tmp_path("crash-zero")
    err = expect_raises(Exception, ray.get, count_and_crash.options(max_retries=0).remote(path), timeout=60)
    check(isinstance(err, WorkerCrashedError), repr(err))
    check("Set max_retries" in str(err), str(err))
    report("attempts_zero_crash", attempts(path))
    # errors() says why, as get() does (it said only "get() raises the error").
    crashed = [e["message"] for e in ray.errors() if e.get("function") == "count_and_crash"]
    check(len(crashed) == 2 and all("died with exit code 1" in m for m in crashed), crashed)

with section("exceptions are not retried"):
    path = tmp_path("raise-default")
    err = expect_raises(Exception, ray.get, count_and_raise.remote(path), timeout=60)
    check(isinstance(err, TaskError) and isinstance(err, ValueError), repr(err))
    path2 = tmp_path("raise-three")
    err = expect_raises(Exception, ray.get, count_and_raise.options(max_retries=3).remote(path2),
                        timeout=60)
    check(isinstance(err, ValueError), repr(err))
    report("attempts_raise", [attempts(path), attempts(path2)])

# --- an exception that cannot be pickled ---------------------------------------


class Unsendable(Exception):
    def __reduce__(self):
        raise RuntimeError("cannot pickle me")


@ray.remote
def raises_unsendable():
    raise Unsendable("the original message")


with section("unpicklable exception"):
    err = expect_raises(Exception, ray.get, raises_unsendable.remote(), timeout=60)
    check(isinstance(err, TaskError), repr(err))
    check("the original message" in str(err) and "raises_unsendable" in str(err), str(err))

# --- max_calls ------------------------------------------------------------------


@ray.remote(max_calls=1)
def pid_once():
    return os.getpid()


@ray.remote
def pid_reused():
    return os.getpid()


# More sequential calls than ranks: some rank runs two, each in a new process.
with section("max_calls"):
    once = [ray.get(pid_once.remote(), timeout=60) for _ in range(NUM_WORKERS + 2)]
    report("max_calls_pids", len(set(once)))
    reused = [ray.get(pid_reused.remote(), timeout=60) for _ in range(3 * NUM_WORKERS)]
    report("reused_pids", len(set(reused)))

with section("all workers serve at the end"):
    all_workers_serve("at-the-end")

ray.shutdown()
ok("faults")
