"""Reusable variables: per-worker state rebuilt between the tasks that use it.

    ray.reusables.env = ray.Reusable(make_env, reset_env)

Assigning on the driver ships the ``Reusable`` to every worker process (and
keeps it on the driver). Each process builds the value once, on first use. After
every task that read it, the reinitializer runs on the value (by default the
initializer runs again), so no task sees another task's mutations: nor does a
task run nested in another's wait, in its process (``nested_begin``).
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

_registry: dict[str, "Reusable"] = {}
_values: dict[str, Any] = {}
_used: set[str] = set()


class Reusable:
    """A per-worker variable: ``Reusable(initializer, reinitializer=None)``."""

    def __init__(self, initializer: Callable[[], Any],
                 reinitializer: Callable[[Any], Any] | None = None) -> None:
        if not callable(initializer):
            raise TypeError("initializer must be callable")
        if reinitializer is not None and not callable(reinitializer):
            raise TypeError("reinitializer must be callable or None")
        self.initializer = initializer
        self.reinitializer = reinitializer


def _register(name: str, reusable: Reusable) -> None:
    _registry[name] = reusable
    _values.pop(name, None)
    _used.discard(name)


class _Reusables:
    """The ``ray.reusables`` namespace."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not isinstance(value, Reusable):
            raise TypeError(f"reusables.{name} must be set to a Reusable, got "
                            f"{type(value).__name__}")
        _register(name, value)
        from .api import run_function_on_all_workers
        from .runtime import context
        if not context.is_set():
            # Before init(): shipped to the workers when init() starts the job.
            run_function_on_all_workers(_Registrar(name, value))
        elif context.current().is_driver:
            # As the seed describes: built at once on every worker and on the driver.
            run_function_on_all_workers(_Registrar(name, value))
            _values[name] = value.initializer()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in _registry:
            raise AttributeError(f"no reusable variable named {name!r} (defined: "
                                 f"{sorted(_registry)})")
        if name not in _values:
            _values[name] = _registry[name].initializer()
        _used.add(name)
        return _values[name]

    def __contains__(self, name: str) -> bool:
        return name in _registry


class _Registrar:
    """Run on each worker: defines the variable there."""

    def __init__(self, name: str, reusable: Reusable) -> None:
        self.name = name
        self.reusable = reusable

    def __call__(self, worker_info: dict) -> None:
        if worker_info.get("worker_rank", 0) != 0:
            _register(self.name, self.reusable)
            _values[self.name] = self.reusable.initializer()


def after_task() -> None:
    """Reinitialize the variables the finished task used. A reinitializer that
    raises is reported on stderr and its variable built afresh at its next use:
    the task itself has ended, and its result stands."""
    if not _used:
        return
    for name in list(_used):
        r = _registry.get(name)
        if r is None or name not in _values:
            continue
        try:
            if r.reinitializer is None:
                _values[name] = r.initializer()
            else:
                _values[name] = r.reinitializer(_values[name])
        except Exception:  # noqa: BLE001 - user code
            del _values[name]
            sys.stderr.write(f"hpc_ray: reinitializing reusables.{name} after a task failed; "
                             f"it is built afresh at its next use:\n{traceback.format_exc()}")
    _used.clear()


def nested_begin() -> Any:
    """Before a task runs nested in another's wait, in the same process: the
    waiting task's values are set aside, so the nested one builds its own."""
    if not _used:
        return None   # (the waiting task holds none: the values are clean)
    aside = {name: _values.pop(name) for name in _used if name in _values}
    used = set(_used)
    _used.clear()
    return aside, used


def nested_end(token: Any) -> None:
    """After the nested task (and its ``after_task``): the waiting task's values back."""
    if token is None:
        return
    aside, used = token
    _values.update(aside)
    _used.clear()
    _used.update(used)


def reset() -> None:
    _registry.clear()
    _values.clear()
    _used.clear()


reusables = _Reusables()


def _install() -> None:
    from .runtime import hooks
    hooks.after_task = after_task
    hooks.nested_begin = nested_begin
    hooks.nested_end = nested_end


_install()
