"""Ray 0.7's ``register_custom_serializer``: a class's instances pickled with the
user's functions (or their ``__dict__``), through ``copyreg``, in every process."""
from __future__ import annotations

import copyreg


class _Reducer:
    """``copyreg`` reducer of a class registered with ``register_custom_serializer``."""

    def __init__(self, cls: type, serializer, deserializer, use_dict: bool) -> None:
        self.cls = cls
        self.serializer = serializer
        self.deserializer = deserializer
        self.use_dict = use_dict

    def __call__(self, obj):
        if self.use_dict:
            return (_from_dict, (self.cls, dict(obj.__dict__)))
        return (self.deserializer, (self.serializer(obj),))


def _from_dict(cls: type, state: dict):
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


class _RegisterSerializer:
    """Run on every worker: install (or, with use_pickle, remove) the reducer."""

    def __init__(self, cls: type, reducer: _Reducer | None) -> None:
        self.cls = cls
        self.reducer = reducer

    def __call__(self, worker_info=None) -> None:
        if self.reducer is None:
            copyreg.dispatch_table.pop(self.cls, None)
        else:
            copyreg.pickle(self.cls, self.reducer)


def register_custom_serializer(cls: type, use_pickle: bool = False, use_dict: bool = False,
                               serializer=None, deserializer=None, local: bool = False,
                               job_id=None, class_id=None) -> None:
    """Serialize instances of ``cls`` with ``serializer``/``deserializer`` everywhere.

    ``serializer(obj)`` returns a picklable value, ``deserializer(value)`` the
    object. ``use_pickle=True`` keeps plain pickling; ``use_dict=True`` ships
    ``obj.__dict__``. Registered here and, unless ``local``, on every worker
    process; before ``init()`` it is kept and registered at start-up.

    Raises:
        TypeError: ``cls`` is not a class.
        ValueError: the options contradict each other (as in Ray 0.7).
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_custom_serializer() takes a class, got {cls!r:.80}")
    custom = serializer is not None or deserializer is not None
    if use_pickle and (use_dict or custom):
        raise ValueError("use_pickle=True excludes use_dict and serializer/deserializer")
    if use_dict and custom:
        raise ValueError("use_dict=True excludes serializer/deserializer")
    if custom and (serializer is None or deserializer is None):
        raise ValueError("give both serializer and deserializer")
    if not (use_pickle or use_dict or custom):
        raise ValueError("give serializer= and deserializer=, or use_pickle=True, "
                         "or use_dict=True")
    register = _RegisterSerializer(
        cls, None if use_pickle else _Reducer(cls, serializer, deserializer, use_dict))
    register()
    if not local:
        from .api import run_function_on_all_workers
        run_function_on_all_workers(register)
