"""Signals between tasks, actors and the driver (Ray 0.7's experimental API).

A source is a task (named by any ref it returns) or an actor (its handle).
``send`` appends a signal to the caller's source on the head; ``receive``
returns, per source, the signals this process has not seen yet. A task that
fails and an actor method that raises add an ``ErrorSignal`` to their source.
"""
from __future__ import annotations

import time

from ..actors import ActorHandle
from ..runtime import context
from ..runtime.context import ObjectRef
from ..runtime.signals import ErrorSignal, Signal
from ..transport.serialization import dumps, loads

__all__ = ["Signal", "ErrorSignal", "send", "receive", "forget", "reset"]

#: How often receive() asks the head again while waiting (seconds).
POLL_INTERVAL = 0.01

_cursors: dict = {}


def _source_key(source):
    if isinstance(source, ActorHandle):
        return ("actor", source._actor_id)
    if isinstance(source, ObjectRef):
        return ("object", source.id)
    raise TypeError(f"a signal source is an ObjectRef or an actor handle, got "
                    f"{type(source).__name__}")


def send(signal: Signal) -> None:
    """Send ``signal`` from the current task or actor."""
    if not isinstance(signal, Signal):
        raise TypeError(f"send() takes a Signal, got {type(signal).__name__}")
    ctx = context.current()
    ctx.control("signal_send", ctx.actor_id, ctx.current_task_id, dumps(signal))


def receive(sources: list, timeout: float | None = None) -> list:
    """All signals from ``sources`` not yet received here: ``[(source, signal), ...]``."""
    keys = [_source_key(s) for s in sources]
    deadline = None if timeout is None else time.monotonic() + timeout
    ctx = context.current()
    while True:
        got = ctx.control("signal_poll", [(k, _cursors.get(k, 0)) for k in keys])
        out = []
        for (key, blobs), source in zip(got, sources):
            _cursors[key] = _cursors.get(key, 0) + len(blobs)
            out.extend((source, loads(b)) for b in blobs)
        if out or (deadline is not None and time.monotonic() >= deadline):
            return out
        time.sleep(POLL_INTERVAL)


def forget(sources: list) -> None:
    """Skip the signals ``sources`` sent so far: the next ``receive`` returns only newer ones."""
    keys = [_source_key(s) for s in sources]
    got = context.current().control("signal_poll", [(k, _cursors.get(k, 0)) for k in keys])
    for key, blobs in got:
        _cursors[key] = _cursors.get(key, 0) + len(blobs)


def reset() -> None:
    """Forget what was received: the next receive() starts from each source's first signal."""
    _cursors.clear()
