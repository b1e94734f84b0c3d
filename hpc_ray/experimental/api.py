"""``ray.experimental.get``/``wait`` (refs in tuples, dicts and numpy arrays) and
``set_resource``."""
from __future__ import annotations

from typing import Any

from ..runtime.context import ObjectRef

__all__ = ["get", "set_resource", "wait"]


def get(object_ids: Any) -> Any:
    """Like ``hpc_ray.get``, for a ref or a list, tuple, numpy array or dict of them.

    A dict's values that are refs are replaced by their objects; other values
    are kept. A tuple comes back as a list, as in Ray 0.7.
    """
    from .. import api
    if isinstance(object_ids, ObjectRef):
        return api.get(object_ids)
    if isinstance(object_ids, dict):
        keys = [k for k, v in object_ids.items() if isinstance(v, ObjectRef)]
        values = api.get([object_ids[k] for k in keys])
        out = dict(object_ids)
        out.update(zip(keys, values))
        return out
    if _is_ndarray(object_ids):
        return api.get(list(object_ids.ravel()))
    return api.get(list(object_ids))


def wait(object_ids: Any, num_returns: int = 1, timeout: float | None = None,
         worker: Any = None) -> tuple[list, list]:
    """Like ``hpc_ray.wait``, for a list, tuple or numpy array of refs."""
    from .. import api
    if _is_ndarray(object_ids):
        object_ids = list(object_ids.ravel())
    return api.wait(list(object_ids), num_returns=num_returns, timeout=timeout)


def set_resource(resource_name: str, capacity: float, client_id: str | None = None) -> None:
    """Ray 0.7's dynamic resources. Not supported: a job's resources are fixed at
    ``init()``.

    Raises:
        NotImplementedError: always; give the resource to ``init(resources=...)``.
    """
    raise NotImplementedError(
        f"set_resource({resource_name!r}, {capacity!r}) is not supported: hpc_ray's "
        f"resources are fixed when the job starts; pass "
        f"init(resources={{{resource_name!r}: {capacity!r}}}) instead")


def _is_ndarray(value: Any) -> bool:
    return type(value).__name__ == "ndarray" and hasattr(value, "ravel")
