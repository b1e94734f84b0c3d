"""Large objects shared by every trial (Ray 0.7's ``ray.tune.util``).

    X_id = pin_in_object_store(np.random.random(size=10**8))    # on the driver

    def f(config, reporter):
        X = get_pinned_object(X_id)                                # in any trial

The id is a string, so it can go in a trial's config (which is logged as JSON).
"""
from __future__ import annotations

from .. import api
from ..runtime.context import ObjectRef

__all__ = ["get_pinned_object", "pin_in_object_store"]

PINNED_OBJECT_PREFIX = "ray.tune.PinnedObject:"

#: The driver's refs of pinned objects: they stay in the store while it runs.
_pinned_objects: list = []


def pin_in_object_store(obj) -> str:
    """Put ``obj`` in the object store for the rest of the driver's life."""
    ref = api.put(obj)
    _pinned_objects.append(ref)
    return PINNED_OBJECT_PREFIX + ref.hex()


def get_pinned_object(pinned_id: str):
    """The object ``pin_in_object_store`` returned ``pinned_id`` for."""
    if not isinstance(pinned_id, str) or not pinned_id.startswith(PINNED_OBJECT_PREFIX):
        raise ValueError(f"not an id from pin_in_object_store: {pinned_id!r}")
    oid = int(pinned_id[len(PINNED_OBJECT_PREFIX):], 16)
    # A ref of this process's own (a hold at the head), dropped after the get.
    return api.get(ObjectRef(oid, _owned=False))
