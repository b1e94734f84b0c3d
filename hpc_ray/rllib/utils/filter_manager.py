"""``FilterManager``: one synchronization of observation filters (Ray 0.7).

::

    driver ── get_filters.remote(flush_after=True) ──▶ each remote worker
           ◀── {policy id: filter} (what each saw since its last sync) ──
    local filters += every remote buffer (``apply_changes``)
    driver ── put(local filters), sync_filters.remote(ref) ──▶ each remote worker

``WorkerSet.sync_filters`` (what a trainer runs each iteration) is this call.
"""
from __future__ import annotations

from ... import api

__all__ = ["FilterManager"]


class FilterManager:
    """Manages filters and coordination across remote evaluators that expose
    ``get_filters`` and ``sync_filters``."""

    @staticmethod
    def synchronize(local_filters: dict, remotes: list, update_remote: bool = True) -> None:
        """Aggregates all filters from remote evaluators.

        The local copy is updated, then broadcast to all remote evaluators.

        Args:
            local_filters: policy id -> filter; changed in place.
            remotes: remote evaluators (``RolloutWorker`` actors) with filters.
            update_remote: whether to push the merged filters to the remotes.
        """
        if not remotes:
            return
        remote_filters = api.get([r.get_filters.remote(flush_after=True) for r in remotes])
        for filters in remote_filters:
            for pid, f in local_filters.items():
                f.apply_changes(filters[pid], with_buffer=False)
        if update_remote:
            merged = api.put({pid: f.as_serializable() for pid, f in local_filters.items()})
            # 0.7 did not wait here; waiting means a sample() sent next uses them.
            api.get([r.sync_filters.remote(merged) for r in remotes])
