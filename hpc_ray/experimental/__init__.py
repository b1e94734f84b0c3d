"""Ray 0.7's experimental APIs: ``signal`` and ``async_api``."""
from . import async_api, signal

__all__ = ["async_api", "signal"]
