"""Building a TaskSpec from a call, and turning one back into arguments."""
from __future__ import annotations

from typing import Any, Callable

from ..transport.serialization import RAW, deserialize_inline, is_raw, serialize
from .context import ObjectRef, new_ids


def build_spec(fn_id, blob: bytes | None, name: str, args: tuple, kwargs: dict,
               num_returns: int, resources: dict | None, max_retries: int,
               max_calls: int, actor_id: int | None, owner: int) -> list:
    deps: list = []
    contained = None
    if not kwargs and all(is_raw(a) for a in args):
        payload = (RAW, args)
    else:
        # Top-level refs are resolved to values by the executor; they travel as
        # positions, not pickled, so no HOLD/RELEASE round trip is needed for them.
        args = list(args)
        for i, a in enumerate(args):
            if type(a) is ObjectRef:
                deps.append((i, a.id))
                args[i] = None
        if kwargs:
            kwargs = dict(kwargs)
            for k, v in kwargs.items():
                if type(v) is ObjectRef:
                    deps.append((k, v.id))
                    kwargs[k] = None
        try:
            s = serialize((args, kwargs))
        except Exception as exc:
            raise TypeError(f"could not serialize the arguments of {name}: "
                            f"{type(exc).__name__}: {exc}") from exc
        payload = s.inline_record()
        contained = s.contained or None
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
    else:
        args, kwargs = deserialize_inline(payload)
    for pos, oid, rec in deps:
        value = read(oid, rec)
        if type(pos) is int:
            args[pos] = value
        else:
            kwargs[pos] = value
    return args, kwargs
