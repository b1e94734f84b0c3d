"""The one waiting policy (``transport/wait.py``): the busy-poll before blocking
stops when it finds nothing and comes back when it pays again (a real
socketpair, a real poll); every other wait ends when its condition holds, at
its deadline, or when what it waits on is gone, a collective's wait included."""
from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import types

import pytest

from hpc_ray.exceptions import RayError
from hpc_ray.runtime import collective_ops
from hpc_ray.transport import wait
from hpc_ray.transport.wait import Spinner
from hpc_ray.transport.wait import WaitTimeout, wait_until


class CountingPoller:
    """A real poll object that records the timeouts it was called with."""

    def __init__(self, sock) -> None:
        self.real = select.poll()
        self.real.register(sock, select.POLLIN)
        self.timeouts: list = []

    def poll(self, timeout):
        self.timeouts.append(timeout)
        return self.real.poll(timeout)


def spun(poller: CountingPoller, before: int) -> bool:
    return 0 in poller.timeouts[before:]


def test_spinning_stops_when_it_finds_nothing_and_resumes_when_it_pays(monkeypatch):
    monkeypatch.setattr(wait, "crowded", lambda cores: False)   # (whatever else runs)
    a, b = socket.socketpair()
    try:
        poller = CountingPoller(a)
        s = Spinner(budget=30e-6)    # whatever HPC_RAY_SPIN_US says here
        spins = []
        PROBE = wait.PROBE_EVERY
        for _ in range(PROBE):
            n = len(poller.timeouts)
            assert s.poll(poller, 0.1) == []          # nothing comes: spin, then block
            spins.append(spun(poller, n))
        # 0.9 ** 12 < KEEP: about a dozen waits spin, then only the probe does.
        first_off = spins.index(False)
        assert 8 <= first_off <= 16, spins
        assert not any(spins[first_off:PROBE - 1]) and spins[PROBE - 1], spins
        # Now every answer is there at once: each probe hits, and spinning resumes.
        b.send(b"x")
        for _ in range(3 * PROBE):
            n = len(poller.timeouts)
            assert s.poll(poller, 0.1)
            if spun(poller, n) and s.score > wait.KEEP:
                break
        assert s.score > wait.KEEP
        n = len(poller.timeouts)
        s.poll(poller, 0.1)
        assert spun(poller, n), "a spin that pays is kept"
    finally:
        a.close()
        b.close()


def test_no_spinning_while_more_threads_are_ready_than_cores(monkeypatch):
    """A task's spinner (``look``) does not spin, even where the answer would be
    there at once, while the machine has more threads ready to run than its
    cores; it spins again once they are no more. The driver's and actors'
    spinners (``look`` off) spin all the same. The count of ready threads is
    the machine's own, read from /proc/loadavg."""
    ready = wait.ready_threads()
    assert ready is None or ready >= 1    # this thread at least, where Linux tells
    a, b = socket.socketpair()
    try:
        b.send(b"x")                      # every wait's answer is there at once
        poller = CountingPoller(a)
        task = Spinner(look=True, budget=30e-6)
        driver = Spinner(budget=30e-6)
        threads = [1]
        monkeypatch.setattr(wait, "ready_threads", lambda: threads[0])

        def spins_of(s, waits):
            out = []
            for _ in range(waits):
                n = len(poller.timeouts)
                assert s.poll(poller, 0.1)
                out.append(spun(poller, n))
            return out
        look = wait.LOOK_EVERY
        assert all(spins_of(task, look)), "a paying spin with cores to spare"
        threads[0] = task.cores + 1
        # (A look comes on one wait in LOOK_EVERY: the next ones see the change.)
        assert not any(spins_of(task, 2 * look)[look:]), \
            "spun with more threads ready than cores"
        assert all(spins_of(driver, 2 * look)), "a spinner that does not look stopped"
        threads[0] = task.cores
        assert all(spins_of(task, 2 * look)[look:]), \
            "did not spin again once the crowd was gone"
    finally:
        a.close()
        b.close()


def test_a_wait_ends_when_its_condition_holds():
    polls = iter(range(1000))
    wait_until(lambda: next(polls) == 500, spin=0.0)
    assert next(polls) == 501


def test_a_wait_gives_up_at_its_deadline():
    with pytest.raises(WaitTimeout, match="the answer"):
        wait_until(lambda: False, timeout=0.05, what="the answer")


def test_a_wait_ends_when_what_it_waits_on_is_gone():
    class Gone(Exception):
        pass
    checks = []

    def alive():
        checks.append(1)
        if len(checks) == 2:
            raise Gone
    with pytest.raises(Gone):
        wait_until(lambda: False, alive=alive)


class NeverDone:
    """An MPI request whose peer never answers."""

    def Test(self) -> bool:   # noqa: N802 (mpi4py's name)
        return False


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("polite", [True, False])
def test_a_collective_whose_member_rank_died_ends_with_an_error(polite):
    """A request that never completes because a member's rank on this host is
    gone ends with a RayError naming the group (no spin forever); the group is
    broken, and the request stays referenced (MPI may still write into it)."""
    host = socket.gethostname()
    loop = types.SimpleNamespace(
        collective_members={"g": [(host, os.getpid()), (host, _dead_pid())]},
        broken_groups={}, abandoned=[], driver_pid=None)
    req = NeverDone()
    with pytest.raises(RayError, match=r"allreduce in collective group 'g'.*member\(s\) \[1\]"):
        collective_ops._wait(req, polite, loop, "g", "allreduce", ())
    assert "g" in loop.broken_groups
    assert loop.abandoned[0][0] is req


def test_a_collective_ends_with_an_error_when_the_driver_is_gone():
    loop = types.SimpleNamespace(collective_members={"g": []}, broken_groups={},
                                 abandoned=[], driver_pid=_dead_pid())
    with pytest.raises(RayError, match="the driver"):
        collective_ops._wait(NeverDone(), True, loop, "g", "barrier", ())


def test_turning_a_mechanism_off_for_an_a_b_run():
    """``HPC_RAY_WAIT_OFF`` turns the spins off (a Spinner never spins, nor does
    a look); a name it does not know warns and keeps them all."""
    code = ("from hpc_ray.transport import wait;"
            "print(sorted(wait.OFF), wait.Spinner().due(), wait.Spinner(look=True).look)")
    env = {**os.environ, "HPC_RAY_WAIT_OFF": "spin,look"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.stdout.split("]")[1].split() == ["False", "False"], out.stderr
    env["HPC_RAY_WAIT_OFF"] = "spin,fast"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.stdout.startswith("[]"), out.stderr
    assert "ignoring HPC_RAY_WAIT_OFF='spin,fast'" in out.stderr


def test_a_sender_stops_draining_at_its_deadline():
    """``Sender.drain`` at shutdown: a send nobody receives does not hold the
    rank forever; it says whether every send completed."""
    from mpi4py import MPI

    from hpc_ray.transport.comm import Sender
    sender = Sender(MPI.COMM_SELF)
    sender.send_sync(0, ["hello"])
    assert sender.drain(0.05) is False
    assert MPI.COMM_SELF.recv(source=0) == ["hello"]
    assert sender.drain(5.0) is True
