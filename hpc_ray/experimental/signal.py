"""Signals between tasks, actors and the driver (Ray 0.7's experimental API).

A source is a task (named by any ref it returns) or an actor (its handle).
``send`` appends a signal to the caller's source on the head; ``receive``
returns, per source, the signals the calling entity (this task, this actor, or
the driver) has not seen yet: tasks that run one after another in the same
executor each read a source from its first signal. A task that fails and an
actor method that raises add an ``ErrorSignal`` to their source; a call that
fails because its actor's process is gone adds an ``ActorDiedSignal`` (an
``ErrorSignal``) to the actor's.
"""
from __future__ import annotations

import collections
import time

from ..actors import ActorHandle
from ..runtime import context
from ..runtime.context import ObjectRef
from ..runtime.signals import ActorDiedSignal, ErrorSignal, Signal
from ..transport.serialization import dumps, loads

__all__ = ["Signal", "ErrorSignal", "ActorDiedSignal", "send", "receive", "forget", "reset"]

#: How often receive() asks the head again while waiting (seconds).
POLL_INTERVAL = 0.01

#: Entities whose cursors are kept, at most (the least recently receiving go first).
ENTITIES_KEPT = 1024

#: Per receiving entity, per source key: how many of its signals were received.
_cursors: collections.OrderedDict = collections.OrderedDict()


def _entity_cursors(ctx) -> dict:
    """The cursors of the entity calling: its actor, else its task (None: the driver)."""
    actor_id = getattr(ctx, "actor_id", None)
    entity = ("actor", actor_id) if actor_id is not None else \
        ("task", getattr(ctx, "current_task_id", None))
    cursors = _cursors.get(entity)
    if cursors is None:
        cursors = _cursors[entity] = {}
        if len(_cursors) > ENTITIES_KEPT:
            _cursors.popitem(last=False)
    else:
        _cursors.move_to_end(entity)
    return cursors


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
    cursors = _entity_cursors(ctx)
    while True:
        got = ctx.control("signal_poll", [(k, cursors.get(k, 0)) for k in keys])
        out = []
        for (key, blobs, after), source in zip(got, sources):
            cursors[key] = after
            out.extend((source, loads(b)) for b in blobs)
        if out or (deadline is not None and time.monotonic() >= deadline):
            return out
        time.sleep(POLL_INTERVAL)


def forget(sources: list) -> None:
    """Skip the signals ``sources`` sent so far: the next ``receive`` returns only newer ones."""
    keys = [_source_key(s) for s in sources]
    ctx = context.current()
    cursors = _entity_cursors(ctx)
    got = ctx.control("signal_poll", [(k, cursors.get(k, 0)) for k in keys])
    for key, _blobs, after in got:
        cursors[key] = after


def reset() -> None:
    """Forget what was received here (every entity of this process): the next
    receive() starts from each source's first signal."""
    _cursors.clear()
