"""Values to records and back, through the node's store when they are large."""
from __future__ import annotations

import gc
import time
from typing import Any, Callable

from ..exceptions import ObjectStoreFullError, TaskError
from ..transport import wait
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
        # (Raised straight from the call: an exception held in a local of this
        # frame would be in a cycle with its traceback, keeping the refs of the
        # frames below alive until the garbage collector ran.)
        raise _raised_by_get(rec)
    raise ValueError(f"unknown value record kind {kind!r}")


def _raised_by_get(rec: tuple) -> BaseException:
    """The error ``rec`` stores, marked as one a get raises: printed where it
    was raised, a task that lets it go on does not print it again
    (``task_failures.error_record``)."""
    error = error_from_record(rec)
    error._from_get = True
    return error


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


#: How long an allocation in a full store waits for room while the store makes
#: none, before it raises ObjectStoreFullError. What fills it may be about to go:
#: a driver that takes results as they come and drops each (the docs' ``wait``
#: loop) frees room for the results still being made, room Ray 0.7 made by
#: evicting. A store that frees nothing fails its next allocations at once.
STORE_FULL_STALL = 2.0
#: The longest an allocation waits in all, however much the store frees.
STORE_FULL_WAIT = 60.0
#: The longest sleep between two tries (each asks the head).
STORE_FULL_POLL_CAP = 0.25
#: Per node, the store's freed count when this process last gave up waiting there.
_gave_up: dict = {}


class _Stalled(Exception):
    pass


def allocate(try_alloc: Callable[[], tuple], size: int, store_size: int,
             node: int) -> tuple[int, int]:
    """(node, offset) of a new store block of ``size`` bytes in ``node``'s store
    of ``store_size`` bytes (larger: ObjectStoreFullError at once). ``try_alloc()``
    returns (node, offset or None when the store is full, the store's capacity,
    the bytes it has freed so far). While the store is full and freeing, it is
    tried again after a garbage collection (unreachable refs may hold objects):
    until STORE_FULL_STALL seconds pass with nothing freed, or STORE_FULL_WAIT
    in all."""
    if size > store_size:
        raise store_full(size, store_size, node)
    got = try_alloc()
    node = got[0]
    if got[1] is not None:
        return node, got[1]
    if len(got) < 4 or _gave_up.get(node) == got[3]:
        raise store_full(size, got[2], node)
    progress = [got[3], time.monotonic()]

    def room() -> bool:
        nonlocal got
        gc.collect()
        got = try_alloc()
        if len(got) < 4:
            raise _Stalled      # (a failed request: no count to go by)
        if got[3] != progress[0]:
            progress[:] = [got[3], time.monotonic()]
        return got[1] is not None

    def freeing() -> None:
        if time.monotonic() - progress[1] > STORE_FULL_STALL:
            raise _Stalled
    try:
        wait.wait_until(room, timeout=STORE_FULL_WAIT, alive=freeing, spin=0,
                        cap=STORE_FULL_POLL_CAP, what="room in the object store")
    except (wait.WaitTimeout, _Stalled):
        _gave_up[node] = got[3]
        raise store_full(size, got[2], node) from None
    return node, got[1]


__all__ = ["to_record", "from_record", "error_record", "error_from_record", "store_full",
           "allocate",
           "deserialize_inline", "INLINE_MAX", "RAW", "INLINE", "SHM", "ERROR"]
