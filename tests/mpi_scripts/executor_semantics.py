"""Issue 11, executor side: threads of a task or actor calling the API at once,
worker prints reaching the driver's stdout/stderr with Ray's prefix, and an actor
call lost with its process retried on the restarted actor."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import importlib.util
import io
import re
import signal
import sys
import threading
import time

import numpy as np
from _harness import check, init_kwargs, ok, poll_for, report, running, section, tmp_path

import hpc_ray as ray
from hpc_ray.exceptions import ActorDiedError

THREADS = 10
ROUNDS = 20


class Tee(io.TextIOBase):
    """The driver's sys.stdout/sys.stderr during a check: kept and passed on."""

    def __init__(self, stream):
        self.stream = stream
        self.parts = []

    def write(self, s):
        self.parts.append(s)
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()

    def text(self):
        return "".join(self.parts)


ray.init(**init_kwargs())


# --- threads inside a task or an actor ---------------------------------------------

@ray.remote
def leaf(x):
    return x + 1


def hammer(i, rounds, shared=None):
    """get/put/wait/.remote() in a loop; the sum of what came back."""
    total = 0
    for j in range(rounds):
        if shared is not None and int(ray.get(shared)[-1]) != 7:  # one ref, every thread
            raise AssertionError("wrong shared array")
        ref = leaf.remote(ray.put(i * 1000 + j))
        ready, _ = ray.wait([ref], timeout=60)
        if ready != [ref]:
            raise AssertionError(f"wait gave {ready}")
        total += ray.get(ref)
        if j % 5 == 0:  # a store-sized value: an ALLOC request too
            a = np.full(40000, i, dtype=np.int64)
            if int(ray.get(ray.put(a)).sum()) != 40000 * i:
                raise AssertionError("wrong array")
    return total


def expected(i, rounds=ROUNDS):
    return sum(i * 1000 + j + 1 for j in range(rounds))


def threaded(n, rounds):
    """n threads hammering the API while the calling thread does too."""
    out = [None] * n
    shared = ray.put(np.full(30000, 7, dtype=np.int64))

    def run(i):
        try:
            out[i] = hammer(i, rounds, shared)
        except BaseException as exc:  # reported as a value the driver checks
            out[i] = repr(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    mine = hammer(99, rounds)
    for t in threads:
        t.join()
    return out, mine


@ray.remote
def threaded_task(n, rounds):
    return threaded(n, rounds)


@ray.remote
class ThreadedActor:
    def __init__(self):
        # A thread that outlives every call: it uses the API while the actor's
        # main thread waits for the next call.
        self.background = []
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        k = 0
        while not self.stop:
            self.background.append(ray.get(leaf.remote(k)) - k)
            k += 1
            time.sleep(0.01)

    def run(self, n, rounds):
        return threaded(n, rounds)

    def background_results(self):
        seen = len(self.background)
        deadline = time.monotonic() + 30
        while len(self.background) < seen + 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # still going while no call runs
        self.stop = True
        self.thread.join(30)
        return len(self.background) > seen, set(self.background)


@ray.remote
def fan_out(n):
    refs = [leaf.remote(i) for i in range(n)]
    ready, _ = ray.wait(refs, num_returns=n, timeout=60)
    return len(ready), ray.get(refs, timeout=60)


with section("timed get lends its CPU"):
    # Two fan_out tasks take both CPUs: their subtasks can only run on the CPUs
    # that their wait()/get() lend while they wait, which one with a timeout does
    # as one without does (it used to hold it: a deadlock).
    got = ray.get([fan_out.remote(4), fan_out.remote(4)], timeout=90)
    check(got == [(4, [1, 2, 3, 4])] * 2, f"fan_out: {got}")
    report("timed_get", "ok")


@ray.remote
def moves_to(name):
    os.makedirs(tmp_path(name), exist_ok=True)
    os.chdir(tmp_path(name))
    os.environ["HPC_RAY_TEST_PLACE"] = name
    return os.getpid()


@ray.remote
def moves_then_waits(name):
    os.makedirs(tmp_path(name), exist_ok=True)
    os.chdir(tmp_path(name))
    os.environ["HPC_RAY_TEST_PLACE"] = name
    pids = ray.get([moves_to.remote(f"{name}-sub{i}") for i in range(4)], timeout=60)
    return os.getpid() in pids, os.getcwd(), os.environ["HPC_RAY_TEST_PLACE"]


with section("a task run in another's wait"):
    # Both CPUs are taken by waiting tasks, so their subtasks run in the waiting
    # processes; each subtask's chdir and environment are undone when it ends,
    # as when it has a process of its own (Ray).
    got = ray.get([moves_then_waits.remote("outer-a"), moves_then_waits.remote("outer-b")],
                  timeout=90)
    check([place[1:] for place in got] == [(os.path.realpath(tmp_path(name)), name)
                                           for name in ("outer-a", "outer-b")], got)


@ray.remote
def learns(caller_pid):
    import torch
    x = torch.ones(2, requires_grad=True)
    (3 * x).sum().backward()
    if os.getpid() == caller_pid:
        # Run in its caller's wait, it leaves the modes as a task's last lines
        # may; run on its own it leaves them be, as a reused worker would show
        # them to the rank's next task here and in Ray alike.
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
    return x.grad.tolist(), os.getpid()


@ray.remote
def waits_without_grad():
    import torch
    with torch.no_grad():
        plain = ray.get([learns.remote(os.getpid()) for _ in range(3)], timeout=60)
        grad_in_block = torch.is_grad_enabled()
    with torch.inference_mode():
        inferring = ray.get([learns.remote(os.getpid()) for _ in range(3)], timeout=60)
        inferring_after = torch.is_inference_mode_enabled()
    nested = any(pid == os.getpid() for _, pid in plain + inferring)
    return ([grad for grad, _ in plain + inferring], torch.is_grad_enabled(),
            str(torch.get_default_dtype()), (grad_in_block, inferring_after), nested)


if importlib.util.find_spec("torch") is not None:
    with section("a task run in another's torch.no_grad()"):
        # Its backward() failed ("element 0 of tensors does not require grad"): it
        # ran in its caller's thread, in the caller's grad mode. Now it starts as
        # a task does, and the caller gets its own modes back.
        got = ray.get([waits_without_grad.remote(), waits_without_grad.remote()], timeout=120)
        check([g[:4] for g in got]
              == [([[3.0, 3.0]] * 6, True, "torch.float32", (False, True))] * 2, got)
        report("torch_nested", any(g[4] for g in got))


@ray.remote
def thread_waits(n):
    out = []
    waiter = threading.Thread(target=lambda: out.append(
        ray.get([leaf.remote(i) for i in range(n)])))
    waiter.start()
    waiter.join()   # the main thread waits outside the API
    return out[0]


with section("a thread's get lends its CPU"):
    # Both CPUs are taken by tasks whose main threads wait in join(): the leaves
    # run only because a waiting thread lends its task's CPU to another process.
    got = ray.get([thread_waits.remote(3), thread_waits.remote(3)], timeout=90)
    check(got == [[1, 2, 3]] * 2, f"thread_waits: {got}")
    report("thread_lends", "ok")


with section("threads"):
    want = [expected(i) for i in range(THREADS)]
    out, mine = ray.get(threaded_task.remote(THREADS, ROUNDS), timeout=120)
    check(out == want, f"task threads: {out}")
    check(mine == expected(99), f"task main thread: {mine}")
    actor = ThreadedActor.remote()
    out, mine = ray.get(actor.run.remote(THREADS, ROUNDS), timeout=120)
    check(out == want, f"actor threads: {out}")
    check(mine == expected(99), f"actor main thread: {mine}")
    time.sleep(0.2)  # the actor idle: its background thread alone talks to the rank
    check(ray.get(actor.background_results.remote(), timeout=60) == (True, {1}))
    # Both still answer one call at a time afterwards.
    check(ray.get(threaded_task.remote(2, 3), timeout=60) == ([expected(0, 3), expected(1, 3)],
                                                              expected(99, 3)))
    report("threads", "ok")


# --- worker prints on the driver ----------------------------------------------------

@ray.remote
def chatty(tag):
    print(f"hello from task {tag}")
    print(f"oops from task {tag}", file=sys.stderr)
    sys.stdout.write(f"part one of {tag}, ")
    sys.stdout.flush()
    time.sleep(0.05)
    sys.stdout.write("part two\n")
    print("L" * 200_000)        # longer than a pipe's read: one line all the same
    sys.stdout.write(f"no newline after {tag}")     # the task's last line, left open
    return os.getpid()


@ray.remote
class Chatty:
    def say(self, text):
        print(text)
        return os.getpid()


with section("prints"):
    out, err = Tee(sys.stdout), Tee(sys.stderr)
    sys.stdout, sys.stderr = out, err
    try:
        pid = ray.get(chatty.remote("T1"), timeout=60)
        a = Chatty.remote()
        apid = ray.get(a.say.remote("hello from actor A1"), timeout=60)
        line = re.compile(r"^\(pid=(\d+), rank=(\d+)\) hello from task T1$", re.M)
        poll_for(lambda: line.search(out.text()) and "actor A1" in out.text()
                 and "oops" in err.text(), 20)
    finally:
        sys.stdout, sys.stderr = out.stream, err.stream
    found = line.findall(out.text())
    check(len(found) == 1 and int(found[0][0]) == pid, f"stdout: {out.text()!r}")
    check(f"(pid={pid}, rank={found[0][1] if found else '?'}) part one of T1, part two\n"
          in out.text(), f"a line written in two parts: {out.text()!r}")
    check(re.search(rf"^\(pid={apid}, rank=\d+\) hello from actor A1$", out.text(), re.M),
          f"actor line: {out.text()!r}")
    check(re.search(rf"^\(pid={pid}, rank=\d+\) oops from task T1$", err.text(), re.M),
          f"stderr: {err.text()!r}")
    check("oops" not in out.text() and "hello" not in err.text())
    check(re.search(rf"^\(pid={pid}, rank=\d+\) no newline after T1$", out.text(), re.M),
          f"a last line without its newline: {out.text()!r}")
    long_lines = re.findall(r"^\(pid=\d+, rank=\d+\) (L+)$", out.text(), re.M)
    check([len(x) for x in long_lines] == [200_000], [len(x) for x in long_lines])
    report("prints", {"pid": pid, "actor_pid": apid})


# --- an actor call lost with its process is retried on the restarted actor ---------

@ray.remote
class Phoenix:
    def __init__(self):
        self.pid = os.getpid()
        self.calls = 0

    def die_once(self, marker, how):
        self.calls += 1
        if not os.path.exists(marker):
            with open(marker, "w"):
                pass
            print(f"dying once ({how})", flush=True)
            if how == "exit":
                os._exit(1)
            os.kill(os.getpid(), signal.SIGKILL)
        return self.pid, self.calls


with section("actor retries"):
    a = Phoenix.options(max_restarts=1, max_task_retries=1).remote()
    pid, calls = ray.get(a.die_once.remote(tmp_path("exit-once"), "exit"), timeout=60)
    check(pid != os.getpid() and calls == 1, (pid, calls))  # a fresh actor ran it
    check(ray.get(a.die_once.remote(tmp_path("exit-once"), "exit"), timeout=60) == (pid, 2))

    # 0.7's max_reconstructions, and a method's own max_retries option.
    b = Phoenix.options(max_reconstructions=1).remote()
    pid_b, calls = ray.get(b.die_once.options(max_retries=1).remote(
        tmp_path("kill-once"), "kill"), timeout=60)
    check(calls == 1, calls)

    # Without retries the lost call fails, and the restarted actor serves the next one.
    c = Phoenix.options(max_restarts=1).remote()
    try:
        ray.get(c.die_once.remote(tmp_path("exit-no-retry"), "exit"), timeout=60)
        check(False, "a call lost without retries returned")
    except ActorDiedError:
        pass
    check(ray.get(c.die_once.remote(tmp_path("exit-no-retry"), "exit"), timeout=60)[1] == 1)

    # A call's max_retries=0 overrides the actor's max_task_retries: the lost call
    # fails rather than run again (and kill the restarted actor too).
    d = Phoenix.options(max_restarts=1, max_task_retries=1).remote()
    try:
        ray.get(d.die_once.options(max_retries=0).remote(tmp_path("exit-zero"), "exit"),
                timeout=60)
        check(False, "a call with max_retries=0 was retried")
    except ActorDiedError:
        pass
    check(ray.get(d.die_once.remote(tmp_path("exit-zero"), "exit"), timeout=60)[1] == 1)
    report("retries", "ok")


# --- @ray.method(max_retries=...) when the driver kills the actor mid-call ---------

@ray.remote
class Sleeper:
    def pid(self):
        return os.getpid()

    @ray.method(max_retries=1)
    def nap(self, marker):
        open(f"{marker}-{os.getpid()}", "w").close()
        # Held until the driver has killed the process, however slow the machine:
        # the kill always lands mid-call; a retry, run after, returns at once.
        poll_for(lambda: os.path.exists(f"{marker}-release"), 60)
        return os.getpid()

    def nap_once(self, marker):
        return self.nap(marker)


def kill_mid_call(actor, method, marker):
    """Start a call, SIGKILL the actor's process while it waits; the call's ref."""
    pid = ray.get(actor.pid.remote(), timeout=60)
    ref = method.remote(marker)
    check(poll_for(lambda: os.path.exists(f"{marker}-{pid}"), 30), "the call never started")
    os.kill(pid, signal.SIGKILL)
    open(f"{marker}-release", "w").close()
    return pid, ref


with section("method max_retries after a kill"):
    # Ray 0.7's max_reconstructions gives the actor a new process; the method's
    # own max_retries runs the lost call again there.
    s = Sleeper.options(max_reconstructions=1).remote()
    old, ref = kill_mid_call(s, s.nap, tmp_path("nap"))
    new = ray.get(ref, timeout=60)
    check(new != old and new == ray.get(s.pid.remote(), timeout=60), (old, new))
    # A method without max_retries loses its call, and so does one whose .options()
    # (max_task_retries: modern Ray's name) override the decorator's; the
    # restarted actor serves the next call.
    for name in ("nap_once", "nap_zero"):
        t = Sleeper.options(max_restarts=1).remote()
        method = t.nap_once if name == "nap_once" else t.nap.options(max_task_retries=0)
        old, ref = kill_mid_call(t, method, tmp_path(name))
        err = None
        try:
            ray.get(ref, timeout=60)
        except ActorDiedError as e:
            err = e
        check(err is not None, f"{name}: a call lost without retries returned")
        check(ray.get(t.pid.remote(), timeout=60) != old, name)
    report("method_retries", "ok")



@ray.remote
def leaves_behind():
    """Starts a child it never waits for and an orphan (its shell has exited)."""
    import subprocess
    child = subprocess.Popen(["sleep", "300"])
    orphan = subprocess.check_output(["bash", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
    return [child.pid, int(orphan)]


@ray.remote(max_retries=0)
def forks(child_ends):
    """The parent's result, whatever the forked child does at the task's end."""
    pid = os.fork()
    if pid == 0:
        if child_ends == "exit":
            sys.exit(0)
        if child_ends == "raise":
            raise ValueError("raised in the forked child")
        return "the child's"   # forgot os._exit
    _, status = os.waitpid(pid, 0)
    return ("the parent's", os.getpid(), os.waitstatus_to_exitcode(status))


with section("a child forked in a task"):
    # The child leaves as a forked Python process does, with its own status, and
    # the task's result is the parent's.
    for ends, status in (("exit", 0), ("raise", 1), ("return", 0)):
        value = ray.get(forks.remote(ends), timeout=60)
        check(value[0] == "the parent's" and value[2] == status, (ends, value))


@ray.remote
class Starter:
    def start(self):
        import subprocess
        return subprocess.Popen(["sleep", "300"]).pid


with section("processes tasks leave behind"):
    left = ray.get(leaves_behind.remote(), timeout=60)
    left.append(ray.get(Starter.remote().start.remote(), timeout=60))
    check(all(running(pid) for pid in left), left)

ray.shutdown()
# What the tasks started ends with the job (under a plain mpiexec as under Slurm).
ended = poll_for(lambda: not any(running(pid) for pid in left), 20)
for pid in left:   # the test leaves nothing behind either way
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
check(ended, f"still running after shutdown: {[pid for pid in left if running(pid)]}")
ok("executor_semantics")
