"""Embedded mode: a worker rank's process is SIGKILLed (as the OOM killer does)
while the driver waits in ``get`` for a task on it. No launcher ends the job
(the driver is the user's own process): the session breaks instead. The pending
``get`` and every later call raise a RayError naming the rank and its pid, and
the driver leaves with its own exit status once its exit handlers have run.

How the script ends (its argument):
    shutdown       shutdown(), then init() again (a RayError), then sys.exit(EXIT_CODE)
    exit           sys.exit(EXIT_CODE), shutdown() left to the exit handlers
    mpi4py-first   as ``exit``, with mpi4py.MPI imported before init(): mpi4py
                   finalizes MPI, so the driver leaves before it, with status 1
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import atexit
import signal
import sys
import time

HOW = sys.argv[1]
if HOW == "mpi4py-first":
    from mpi4py import MPI  # noqa: F401

from _harness import (check, expect_raises, init_kwargs, ok, poll_for, report, running,
                      section, tmp_path)

import hpc_ray as ray
from hpc_ray.exceptions import GetTimeoutError, RayError

#: The status of ``exit``.
EXIT_CODE = 7
#: Seconds the pending get may wait: the dead rank is found within about 1 s.
GET_TIMEOUT = 20

atexit.register(lambda: (sys.stdout.write("ATEXIT ran\n"), sys.stdout.flush()))
ray.init(**init_kwargs())


@ray.remote
def sleeps(marker):
    import subprocess
    # Left running, in a session of its own (as a daemon is): the launcher, which
    # kills the dead rank's process group, does not reach it.
    stray = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(marker, "w") as f:
        f.write(f"{os.getppid()} {stray.pid}")    # the executor's parent: its worker rank
    time.sleep(600)


@ray.remote
def square(x):
    return x * x


with section("a killed worker rank breaks the session"):
    check(ray.get(square.remote(3), timeout=60) == 9)
    marker = tmp_path("sleeper-rank-pid")
    ref = sleeps.remote(marker)
    check(poll_for(lambda: os.path.exists(marker) and os.path.getsize(marker), 60), marker)
    pid, stray = map(int, open(marker).read().split())
    os.kill(pid, signal.SIGKILL)
    err = expect_raises(RayError, ray.get, ref, timeout=GET_TIMEOUT)
    check(not isinstance(err, GetTimeoutError), f"get still waited after {GET_TIMEOUT} s")
    check(f"(pid {pid})" in str(err), f"pid {pid} not named in {err}")
    report("error", str(err))
    for what, call in [("get", lambda: ray.get(ref, timeout=GET_TIMEOUT)),
                       ("wait", lambda: ray.wait([ref], timeout=GET_TIMEOUT)),
                       ("put", lambda: ray.put(1)),
                       ("new task", lambda: ray.get(square.remote(3), timeout=GET_TIMEOUT))]:
        later = expect_raises(RayError, call)
        check(not isinstance(later, GetTimeoutError) and f"(pid {pid})" in str(later),
              f"{what}: {later!r}")
    print("session broken", flush=True)

if HOW == "shutdown":
    with section("shutdown, then init() again"):
        ray.shutdown()
        check(not ray.is_initialized())
        # The dead rank could not end what its task left running: shutdown() did.
        ended = poll_for(lambda: not running(stray), 10)
        check(ended, f"the dead rank's task's process {stray} outlived shutdown()")
        again = expect_raises(RayError, ray.init, **init_kwargs())
        check(f"(pid {pid})" in str(again) and "new Python process" in str(again), again)
        report("reinit", str(again))
        check(not ray.is_initialized())
try:
    os.kill(stray, signal.SIGKILL)   # (ended already after shutdown)
except OSError:
    pass
ok("spawned_rank_killed")
sys.exit(EXIT_CODE)
