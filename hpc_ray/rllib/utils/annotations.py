"""Ray 0.7's API annotations: ``@PublicAPI``, ``@DeveloperAPI``, ``@override``.

They document; they change nothing (``override`` checks that the base class
has the method, as 0.7's does).
"""
from __future__ import annotations

from typing import Callable, TypeVar

__all__ = ["PublicAPI", "DeveloperAPI", "override"]

T = TypeVar("T")


def PublicAPI(obj: T) -> T:  # noqa: N802 - Ray's name
    """Marks a class or method as part of RLlib's public API (stable across releases)."""
    return obj


def DeveloperAPI(obj: T) -> T:  # noqa: N802 - Ray's name
    """Marks a class or method as part of RLlib's developer API (for custom algorithms)."""
    return obj


def override(cls: type) -> Callable[[T], T]:
    """``@override(Base)``: the method overrides one of ``Base``'s.

    Raises:
        NameError: ``Base`` has no method of that name.
    """
    def check_override(method: T) -> T:
        name = getattr(method, "__name__", None)
        if name not in dir(cls):
            raise NameError(f"{name!r} does not override any method of {cls.__name__}")
        return method
    return check_override
