"""Large objects shared by every trial (Ray 0.7's ``ray.tune.util``).

    X_id = pin_in_object_store(np.random.random(size=10**8))    # on the driver

    def f(config, reporter):
        X = get_pinned_object(X_id)                                # in any trial

The id is a string, so it can go in a trial's config (which is logged as JSON).
"""
from __future__ import annotations

import os

from .. import api
from ..runtime.context import ObjectRef

__all__ = ["get_pinned_object", "pin_in_object_store"]

PINNED_OBJECT_PREFIX = "ray.tune.PinnedObject:"

#: The driver's refs of pinned objects: they stay in the store while it runs.
_pinned_objects: list = []


def pin_in_object_store(obj) -> str:
    """Put ``obj`` in the object store for the rest of the driver's life."""
    tag = os.urandom(6).hex()
    ref = api.put((tag, obj))
    _pinned_objects.append(ref)
    return f"{PINNED_OBJECT_PREFIX}{ref.hex()}-{tag}"


def get_pinned_object(pinned_id: str):
    """The object ``pin_in_object_store`` returned ``pinned_id`` for.

    Object ids are counted from 1 in every job, so an id kept from another job
    (a resumed experiment's config keeps the first job's) could name another
    object of this one: the tag after the id, stored with the object, tells."""
    if not isinstance(pinned_id, str) or not pinned_id.startswith(PINNED_OBJECT_PREFIX):
        raise ValueError(f"not an id from pin_in_object_store: {pinned_id!r}")
    hex_id, _, tag = pinned_id[len(PINNED_OBJECT_PREFIX):].partition("-")
    # A ref of this process's own (a hold at the head), dropped after the get.
    ref = ObjectRef(int(hex_id, 16), _owned=False)
    ready, _ = api.wait([ref], timeout=_LOOK_S)
    value = api.get(ref) if ready else None
    if not (isinstance(value, tuple) and len(value) == 2 and value[0] == tag):
        raise ValueError(
            f"{pinned_id!r} is not an object pinned in this job: a pinned object "
            f"lasts as long as the driver that pinned it. A resumed experiment keeps "
            f"its trials' configs from the first job, so pass the data some other way "
            f"(a file path in the config, or a global the trainable reads)")
    return value[1]


#: How long get_pinned_object waits for the object to be known (it was put
#: before the trial started, so at once, unless the id is from another job).
_LOOK_S = 5.0
