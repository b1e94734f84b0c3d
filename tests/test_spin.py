"""The busy-poll before blocking (``transport/spin.py``) stops when it finds nothing
and comes back when it pays again; a real socketpair, a real poll."""
from __future__ import annotations

import select
import socket

from hpc_ray.transport import spin
from hpc_ray.transport.spin import Spinner


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
    monkeypatch.setattr(spin, "BUDGET", 30e-6)    # whatever HPC_RAY_SPIN_US says here
    monkeypatch.setattr(spin, "crowded", lambda cores: False)   # (whatever else runs)
    a, b = socket.socketpair()
    try:
        poller = CountingPoller(a)
        s = Spinner()
        spins = []
        PROBE = spin.PROBE_EVERY
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
            if spun(poller, n) and s.score > spin.KEEP:
                break
        assert s.score > spin.KEEP
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
    monkeypatch.setattr(spin, "BUDGET", 30e-6)
    ready = spin.ready_threads()
    assert ready is None or ready >= 1    # this thread at least, where Linux tells
    a, b = socket.socketpair()
    try:
        b.send(b"x")                      # every wait's answer is there at once
        poller = CountingPoller(a)
        task = Spinner(look=True)
        driver = Spinner()
        threads = [1]
        monkeypatch.setattr(spin, "ready_threads", lambda: threads[0])

        def spins_of(s, waits):
            out = []
            for _ in range(waits):
                n = len(poller.timeouts)
                assert s.poll(poller, 0.1)
                out.append(spun(poller, n))
            return out
        look = spin.LOOK_EVERY
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
