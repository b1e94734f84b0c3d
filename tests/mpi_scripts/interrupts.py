"""Ctrl-C while the driver waits: ``interrupts.py repeat N`` interrupts N gets
(the driver signals itself, and the test adds SIGINTs from outside), then checks
every result still arrives; ``repeat_actor N`` does the same with calls to an
actor (direct calls: the driver's own sockets); ``interrupts.py group`` waits in
one get while the test sends SIGINT to the whole process group, as a terminal does."""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import random
import signal
import tempfile
import threading
import time

from _harness import init_kwargs, poll_for

import hpc_ray as ray

# A shell that starts a job in the background ("pytest &") leaves SIGINT
# ignored, and Python keeps it so (hpc_ray then leaves it alone, as it should):
# this test is about a Ctrl-C reaching the driver, so it wants Python's default.
signal.signal(signal.SIGINT, signal.default_int_handler)
ray.init(**init_kwargs())


@ray.remote
def slow(i, seconds):
    time.sleep(seconds)
    return i


@ray.remote
def gated(i, gate):
    # Held until the driver has been interrupted (or 30 s), so that the get the
    # Ctrl-C must interrupt cannot end first on a slow machine.
    poll_for(lambda: os.path.exists(gate), 30)
    return i


@ray.remote
class Slow:
    def call(self, i, seconds):
        time.sleep(seconds)
        return i


def interruptible(fn, *args, **kwargs):
    """Call ``fn``; a KeyboardInterrupt (from any of the SIGINTs) is retried."""
    while True:
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            continue


mode = sys.argv[1]
pid = os.getpid()
interruptible(ray.get, slow.remote(0, 0.0))
print(f"DRIVER {pid}", flush=True)

if mode in ("repeat", "repeat_actor"):
    actor = Slow.remote() if mode == "repeat_actor" else None
    if actor is not None:
        interruptible(ray.get, actor.call.remote(0, 0.0))
        call = actor.call.remote
    else:
        call = slow.remote
    # A thread sends SIGINT to this process every few milliseconds, N times in
    # all, while the main thread submits and gets; a KeyboardInterrupt may land
    # anywhere in this loop, as it would for a user leaning on Ctrl-C.
    n = int(sys.argv[2])
    sent = [0]
    stop = threading.Event()

    def ctrl_c():
        while sent[0] < n and not stop.is_set():
            time.sleep(random.uniform(0.002, 0.02))
            os.kill(pid, signal.SIGINT)
            sent[0] += 1

    submitted = []    # (ref, expected value)
    interrupted = 0
    sender = threading.Thread(target=ctrl_c)
    print("READY", flush=True)
    sender.start()
    k = 0
    while True:
        # Two levels of try: a second Ctrl-C may land in the first one's handler.
        try:
            try:
                if not sender.is_alive():
                    break
                k += 1
                refs = [call(k * 10 + i, 0.005) for i in range(4)]
                submitted.extend(zip(refs, [k * 10 + i for i in range(4)]))
                ray.get(refs, timeout=60)
            except KeyboardInterrupt:
                interrupted += 1
        except KeyboardInterrupt:
            interrupted += 1
    interruptible(sender.join)
    interruptible(time.sleep, 0.05)  # the last signal is handled before the summary
    refs = [r for r, _ in submitted]
    values = interruptible(ray.get, refs, timeout=60)
    print(f"{sent[0]} SIGINTs, {interrupted} KeyboardInterrupts, {len(refs)} results",
          flush=True)
    if sent[0] == n and values == [v for _, v in submitted] and interrupted >= n // 2:
        print(f"RESULTS OK {n}", flush=True)
    else:
        print(f"RESULTS WRONG sent={sent[0]} interrupted={interrupted}", flush=True)
else:
    with tempfile.TemporaryDirectory(prefix="hpc_ray-test-gate-") as gate_dir:
        gate = os.path.join(gate_dir, "open")
        refs = [gated.remote(i, gate) for i in range(12)]
        print("WAITING", flush=True)
        try:
            ray.get(refs, timeout=60)
            print("NOT INTERRUPTED", flush=True)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
        open(gate, "w").close()
        if ray.get(refs, timeout=60) == list(range(12)):
            print("RESULTS OK", flush=True)
    print("AGAIN", ray.get(slow.remote(5, 0.0), timeout=60), flush=True)

# A SIGINT that lands after the last get must not break shutdown either.
signal.signal(signal.SIGINT, signal.SIG_IGN)
ray.shutdown()
