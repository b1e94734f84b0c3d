"""Ray 0.6's ``ray.global_state`` and 0.7's ``ray.state.state``: the job's state
under the names programs of those releases call it by.

Each method is the ``hpc_ray`` call of Ray 0.7 that replaced it (0.7 kept the
old names as deprecated forwards), so it returns what that call returns here:
``task_table()`` is ``tasks()``, ``client_table()`` is ``nodes()``,
``chrome_tracing_dump(filename)`` is ``timeline(filename)``, and so on.
"""
from __future__ import annotations

from . import api


class GlobalState:
    """The job's state tables (Ray 0.6's ``ray.global_state``)."""

    def task_table(self, task_id=None) -> dict:
        return api.tasks(task_id)

    def object_table(self, object_id=None) -> dict:
        return api.objects(object_id)

    def client_table(self) -> list[dict]:
        return api.nodes()

    def cluster_resources(self) -> dict:
        return api.cluster_resources()

    def available_resources(self) -> dict:
        return api.available_resources()

    def error_messages(self, job_id=None) -> list[dict]:
        """The job's errors (``job_id`` is ignored: a session is one job)."""
        return api.errors()

    def chrome_tracing_dump(self, filename: str | None = None):
        return api.timeline(filename)

    def chrome_tracing_object_transfer_dump(self, filename: str | None = None):
        return api.object_transfer_timeline(filename)


state = GlobalState()
