"""The process's runtime context and ``ObjectRef``, with process-local ref counts.

Each process that runs user code has one context: the driver on rank 0
(``driver.DriverContext``), an executor (``executor.ExecutorContext``), or the
serial ``local_mode`` context. ``api.py`` calls whichever is current.

Reference counting: the head counts, per object, the *processes* holding at
least one ``ObjectRef`` for it (plus the pending tasks and the stored values
that contain it). Inside a process, ``_local`` counts ``ObjectRef`` instances;
the first instance made by unpickling sends HOLD, the last one to die sends
RELEASE. The HOLD is always sent while the thing it was unpickled from (a task's
arguments, a value being read) is still held, and on the same ordered channel
as that thing's RELEASE, so a count never touches zero in between.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Protocol, runtime_checkable

from ..transport.serialization import note_contained_ref, register_by_name
from . import interrupts

_ctx = None
_local: dict[int, int] = {}
#: Ids whose last local ref died. Appended from ``__del__`` (any thread, any
#: time, even with the head lock held), drained by the context at safe points.
released: collections.deque = collections.deque()
_id_lock = threading.Lock()
#: Guards ``_local``: threads of a task or actor make and drop refs at once.
#: ``__del__`` never waits for it (it may run inside the locked section, on a
#: garbage collection): when the lock is busy, the id waits in ``_dead`` and is
#: counted down by the next holder of the lock (``collect()``). A late
#: count-down only delays a RELEASE, never sends one early.
_refs_lock = threading.Lock()
_dead: collections.deque = collections.deque()
#: The next id's counter (below ``_prefix``), taken under ``_id_lock``.
_next = 1
_prefix = 0

#: Bits of an id below the creating process's prefix.
COUNTER_BITS = 40


def set_id_prefix(rank: int, serial: int) -> None:
    """Ids are ``(rank, executor serial, counter)``, so every process makes unique ids alone.

    The counter goes on from where it was: a driver that calls ``init()`` again
    (same rank and serial) makes no id of its first session again, so a ref or
    handle of that session dropped in the next cannot release or end a new
    object or actor."""
    global _prefix
    _prefix = ((rank << 20) | serial) << COUNTER_BITS


def new_ids(n: int) -> int:
    """Reserve ``n`` consecutive ids; returns the first."""
    global _next
    with _id_lock:
        first = _next
        _next = first + n
    return _prefix | first


@runtime_checkable
class Context(Protocol):
    """What ``api.py`` and the libraries above the runtime use of the current context.

    Four kinds implement it: ``driver.DriverContext`` (rank 0),
    ``executor.ExecutorContext`` (a worker's executor process),
    ``rank_actors.RankContext`` (actors living in their rank) and
    ``local.LocalContext`` (``local_mode``). ``ContextBase`` gives the defaults.
    """

    is_driver: bool           #: the user's script (rank 0, or local mode)
    in_rank: bool             #: code running inside a worker rank's own process (MPI there)
    rank: int
    actor_id: int | None      #: the actor this process serves, if any
    current_task_id: int | None
    current_task_name: str | None
    job_id: str | None
    gpu_ids: list
    resources: dict           #: what the current task or actor holds

    def submit(self, spec: list) -> bool | None: ...   # False: held, not sent yet
    def submit_call(self, spec: list, lifetime) -> None: ...
    def get(self, refs: list, timeout: float | None) -> list: ...
    def wait(self, ids: list, num_returns: int, timeout: float | None) -> set: ...
    def put(self, value: Any) -> "ObjectRef": ...
    def put_serialized(self, s) -> "ObjectRef": ...
    def control(self, name: str, *args) -> Any: ...
    def hold_refs(self, ids) -> None: ...
    def register_function(self, fn_id, fn) -> None: ...
    def record_profile(self, event: dict) -> None: ...


class ContextBase:
    """Defaults for the attributes of ``Context`` that a kind does not set itself."""

    is_driver = False
    in_rank = False
    rank = 0
    actor_id = None
    current_task_id = None
    current_task_name = None
    job_id = None
    gpu_ids: list = []
    resources: dict = {}

    def register_function(self, fn_id, fn) -> None:
        """Make ``fn`` callable by id here without unpickling (local mode only)."""

    def submit_call(self, spec: list, lifetime) -> None:
        """Submit an actor call; ``lifetime`` is the handle's lifetime ref (executors
        keep it while a call made straight to the actor is in flight)."""
        self.submit(spec)


def current() -> Context:
    if _ctx is None:
        from ..exceptions import RayError
        raise RayError("hpc_ray.init() has not been called in this process")
    return _ctx


def set_current(ctx) -> None:
    global _ctx
    _ctx = ctx


# --- worker output on the driver (Ray's log_to_driver) ---------------------------

#: Whether rank 0 prints what tasks and actors print; ``init(log_to_driver=)``.
log_to_driver = True


def print_worker_logs(rank: int, entries: list) -> None:
    """Rank 0: write the lines executors of ``rank`` printed, prefixed as in Ray.

    ``entries`` is ``[(pid, is_stderr, [line, ...]), ...]`` (whole lines, in the
    order printed); each entry is one ``write``, so lines never interleave.
    """
    if not log_to_driver:
        return
    import sys
    for pid, is_err, lines in entries:
        stream = sys.stderr if is_err else sys.stdout
        prefix = f"(pid={pid}, rank={rank}) "
        try:
            stream.write("".join(f"{prefix}{line}\n" for line in lines))
            stream.flush()
        except Exception:  # a closed, broken or missing stdout: the lines are lost
            pass


def is_set() -> bool:
    return _ctx is not None


def reset_local_refs() -> None:
    with _refs_lock:
        _local.clear()
        _dead.clear()
        released.clear()


def check_ref(ref) -> None:
    """Raise for a ref kept from a session that ``shutdown()`` ended: its object
    is gone, and a get or task would wait for it forever. (A live ref of this
    session is counted in ``_local``; ``shutdown`` empties it.)"""
    if ref.id not in _local:
        from ..exceptions import RayError
        raise RayError(f"{ref!r} is from an earlier session of this process (made "
                       f"before shutdown()); its object is gone with that session")


def check_refs(refs) -> None:
    """``check_ref`` of each of ``refs``."""
    for ref in refs:
        check_ref(ref)


def collect() -> None:
    """Count down the refs whose ``__del__`` found the lock busy."""
    if _dead:
        with _refs_lock:
            _count_down_dead()


def _count_down_dead() -> None:
    while _dead:
        _count_down(_dead.popleft())


def _count_down(oid: int) -> None:
    """One local ref to ``oid`` is gone (``_refs_lock`` held); the last one releases."""
    c = _local.get(oid, 0) - 1
    if c > 0:
        _local[oid] = c
    else:
        _local.pop(oid, None)
        released.append(oid)


class ObjectRef:
    """A reference to an object in the object store (Ray's ``ObjectRef``/``ObjectID``).

    Hashable and comparable by id. Passing it to a remote function passes the
    object's value (top-level arguments) or the reference itself (nested in a
    list or dict). ``await ref`` works in asyncio code.
    """

    __slots__ = ("id", "__weakref__")

    def __init__(self, object_id: int | bytes, _owned: bool = True) -> None:
        if type(object_id) is not int:
            object_id = _id_from_binary(object_id)
        self.id = object_id
        with _refs_lock:
            c = _local.get(object_id, 0)
            _local[object_id] = c + 1
            if _dead:
                _count_down_dead()
        if c == 0 and not _owned and _ctx is not None:
            _ctx.hold_refs((object_id,))

    def __del__(self) -> None:
        try:
            oid = self.id
            if not _refs_lock.acquire(False):
                _dead.append(oid)
                return
            try:
                _count_down(oid)
            finally:
                _refs_lock.release()
        except Exception:  # interpreter shutdown: module globals may be gone
            pass

    def __reduce__(self):
        note_contained_ref(self.id)
        return (_rebuild_ref, (self.id,))

    def hex(self) -> str:
        """``binary()`` in hex: 40 digits, as Ray 0.7's (``tasks()`` and ``objects()``
        name ids so too)."""
        return self.binary().hex()

    def binary(self) -> bytes:
        """20 bytes (Ray 0.7's size), or the 28 bytes the ref was made from."""
        oid = self.id
        if oid >> _MARK_28:
            return (oid ^ (1 << _MARK_28)).to_bytes(28, "big")
        return oid.to_bytes(20, "big")

    @classmethod
    def nil(cls) -> "ObjectRef":
        """The nil id (all bits set), as in Ray."""
        return cls(b"\xff" * 20)

    def is_nil(self) -> bool:
        return self.binary() == b"\xff" * len(self.binary())

    @classmethod
    def from_random(cls) -> "ObjectRef":
        """A random id no object has (a ``get`` of it waits forever, as in Ray)."""
        import os
        return cls(os.urandom(20))

    @classmethod
    def from_binary(cls, binary: bytes) -> "ObjectRef":
        return cls(binary)

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other: Any) -> bool:
        return type(other) is ObjectRef and other.id == self.id

    def __repr__(self) -> str:
        return f"ObjectRef({self.hex()})"

    def __await__(self):
        from . import asyncio_compat
        return asyncio_compat.as_future(self).__await__()

    def future(self):
        """A ``concurrent.futures.Future`` that completes with this object's value."""
        from . import asyncio_compat
        return asyncio_compat.concurrent_future(self)


#: Refs built from 28 bytes (modern Ray's size) carry this bit above the value, so
#: that ``binary()`` gives the 28 bytes back; the runtime's ids stay below 2**128.
_MARK_28 = 224


def _id_from_binary(binary) -> int:
    if not isinstance(binary, (bytes, bytearray)):
        raise TypeError(f"an ObjectRef is made from bytes, got {type(binary).__name__}")
    if len(binary) not in (20, 28):
        raise ValueError(f"an ObjectRef is made from 20 or 28 bytes (Ray 0.7 / modern "
                         f"ids), got {len(binary)}")
    value = int.from_bytes(binary, "big")
    return value | (1 << _MARK_28) if len(binary) == 28 else value


def _rebuild_ref(object_id: int) -> ObjectRef:
    return ObjectRef(object_id, _owned=False)


register_by_name(ObjectRef)


# The ref counts' lock is taken and given back in these: a Ctrl-C waits them out.
interrupts.protect(ObjectRef.__init__, ObjectRef.__del__, _count_down, _count_down_dead,
                   collect, reset_local_refs)
