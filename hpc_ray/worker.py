"""``ray.worker.global_worker``: the old module path some Ray programs use."""
from __future__ import annotations


class _GlobalWorker:
    def run_function_on_all_workers(self, function, run_on_other_drivers: bool = False):
        from .api import run_function_on_all_workers
        run_function_on_all_workers(function)

    @property
    def mode(self):
        from .runtime import context
        if not context.is_set():
            return None
        return "driver" if context.current().is_driver else "worker"


global_worker = _GlobalWorker()
