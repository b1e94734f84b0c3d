"""``ray.experimental.get``/``wait`` (refs in tuples, dicts and numpy arrays) and
``set_resource``."""
from __future__ import annotations

import math
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
    """Create, change or delete a custom resource of a node, as Ray 0.7 does.

    Tasks and actors waiting for the resource start once it has room, including
    those that asked for it before any node had it. Setting a capacity below
    what running tasks and actors hold takes nothing from them: the resource
    shrinks as they give it back. ``cluster_resources()``,
    ``available_resources()`` and ``nodes()`` show the change at once.

    Args:
        resource_name: the custom resource's name (not ``"CPU"`` or ``"GPU"``:
            those are the worker ranks' own, fixed when they start).
        capacity: a non-negative whole number; 0 deletes the resource.
        client_id: the node, as the ``"NodeID"`` (or ``"ClientID"``) of
            ``hpc_ray.nodes()``; None: the node the caller runs on (for the
            driver, the driver's node).

    Raises:
        ValueError: a negative or fractional capacity, ``"CPU"``/``"GPU"``, or an
            unknown ``client_id``.
        TypeError: ``resource_name`` is not a str.
    """
    from .. import api
    if not isinstance(resource_name, str):
        raise TypeError(f"resource_name must be a str, got {type(resource_name).__name__}")
    if resource_name in ("CPU", "GPU"):
        raise ValueError(f"set_resource() changes custom resources, not {resource_name!r}: "
                         f"a rank's CPUs and GPUs are fixed when it starts (init(num_cpus=, "
                         f"num_gpus=), SLURM_CPUS_PER_TASK)")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, float)) or \
            not math.isfinite(capacity) or capacity < 0 or capacity != int(capacity):
        raise ValueError(f"Capacity {capacity!r} must be a non-negative integer.")
    ctx = api._state_context()
    ctx.control("set_resource", resource_name, int(capacity), client_id, ctx.rank)


def _is_ndarray(value: Any) -> bool:
    return type(value).__name__ == "ndarray" and hasattr(value, "ravel")
