"""The CPUs this process may run on: its affinity mask, read where the OS has one."""
from __future__ import annotations

import os


def cpu_ids() -> list[int] | None:
    """The CPUs this process may run on (its affinity mask), or None where that
    cannot be read."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cores() -> int:
    """How many CPUs this process may run on (its affinity mask where there is one)."""
    ids = cpu_ids()
    return len(ids) if ids else os.cpu_count() or 1
