"""A Ctrl-C at every point of a driver step where Python could raise it.

``interrupt_sweep.py task|actor|put|wait|batch`` repeats one user step (a
task's ``remote`` and ``get``; an actor call's; a ``put`` and ``get``; a
task's ``remote``, ``wait`` and ``get``; four submissions that fill a batch
and a ``get`` of them) with one SIGINT handled, through hpc_ray's own handler,
at the step's 1st, 2nd, 3rd ... signal point in the driver thread
(``sigint_points.py``), until a step runs to its end without reaching it.
After each step, a ``get`` with no interrupt must return the right value
within 30 s (no lock or flag left behind by the KeyboardInterrupt), and at the
end every ref the interrupted steps handed back must still give its value.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import signal
import time

from _harness import check, init_kwargs, ok, report
from sigint_points import run_with_sigint_at

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
def echo(x):
    return x


@ray.remote
class Echo:
    def echo(self, x):
        return x


what = sys.argv[1]
if what == "batch":
    from hpc_ray.runtime import driver
    driver.SUBMIT_BATCH = 4      # the 4th submission hands the batch to the head
actor = Echo.remote() if what == "actor" else None
call = actor.echo.remote if actor is not None else echo.remote
check(ray.get(call(-1), timeout=30) == -1, "warm-up call")

handed_back = []      # (ref, value) of steps whose remote() returned

def step(i):
    if what == "batch":
        refs = []
        for k in range(4):
            refs.append(call(i * 4 + k))
            handed_back.append((refs[-1], i * 4 + k))
        return ray.get(refs, timeout=30) == [i * 4 + k for k in range(4)] and i
    if what == "put":
        ref = ray.put(i)
    else:
        ref = call(i)
    handed_back.append((ref, i))
    if what == "wait":
        ready, _ = ray.wait([ref], timeout=30)
        check(ready == [ref], f"step {i}: wait gave {ready!r}")
    return ray.get(ref, timeout=30)

t0 = time.monotonic()
n = 0
interrupted = 0
while True:
    n += 1
    reached, value = run_with_sigint_at(n, lambda: step(n))
    if value is None:
        interrupted += 1
    elif not check(value == n, f"step {n} gave {value!r}"):
        break
    after = ray.get(call(10**6 + n), timeout=30)
    if not check(after == 10**6 + n, f"after a SIGINT at point {n}: {after!r}"):
        break
    if not reached:
        break
values = ray.get([r for r, _ in handed_back], timeout=60)
check(values == [v for _, v in handed_back], "the interrupted steps' values")
report("points", n)
report("interrupted", interrupted)
report("seconds", round(time.monotonic() - t0, 1))
signal.signal(signal.SIGINT, signal.SIG_IGN)
ray.shutdown()
ok(f"interrupt_sweep {what}")
