"""How many of this process's CPUs sat idle between two looks
(``transport/idle_cores.py``: when a rank starts its next actor's executor)."""
from __future__ import annotations

import os
import time

from hpc_ray.transport.idle_cores import IdleCores
from hpc_ray.transport.placement import cpu_ids, usable_cores

def test_idle_cores_reads_the_cpus_of_this_process_between_two_looks():
    """``IdleCores`` (when a rank starts its next actor's executor): nothing on
    the first look, then the idle CPUs of this process's mask since the last
    look; a thread that spins the whole time keeps one of them busy."""
    cores = len(os.sched_getaffinity(0))
    looks = IdleCores()
    try:
        assert looks.since_last() is None
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass
        idle = looks.since_last()
        assert idle is not None and 0.0 <= idle <= cores - 0.5, (idle, cores)
        time.sleep(0.3)
        idle = looks.since_last()
        assert idle is not None and 0.0 <= idle <= cores, (idle, cores)
    finally:
        looks.close()
    assert looks.since_last() is None   # closed: no reading


def test_usable_cores_counts_the_cpus_of_this_process():
    ids = cpu_ids()
    assert ids is None or ids == sorted(os.sched_getaffinity(0))
    assert usable_cores() == (len(ids) if ids else os.cpu_count() or 1)
