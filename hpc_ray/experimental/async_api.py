"""``ray.experimental.async_api``: refs as asyncio futures."""
from ..runtime.asyncio_compat import as_future

__all__ = ["as_future", "init", "shutdown"]


def init() -> None:
    """Nothing to set up: kept for programs written for Ray 0.7."""


def shutdown() -> None:
    """Nothing to tear down: kept for programs written for Ray 0.7."""
