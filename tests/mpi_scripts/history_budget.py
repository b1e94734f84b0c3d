"""Past the head's history budget (run with a small HPC_RAY_HEAD_HISTORY_BYTES):
a long-lived actor's newest signals keep arriving while its oldest are dropped
(they were dropped whole, and its new ones were never heard again); errors()
lists the failed tasks kept, without tasks()' warning that the oldest are gone."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import check, init_kwargs, ok, report, section

import warnings

import hpc_ray as ray
import hpc_ray.experimental.signal as signal

ray.init(**init_kwargs())


class Progress(signal.Signal):
    def __init__(self, n, payload):
        self.n = n
        self.payload = payload


@ray.remote
class Trainer:
    def __init__(self):
        self.n = 0

    def step(self, k):
        for _ in range(k):
            self.n += 1
            signal.send(Progress(self.n, "x" * 10000))
        return self.n


@ray.remote
def side(i):
    signal.send(Progress(-i, ""))
    return i


with section("budget"):
    trainer = Trainer.remote()
    heard = []
    for r in range(1, 41):   # 4 MB of signals against a budget of 128 KB
        ray.get(trainer.step.remote(10), timeout=30)
        heard += [s.n for _, s in signal.receive([trainer], timeout=10)]
        ray.get(side.remote(r), timeout=30)
    check(heard == list(range(1, 401)), (len(heard), heard[-5:]))
    report("heard", len(heard))


@ray.remote(max_retries=0)
def fails(i):
    raise ValueError(f"E-{i}")


with section("errors"):
    for start in range(0, 1600, 400):
        ray.wait([fails.remote(i) for i in range(start, start + 400)], num_returns=400,
                 timeout=60)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        listed = ray.errors()
    check(not warned, [str(w.message) for w in warned])
    # The newest failures carry their tracebacks.
    check(any("ValueError: E-1599" in e["message"] for e in listed), listed[-3:])
    report("errors_listed", len(listed))

ray.shutdown()
ok("history_budget")
