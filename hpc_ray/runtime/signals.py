"""The signal classes the runtime itself sends (``hpc_ray.experimental.signal`` is the API)."""
from __future__ import annotations


def source_of(key: tuple, task_of: dict) -> tuple:
    """Where a receiver's source ``key`` finds its signals: ("object", ref id) is
    the task that returns it (``task_of``), ("actor", id) the actor."""
    kind, ident = key
    return ("task", task_of.get(ident)) if kind == "object" else ("actor", ident)


class Signal:
    """Base class of user signals."""


class ErrorSignal(Signal):
    """Sent on behalf of a task or actor method that failed."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def get_error(self) -> BaseException:
        return self.error


class ActorDiedSignal(ErrorSignal):
    """From an actor whose process is gone, when a call to it fails for that (as
    Ray 0.7, a dead actor signals only when someone calls it): ``get_error()``
    is the call's ``ActorDiedError``."""
