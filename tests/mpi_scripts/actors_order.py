"""Issue 4: the calls one caller makes on an actor run once each, in the order
they were made — also when an earlier call waits for an argument that is not
ready yet, when arguments take different paths (inline or through the object
store), and when several tasks call the same actor."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import time

import numpy as np

from _harness import NUM_WORKERS, TMPDIR, check, init_kwargs, ok, report

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
class Recorder:
    def __init__(self):
        self.seen = []

    def append(self, x):
        self.seen.append(x)
        return len(self.seen)

    def seen_list(self):
        return [x if isinstance(x, (str, int)) else f"array{x.shape}" for x in self.seen]


@ray.remote
def when_file_exists(path, value):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return value


@ray.remote
def caller(rec, tag, n):
    return ray.get([rec.append.remote(f"{tag}-{i}") for i in range(n)])


# An earlier call waits for its argument; later calls are submitted meanwhile.
# Several trials: a race shows up in some of them, not all.
for trial in range(5):
    gate = os.path.join(TMPDIR, f"gate-{trial}")
    rec = Recorder.remote()
    first = rec.append.remote(when_file_exists.remote(gate, "first"))
    second = rec.append.remote("second")
    big = rec.append.remote(np.zeros(1 << 20))          # 8 MB: through the store
    third = rec.append.remote("third")
    ready, _ = ray.wait([second], timeout=0.3)
    check(ready == [], f"trial {trial}: a later call ran before an earlier one's "
                       f"argument was ready")
    open(gate, "w").close()
    got = ray.get([first, second, big, third], timeout=30)
    seen = ray.get(rec.seen_list.remote(), timeout=30)
    check(seen == ["first", "second", "array(1048576,)", "third"] and got == [1, 2, 3, 4],
          f"trial {trial}: returned {got}, the actor saw {seen}")
    ray.kill(rec)

# A chain: each call's argument is the result of the previous call.
rec = Recorder.remote()
ref = rec.append.remote("start")
for i in range(20):
    ref = rec.append.remote(ref)
check(ray.get(ref, timeout=30) == 21)
check(ray.get(rec.seen_list.remote()) == ["start"] + list(range(1, 21)))
ray.kill(rec)

# Several callers at once: each caller's calls stay in its own order.
rec = Recorder.remote()
per_caller = 30
results = ray.get([caller.remote(rec, f"t{k}", per_caller) for k in range(2 * NUM_WORKERS)],
                  timeout=60)
check(all(r == sorted(r) for r in results), results)
seen = ray.get(rec.seen_list.remote())
check(len(seen) == 2 * NUM_WORKERS * per_caller, len(seen))
for k in range(2 * NUM_WORKERS):
    mine = [s for s in seen if s.startswith(f"t{k}-")]
    check(mine == [f"t{k}-{i}" for i in range(per_caller)], mine)
ray.kill(rec)



# Arguments ready before the actor is: each call still runs once, on its actor.
@ray.remote
class SlowStart:
    def __init__(self):
        time.sleep(1.5)              # e.g. loading a data set
        self.calls = []

    def record(self, x):
        self.calls.append(x)
        return len(self.calls)

    def calls_seen(self):
        return self.calls


@ray.remote
def quick(i):
    return i


actors = [SlowStart.remote() for _ in range(3)]
refs = [a.record.remote(quick.remote(i)) for i, a in enumerate(actors)]
check(ray.get(refs, timeout=30) == [1, 1, 1], ray.get(refs, timeout=30))
seen = ray.get([a.calls_seen.remote() for a in actors], timeout=30)
check(seen == [[0], [1], [2]], f"each call should run once on its actor; they saw {seen}")
for a in actors:
    ray.kill(a)

# One ref read by several calls after the caller dropped it (the synchronous
# parameter server's pattern): it stays alive until the last call has read it.
actors = [SlowStart.remote() for _ in range(4)]
weights = quick.remote(7)
refs = [a.record.remote(weights) for a in actors]
del weights
got = ray.get(refs, timeout=30)
check(got == [1, 1, 1, 1], got)
seen = ray.get([a.calls_seen.remote() for a in actors], timeout=30)
check(seen == [[7]] * 4, seen)
for a in actors:
    ray.kill(a)

ray.shutdown()
ok("actors_order")
