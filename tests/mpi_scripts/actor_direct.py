"""Issue 12: calls to an actor on the caller's host go straight to its socket
(the driver's and those of tasks), and what the user sees is what it was
through the actor's rank: calls run once each in the order made, also when
some of them must go through the rank (an
argument to be copied from another node, with HPC_RAY_RANKS_PER_NODE=1) or
return what only the rank can account for (store blocks, nested refs); printed
lines arrive; the head's tables end empty; a restarted actor gets its calls."""
import faulthandler, os, time
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import numpy as np

from _harness import TMPDIR, check, init_kwargs, ok, poll_for

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote
class Log:
    def __init__(self):
        self.seen = []

    def add(self, x):
        self.seen.append(x if isinstance(x, int) else f"array{x.shape}")
        return len(self.seen)

    def seen_list(self):
        return self.seen

    def block(self, n):
        return np.full(n, 7.0)            # 8 * n bytes: a store block past 100 KiB

    def nested(self, x):
        return [ray.put(x)]               # a ref inside the result

    def shout(self, x):
        print(f"shout {x}")
        return x

    def pid(self):
        return os.getpid()


@ray.remote
def far_array():
    return np.zeros(1 << 15)              # 256 KiB in the store of the task's node


log = Log.remote()
check(ray.get(log.pid.remote(), timeout=30) > 0)
baseline = len(ray.objects())
# Plain calls, calls whose argument lives in another node's store (the rank copies
# it first), and calls with inline arguments, interleaved: one order.
refs, want = [], []
for i in range(60):
    if i % 7 == 3:
        refs.append(log.add.remote(far_array.remote()))
        want.append("array(32768,)")
    else:
        refs.append(log.add.remote(i))
        want.append(i)
got = ray.get(refs, timeout=60)
check(got == list(range(1, 61)), f"every call ran once, in order: {got}")
seen = ray.get(log.seen_list.remote(), timeout=30)
check(seen == want, f"the actor saw the calls in order: {seen}")

# Results the rank keeps the books of, between direct ones.
got = ray.get([log.block.remote(1 << 15), log.add.remote(-1), log.block.remote(10)],
              timeout=30)
check(got[0].shape == (1 << 15,) and float(got[0][-1]) == 7.0 and got[1] == 61
      and list(got[2]) == [7.0] * 10, got)
inner = ray.get(log.nested.remote("in a ref"), timeout=30)
check(ray.get(inner[0], timeout=30) == "in a ref", inner)
check(ray.get(log.shout.remote(5), timeout=30) == 5, "a call that prints")
del got, inner

# Nothing left in the head's tables once the refs are gone (the calls that went
# straight to the actor were counted like the others).
del refs
check(poll_for(lambda: len(ray.objects()) <= baseline, 30),
      f"objects left: {len(ray.objects())}, {baseline} before the calls")
tasks = ray.tasks()
check(all(t["State"] in ("FINISHED", "FAILED") for t in tasks.values()),
      [t for t in tasks.values() if t["State"] not in ("FINISHED", "FAILED")])

# Calls made by tasks go straight to the actor too: each caller's calls run once, in the
# order it made them, while the driver calls the same actor, and when some of
# them must go through the rank (an argument from another node's store).
@ray.remote(num_cpus=0)     # the Log actor holds one of the two CPUs already
class TagLog:
    def __init__(self):
        self.seen = []

    def record(self, tag, x):
        self.seen.append((tag, x if isinstance(x, int) else "array"))
        return len(self.seen)

    def seen_list(self):
        return self.seen


@ray.remote
def caller(actor, tag, n):
    refs = [actor.record.remote(tag, far_array.remote() if i % 5 == 2 else i)
            for i in range(n)]
    return len(ray.get(refs, timeout=60))


tag_log = TagLog.remote()
callers = [caller.remote(tag_log, t, 40) for t in ("a", "b")]
mine = [tag_log.record.remote("driver", i) for i in range(40)]
check(ray.get(callers, timeout=60) == [40, 40], "every task's calls returned")
ray.get(mine, timeout=30)
seen = ray.get(tag_log.seen_list.remote(), timeout=30)
for tag in ("a", "b", "driver"):
    order = [x for t, x in seen if t == tag]
    want = [i if tag == "driver" or i % 5 != 2 else "array" for i in range(40)]
    check(order == want, f"caller {tag}'s calls ran once each, in order: {order}")
ray.kill(tag_log)
# A restarted actor: its new process gets the calls (and a channel of its own).
@ray.remote(max_restarts=1, max_task_retries=1)
class Phoenix:
    def pid(self):
        return os.getpid()

    def die_once(self, marker):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return "survived"


p = Phoenix.remote()
first = ray.get(p.pid.remote(), timeout=30)
died = p.die_once.remote(os.path.join(TMPDIR, "died"))
second = ray.get(p.pid.remote(), timeout=60)
check(ray.get(died, timeout=30) == "survived", "the lost call ran again on the new process")
check(second != first, f"the actor was restarted in a new process ({first} -> {second})")
check(ray.get([p.pid.remote() for _ in range(50)], timeout=30) == [second] * 50)
ray.kill(p)


# An actor that calls itself through its own handle and returns the ref (alone,
# or in a list): the call waits behind the method that made it, so its ref must
# leave without waiting for its answer.
@ray.remote
class Selfish:
    def five(self):
        return 5

    def keep(self, me):
        self.me = me

    def call_me(self):
        return self.me.five.remote()

    def call_me_in_a_list(self):
        return [self.me.five.remote()]


# A method whose result was large goes through the head from then on
# (peer_calls.LARGE_RESULT): results in the store, calls in the order made.
@ray.remote
class Recorder:
    def __init__(self):
        self.seen = 0

    def add(self):
        self.seen += 1
        return self.seen

    def snapshot(self, n):
        return np.full(n, self.seen, dtype=np.int64)


@ray.remote
def snapshots(recorder, n):
    return [int(a[0]) for a in ray.get([recorder.snapshot.remote(n) for _ in range(3)])]


BIG = (2 << 20) // 8
recorder = Recorder.remote()
ray.get(recorder.add.remote(), timeout=30)
time.sleep(0.3)                              # (its socket is up: calls go direct)
check(int(ray.get(recorder.snapshot.remote(BIG), timeout=30)[0]) == 1)
refs = []
for _ in range(6):
    refs += [recorder.add.remote(), recorder.snapshot.remote(BIG)]
got = ray.get(refs, timeout=60)
check([g if isinstance(g, int) else (int(g[0]), int(g[-1]), g.size) for g in got]
      == [x for i in range(2, 8) for x in (i, (i, i, BIG))], [type(g) for g in got])
used = sum(node["ObjectStoreUsed"] for node in ray.nodes())
check(used >= 5 * BIG * 8, f"{used} bytes in the stores while 6 large results are held")
check(ray.get(snapshots.remote(recorder, BIG), timeout=60) == [7, 7, 7], "called from a task")
del got, refs

s = Selfish.remote()
ray.get(s.keep.remote(s), timeout=30)
check(ray.get(ray.get(s.call_me.remote(), timeout=30), timeout=30) == 5)
check(ray.get(ray.get(s.call_me_in_a_list.remote(), timeout=30)[0], timeout=30) == 5)
ray.kill(s)
ray.kill(log)
ray.shutdown()
ok("actor_direct")
