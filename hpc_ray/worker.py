"""``ray.worker.global_worker``: the old module path some Ray programs use."""
from __future__ import annotations

#: Ray 0.7's values of ``global_worker.mode`` (also ``ray.SCRIPT_MODE``, ...).
SCRIPT_MODE = 0
WORKER_MODE = 1
LOCAL_MODE = 2


class _GlobalWorker:
    def run_function_on_all_workers(self, function, run_on_other_drivers: bool = False):
        from .api import run_function_on_all_workers
        run_function_on_all_workers(function)

    @property
    def mode(self):
        """``SCRIPT_MODE`` in the driver, ``WORKER_MODE`` in tasks and actors,
        ``LOCAL_MODE`` under ``init(local_mode=True)``; None before ``init()``."""
        from .runtime import context
        from .runtime.local import LocalContext
        if not context.is_set():
            return None
        current = context.current()
        if isinstance(current, LocalContext):
            return LOCAL_MODE
        return SCRIPT_MODE if current.is_driver else WORKER_MODE


global_worker = _GlobalWorker()
