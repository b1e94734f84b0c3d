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


def test_short_spins_while_more_threads_are_ready_than_cores(monkeypatch):
    """While the machine has more threads ready to run than the spinner's cores, a
    task's spinner polls CROWDED_BUDGET at most, not BUDGET; with the crowd gone,
    BUDGET again. The driver's and actors' spinners (``look`` off) keep BUDGET.
    The count of ready threads is the machine's own, from /proc/loadavg; the
    spin's clock here is a fake one that advances 10 us per reading."""
    ready = spin.ready_threads()
    assert ready is None or ready >= 1    # this thread at least, where Linux tells
    monkeypatch.setattr(spin, "BUDGET", 300e-6)
    monkeypatch.setattr(spin, "CROWDED_BUDGET", 50e-6)
    clock = [0.0]

    def fake_clock():
        clock[0] += 10e-6
        return clock[0]
    monkeypatch.setattr(spin.time, "perf_counter", fake_clock)
    a, b = socket.socketpair()
    try:
        poller = CountingPoller(a)
        threads = [1]
        monkeypatch.setattr(spin, "ready_threads", lambda: threads[0])

        def polls_of_a_miss(s):
            s.score = 1.0                 # (a miss lowers it: spin every time)
            n = len(poller.timeouts)
            assert s.poll(poller, 1) == []
            return poller.timeouts[n:].count(0)
        task = Spinner(look=True)
        driver = Spinner()
        look = spin.LOOK_EVERY
        calm = [polls_of_a_miss(task) for _ in range(look)]
        assert min(calm) >= 25, calm      # ~300 us of 10 us readings
        threads[0] = task.cores + 1
        # (A look comes on one wait in LOOK_EVERY: the next ones see the change.)
        crowded = [polls_of_a_miss(task) for _ in range(2 * look)][look:]
        assert max(crowded) <= 6, crowded     # ~50 us
        assert min(polls_of_a_miss(driver) for _ in range(2 * look)) >= 25
        threads[0] = task.cores
        calm_again = [polls_of_a_miss(task) for _ in range(2 * look)][look:]
        assert min(calm_again) >= 25, calm_again
        b.send(b"x")                      # an answer there at once is caught, crowd or not
        threads[0] = task.cores + 1
        for _ in range(2 * look):
            n = len(poller.timeouts)
            assert task.poll(poller, 1)
            assert poller.timeouts[n] == 0
    finally:
        a.close()
        b.close()
