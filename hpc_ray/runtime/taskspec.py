"""Building a TaskSpec from a call, and turning one back into arguments."""
from __future__ import annotations

from typing import Any, Callable

from ..transport.serialization import INLINE_MAX, RAW, deserialize_inline, is_raw, serialize
from .context import ObjectRef, check_ref, new_ids

#: Payload kind of arguments too large for a control message: they were put in
#: the object store and travel as the dependency at position ARGS_KEY.
ARGS_IN_STORE = -1
ARGS_KEY = "__hpc_ray_args__"


def build_spec(fn_id, blob: bytes | None, name: str, args: tuple, kwargs: dict,
               num_returns: int, resources: dict | None, max_retries: int,
               max_calls: int, actor_id: int | None, owner: int,
               put_serialized: Callable | None = None, keep: list | None = None) -> list:
    """The TaskSpec of a call.

    ``put_serialized(s) -> ObjectRef`` stores large arguments; the ref is appended
    to ``keep``, which the caller holds until the spec was submitted.
    """
    deps: list = []
    contained = None
    if not kwargs and (not args or all(is_raw(a) for a in args)):
        payload = (RAW, args)
    else:
        # Top-level refs are resolved to values by the executor; they travel as
        # positions, not pickled, so no HOLD/RELEASE round trip is needed for them.
        args = list(args)
        for i, a in enumerate(args):
            if type(a) is ObjectRef:
                check_ref(a)
                deps.append((i, a.id))
                args[i] = None
        if kwargs:
            kwargs = dict(kwargs)
            for k, v in kwargs.items():
                if type(v) is ObjectRef:
                    check_ref(v)
                    deps.append((k, v.id))
                    kwargs[k] = None
        try:
            s = serialize((args, kwargs))
        except Exception as exc:
            raise TypeError(f"could not serialize the arguments of {name}: "
                            f"{type(exc).__name__}: {exc}") from exc
        contained = s.contained or None
        if s.size > INLINE_MAX and put_serialized is not None and keep is not None:
            # Like Ray: large arguments go through the store, not the control channel.
            args_ref = put_serialized(s)
            keep.append(args_ref)
            payload = (ARGS_IN_STORE, None)
            deps.append((ARGS_KEY, args_ref.id))
            contained = None  # held by the stored arguments object instead
        else:
            payload = s.inline_record()
    first = new_ids(num_returns + 1)
    return [first, fn_id, blob, name, payload, deps,
            list(range(first + 1, first + 1 + num_returns)), resources, max_retries,
            max_calls, actor_id, owner, contained]


def load_args(payload: tuple, deps: list, read: Callable[[int, tuple], Any]):
    """The call's ``(args, kwargs)``; ``read(oid, record)`` gives dependency values."""
    if payload[0] == RAW:
        if not deps:
            return payload[1], {}
        args, kwargs = list(payload[1]), {}
    elif payload[0] == ARGS_IN_STORE:
        _, oid, rec = next(d for d in deps if d[0] == ARGS_KEY)
        args, kwargs = read(oid, rec)
        args = list(args)
        deps = [d for d in deps if d[0] != ARGS_KEY]
    else:
        args, kwargs = deserialize_inline(payload)
    for pos, oid, rec in deps:
        value = read(oid, rec)
        if type(pos) is int:
            args[pos] = value
        else:
            kwargs[pos] = value
    return args, kwargs


def method_meta(cls: type) -> dict[str, tuple[int, int | None]]:
    """An actor class's methods and their ``(num_returns, max_retries)``, as handles
    carry them (``@method`` sets both; retries None: the actor's)."""
    import inspect
    meta = {}
    for name, member in inspect.getmembers(cls):
        if callable(member) and (not name.startswith("__") or name == "__call__"):
            meta[name] = (getattr(member, "__hpc_ray_num_returns__", 1),
                          getattr(member, "__hpc_ray_max_retries__", None))
    return meta
