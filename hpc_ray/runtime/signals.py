"""The signal classes the runtime itself sends (``hpc_ray.experimental.signal`` is the API)."""
from __future__ import annotations


class Signal:
    """Base class of user signals."""


class ErrorSignal(Signal):
    """Sent on behalf of a task or actor method that failed."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def get_error(self) -> BaseException:
        return self.error
