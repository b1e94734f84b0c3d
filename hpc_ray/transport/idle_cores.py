"""How many of this process's CPUs sat idle lately, from ``/proc/stat``.

A rank starts an actor's next executor ahead of time (``worker.WorkerLoop``'s
standby): an interpreter start-up, ~0.3-0.5 s of one core. Started while the
node's cores are all busy, it takes that time from the work running there: three
actors' collectives on 2 cores ran several times slower for their first 0.5 s
after the actors were created (``benchmarks/collective_start.py``), and creating
three actors at once took 0.81-0.93 s against 0.70-0.74 s with no standby. So a
rank starts it once its CPUs have had spare time (``IdleCores``).
"""
from __future__ import annotations

import os

from .placement import cpu_ids, usable_cores


def _cpu_names() -> set[bytes] | None:
    """``/proc/stat``'s names of the CPUs this process may run on (``b"cpu3"``)."""
    ids = cpu_ids()
    return None if ids is None else {b"cpu%d" % i for i in ids}


class IdleCores:
    """Idle CPUs (this process's, by its affinity mask) averaged between two looks."""

    __slots__ = ("cpus", "count", "fd", "last")

    def __init__(self) -> None:
        self.cpus = _cpu_names()
        self.count = len(self.cpus) if self.cpus else usable_cores()
        try:
            self.fd = os.open("/proc/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = -1
        #: (idle ticks, all ticks) of ``cpus`` at the last look.
        self.last: tuple[int, int] | None = None

    def _ticks(self) -> tuple[int, int] | None:
        if self.fd < 0:
            return None
        try:
            text = os.pread(self.fd, 1 << 20, 0)
        except OSError:
            return None
        idle = total = 0
        for line in text.split(b"\n"):
            if not line.startswith(b"cpu"):
                break
            fields = line.split()
            name = fields[0]
            if name == b"cpu" or (self.cpus is not None and name not in self.cpus):
                continue
            ticks = [int(v) for v in fields[1:9]]   # user..steal (guest is in user)
            idle += ticks[3] + ticks[4]             # idle, iowait
            total += sum(ticks)
        return (idle, total) if total else None

    def since_last(self) -> float | None:
        """Idle CPUs on average since the previous call (None on the first call,
        when nothing has ticked since, or where ``/proc/stat`` cannot be read)."""
        now = self._ticks()
        last, self.last = self.last, now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return (now[0] - last[0]) / (now[1] - last[1]) * self.count

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
