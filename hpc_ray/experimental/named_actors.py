"""``ray.experimental.named_actors``: give an existing actor a name, look it up anywhere."""
from __future__ import annotations

from ..actors import ActorHandle
from ..actors import get_actor as _get_actor
from ..runtime import context

__all__ = ["get_actor", "register_actor"]


def register_actor(name: str, actor_handle: ActorHandle) -> None:
    """Name ``actor_handle`` so that ``get_actor(name)`` finds it from any task.

    Raises:
        TypeError: ``name`` is not a str or ``actor_handle`` not an actor handle.
        ValueError: an actor of that name exists already.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not isinstance(actor_handle, ActorHandle):
        raise TypeError(f"register_actor() takes an actor handle, got "
                        f"{type(actor_handle).__name__}")
    context.current().control("register_actor", name, actor_handle._actor_id)


def get_actor(name: str) -> ActorHandle:
    """The actor registered (or created with ``options(name=...)``) as ``name``.

    Raises:
        ValueError: no actor has that name.
    """
    return _get_actor(name)
