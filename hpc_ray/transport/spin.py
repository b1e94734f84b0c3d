"""The busy-poll before blocking on sockets: now ``wait.Spinner``, under the one
waiting policy (``transport/wait.py``). These names stay importable from here
for the call sites not yet converted (``driver.py``, ``driver_calls.py``,
``executor.py``)."""
from __future__ import annotations

from .wait import (KEEP, LOOK_EVERY, PROBE_EVERY, SPIN_BUDGET, Spinner, crowded,
                   ready_threads)

#: Longest busy-poll before blocking, seconds (``HPC_RAY_SPIN_US``): ``wait.SPIN_BUDGET``.
BUDGET = SPIN_BUDGET

__all__ = ["BUDGET", "KEEP", "LOOK_EVERY", "PROBE_EVERY", "Spinner", "crowded",
           "ready_threads"]
