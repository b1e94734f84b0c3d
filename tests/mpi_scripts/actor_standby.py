"""The executor a worker rank starts ahead for its next actor.

One worker rank with 1 CPU. Once it has hosted an actor it keeps one spare
executor: the next actor runs in that process (its pid was already there before
the actor was created), and a new spare follows, but not while every core is
busy (its start-up would take a core from the work). A spare that dies is replaced
quietly, with no crash reported, and actors still start. ``off`` (run with
HPC_RAY_ACTOR_STANDBY=0): no spare, each actor a new process.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import signal
import subprocess
import time

from _harness import check, executor_pids, init_kwargs, ok, poll_for, report, section

import hpc_ray as ray
from hpc_ray.transport.placement import usable_cores

ray.init(**init_kwargs())
standby_on = sys.argv[1] == "on"
#: A busy loop that ends by itself (its parent gone, or after 30 s) should this
#: script die before it kills it.
BURN = ("import os, time\nparent, end = os.getppid(), time.time() + 30\n"
        "while os.getppid() == parent and time.time() < end: pass")


def child_pids(parent: int) -> set[int]:
    """Every child of ``parent`` still in the process table, zombies included."""
    import psutil
    try:
        return {c.pid for c in psutil.Process(parent).children()}
    except psutil.NoSuchProcess:
        return set()


@ray.remote
def pid():
    return os.getpid()


@ray.remote
def rank_pid():
    return os.getppid()


@ray.remote(num_cpus=0)
class Actor:
    def pid(self):
        return os.getpid()


rank = ray.get(rank_pid.remote(), timeout=60)
cpu_executor = ray.get(pid.remote(), timeout=60)
check(executor_pids(rank) == {cpu_executor}, executor_pids(rank))

with section("the next actor runs in the executor started ahead"):
    first = Actor.remote()
    first_pid = ray.get(first.pid.remote(), timeout=60)
    known = {cpu_executor, first_pid}
    # (A spare waits for an idle core on the machine: up to 30 s on a busy one.)
    spare = poll_for(lambda: executor_pids(rank) - known, 30 if standby_on else 2)
    if not standby_on:
        check(not spare, f"a spare executor with HPC_RAY_ACTOR_STANDBY=0: {spare}")
    elif check(len(spare) == 1, spare):
        spare_pid = spare.pop()
        # Every core busy: the next spare is due once ``second`` takes this one,
        # and waits for a core to spare (worker.STANDBY_LOOK).
        burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(usable_cores())]
        try:
            second = Actor.remote()
            check(ray.get(second.pid.remote(), timeout=60) == spare_pid)
            known.add(spare_pid)
            report("next_actor_in_spare", True)
            # Longer than the 5 s after which it used to start whatever the load.
            time.sleep(6.0)
            report("spare_while_busy", sorted(executor_pids(rank) - known))
        finally:
            for b in burners:
                b.kill()
                b.wait()
        # A new spare follows once that one is up.
        check(len(poll_for(lambda: executor_pids(rank) - known, 30)) == 1, executor_pids(rank))

with section("a spare that dies is replaced without a crash report"):
    if standby_on:
        [spare_pid] = executor_pids(rank) - known
        os.kill(spare_pid, signal.SIGKILL)
        # Until the rank has reaped it (read its end), it is still its spare: an
        # actor created meanwhile would go to the dying process.
        check(poll_for(lambda: spare_pid not in child_pids(rank), 10), "the spare lives on")
        third = Actor.remote()
        third_pid = ray.get(third.pid.remote(), timeout=60)
        check(third_pid not in known | {spare_pid}, third_pid)
        check(ray.get(pid.remote(), timeout=60) == cpu_executor)   # nothing else restarted
        report("spare_death_quiet", True)

ray.shutdown()
ok("actor_standby")
