"""Values to records and back, through the node's store when they are large."""
from __future__ import annotations

from typing import Any, Callable

from ..exceptions import ObjectStoreFullError, TaskError
from ..transport.serialization import (ERROR, INLINE, INLINE_MAX, RAW, SHM,
                                       deserialize_inline, dumps, is_raw, loads,
                                       serialize)


def to_record(value: Any, alloc: Callable[[int], tuple[int, int]] | None, arena,
              what: str = "value", inline: bool = False) -> tuple[tuple, list[int]]:
    """Serialize ``value``; ``alloc(size) -> (node, offset)`` places large ones, or
    with ``inline`` every value stays in the record, however large (a direct
    call's result: a store block would need the head's books)."""
    if is_raw(value):
        return (RAW, value), []
    try:
        s = serialize(value)
    except Exception as exc:
        raise TypeError(f"could not serialize the {what} ({type(value).__name__}): "
                        f"{type(exc).__name__}: {exc}") from exc
    if inline or s.size <= INLINE_MAX:
        return s.inline_record(), s.contained
    return serialized_to_record(s, alloc, arena), s.contained


def serialized_to_record(s, alloc: Callable[[int], tuple[int, int]], arena) -> tuple:
    """Place an already pickled value in the store."""
    size, spans = s.layout()
    node, offset = alloc(size)
    s.write_into(arena.writable(offset, size), spans)
    return (SHM, node, offset, size, len(s.data), spans)


def from_record(rec: tuple, arena, pin: object) -> Any:
    """The value a record describes; raises the stored error for ERROR records.

    Values read from the store are zero-copy, read-only views that keep ``pin``
    (the caller's ``ObjectRef``) alive as long as they exist.
    """
    kind = rec[0]
    if kind == RAW:
        return rec[1]
    if kind == INLINE:
        return loads(rec[1], buffers=rec[2])
    if kind == SHM:
        view = arena.pinned_view(rec[2], rec[3], pin)
        data_len = rec[4]
        return loads(view[:data_len], buffers=[view[o: o + n] for o, n in rec[5]])
    if kind == ERROR:
        raise error_from_record(rec)
    raise ValueError(f"unknown value record kind {kind!r}")


def error_from_record(rec: tuple) -> BaseException:
    err = loads(rec[1])
    if isinstance(err, TaskError):
        return err.as_instanceof_cause()
    return err


def error_record(exc: BaseException) -> tuple:
    try:
        data = dumps(exc)
        loads(data)  # some exceptions pickle but cannot be rebuilt (keyword-only __init__)
        return (ERROR, data)
    except Exception:
        if isinstance(exc, TaskError):
            exc = TaskError(exc.function_name, exc.traceback_str, exc.rank, exc.host, None)
            return (ERROR, dumps(exc))
        return (ERROR, dumps(TaskError("", f"{type(exc).__name__}: {exc}", -1, "", None)))


def store_full(size: int, capacity: int, node: int) -> ObjectStoreFullError:
    return ObjectStoreFullError(
        f"no room for an object of {size} bytes in node {node}'s object store "
        f"({capacity} bytes in all); drop references you no longer need, or pass a "
        f"larger object_store_memory to init()")


__all__ = ["to_record", "from_record", "error_record", "error_from_record", "store_full",
           "deserialize_inline", "INLINE_MAX", "RAW", "INLINE", "SHM", "ERROR"]
