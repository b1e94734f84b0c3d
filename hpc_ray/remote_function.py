"""``@remote`` functions: options, submission, and shipping to workers once."""
from __future__ import annotations

import os
from typing import Callable

from .runtime import context
from .runtime.taskspec import build_spec
from .transport import messages as m
from .transport.serialization import dumps

#: Options a remote function accepts (Ray 0.7 names and the modern ones).
FUNCTION_OPTIONS = ("num_returns", "num_return_vals", "num_cpus", "num_gpus", "resources",
                    "max_calls", "max_retries", "memory", "object_store_memory", "name",
                    "runtime_env", "scheduling_strategy")
#: Ray's default: a task whose process dies is retried 3 times (exceptions are not).
DEFAULT_MAX_RETRIES = 3


def _new_id() -> int:
    return int.from_bytes(os.urandom(8), "little")


def check_options(options: dict, valid: tuple, what: str) -> None:
    for key in options:
        if key not in valid:
            raise ValueError(f"unknown option {key!r} for {what} (valid: {sorted(valid)})")


def resources_from(options: dict, default_cpus: float, what: str) -> dict | None:
    """The resource request, or None for the default (1 CPU) on the hot path."""
    num_cpus = options.get("num_cpus")
    num_gpus = options.get("num_gpus")
    custom = options.get("resources") or {}
    if not isinstance(custom, dict):
        raise TypeError(f"resources must be a dict, got {type(custom).__name__}")
    for k, v in custom.items():
        if k in ("CPU", "GPU"):
            raise ValueError(f"use num_cpus/num_gpus instead of resources={{{k!r}: ...}}")
        if not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"resource {k!r} must be a number >= 0, got {v!r}")
    for name, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
        if v is not None and (not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"{name} must be a number >= 0, got {v!r}")
    if num_cpus is None and not num_gpus and not custom:
        return None if default_cpus == 1 else {"CPU": default_cpus}
    res = {"CPU": default_cpus if num_cpus is None else num_cpus}
    if num_gpus:
        res["GPU"] = num_gpus
    res.update(custom)
    return res


def num_returns_from(options: dict) -> int:
    n = options.get("num_returns", options.get("num_return_vals", 1))
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"num_returns must be an int >= 1, got {n!r}")
    return n


class RemoteFunction:
    """A function whose calls run as tasks: ``f.remote(*args)`` returns refs."""

    def __init__(self, function: Callable, options: dict, fn_id: int | None = None) -> None:
        check_options(options, FUNCTION_OPTIONS, f"remote function {function.__name__}")
        self._function = function
        self._options = options
        self._fn_id = fn_id if fn_id is not None else _new_id()
        self._name = getattr(function, "__qualname__", function.__name__)
        self._num_returns = num_returns_from(options)
        self._resources = resources_from(options, 1, self._name)
        retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
        if not isinstance(retries, int) or retries < -1:
            raise ValueError(f"max_retries must be an int >= -1, got {retries!r}")
        self._max_retries = 1 << 30 if retries == -1 else retries
        max_calls = options.get("max_calls", 0) or 0
        if not isinstance(max_calls, int) or max_calls < 0:
            raise ValueError(f"max_calls must be an int >= 0, got {max_calls!r}")
        self._max_calls = max_calls
        self._blob: bytes | None = None
        self._shipped_by: object = None
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__
        self.__wrapped__ = function

    def __call__(self, *args, **kwargs):
        raise TypeError(f"remote function {self._name} cannot be called directly; "
                        f"use {self.__name__}.remote(...)")

    def _blob_for(self, ctx) -> bytes | None:
        """The pickled function, sent with this process's first submission only."""
        if self._shipped_by is ctx:
            return None
        register = getattr(ctx, "register_function", None)
        if register is not None:
            register(self._fn_id, self._function)  # local mode calls it directly
        if self._blob is None:
            try:
                self._blob = dumps(self._function)
            except Exception as exc:
                raise TypeError(f"could not serialize remote function {self._name}: "
                                f"{type(exc).__name__}: {exc}") from exc
        self._shipped_by = ctx
        return self._blob

    def remote(self, *args, **kwargs):
        ctx = context.current()
        keep: list = []
        spec = build_spec(self._fn_id, self._blob_for(ctx), self._name, args, kwargs,
                          self._num_returns, self._resources, self._max_retries,
                          self._max_calls, None, 0, ctx.put_serialized, keep)
        ctx.submit(spec)
        refs = [context.ObjectRef(oid) for oid in spec[m.T_RETURNS]]
        return refs[0] if self._num_returns == 1 else refs

    def options(self, **options) -> "RemoteFunction":
        """A copy with some options replaced (``f.options(num_cpus=2).remote()``)."""
        merged = dict(self._options)
        merged.update(options)
        merged.pop("name", None)
        return RemoteFunction(self._function, merged, self._fn_id)

    def __reduce__(self):
        return (_rebuild, (self._function, self._options, self._fn_id))

    def __repr__(self) -> str:
        return f"<hpc_ray remote function {self._name}>"


def _rebuild(function, options, fn_id) -> RemoteFunction:
    return RemoteFunction(function, options, fn_id)
