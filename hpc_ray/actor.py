"""``ray.actor``: actor classes, handles, and actor checkpoints (Ray 0.7).

A ``Checkpointable`` actor decides after each call (one that raised included)
whether to save a checkpoint (``should_checkpoint``); it saves it itself (``save_checkpoint``, to a file or
wherever it likes), and hpc_ray records the checkpoint's id on the head. When
the actor is restarted after its process died (``max_reconstructions`` /
``max_restarts``), its ``__init__`` runs again and then ``load_checkpoint`` gets
the recorded checkpoints, newest first. Ids beyond the newest
``CHECKPOINTS_TO_KEEP`` are given to ``checkpoint_expired``.

    executor (actor)                         head (control calls)
    call ─▶ should_checkpoint? ─▶ save_checkpoint ─▶ "actor_checkpoint_saved" ─▶ ids kept
    restart: __init__ ─▶ "actor_checkpoints" ◀─ ids ─▶ load_checkpoint

Unlike Ray 0.7, the calls made after the checkpoint are not replayed: calls
lost with the process are retried (``max_task_retries``) or raise
``RayActorError``, finished ones are not run again. The hooks may run tasks and
call other actors; one that raises is reported (``errors()``), as in Ray 0.7.
"""
from __future__ import annotations

import abc
import os
import sys
import time
import traceback
from typing import Any, NamedTuple

from .actors import ActorClass, ActorHandle, ActorMethod, method  # noqa: F401
from .runtime import context

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "ActorID", "ActorCheckpointID",
           "Checkpoint", "CheckpointContext", "Checkpointable", "exit_actor", "method"]

#: Checkpoint ids kept per actor (Ray 0.7's ``num_actor_checkpoints_to_keep``).
CHECKPOINTS_TO_KEEP = 20


class _BinaryID:
    """An id with Ray's ``binary()``/``hex()``, hashable and comparable."""

    __slots__ = ("_bytes",)
    SIZE = 20

    def __init__(self, binary: bytes) -> None:
        if not isinstance(binary, bytes):
            raise TypeError(f"{type(self).__name__} takes bytes, got {type(binary).__name__}")
        self._bytes = binary

    @classmethod
    def from_random(cls):
        return cls(os.urandom(cls.SIZE))

    @classmethod
    def nil(cls):
        return cls(b"\xff" * cls.SIZE)

    def is_nil(self) -> bool:
        return self._bytes == b"\xff" * len(self._bytes)

    def binary(self) -> bytes:
        return self._bytes

    def hex(self) -> str:
        return self._bytes.hex()

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __reduce__(self):
        return (type(self), (self._bytes,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.hex()})"


class ActorID(_BinaryID):
    """An actor's id, as passed to the ``Checkpointable`` hooks."""

    @classmethod
    def _of(cls, actor_id: int) -> "ActorID":
        return cls(actor_id.to_bytes(cls.SIZE, "big"))


class ActorCheckpointID(_BinaryID):
    """The id of one checkpoint of an actor."""


class Checkpoint(NamedTuple):
    """A recorded checkpoint: its id and when it was saved (seconds since the epoch)."""
    checkpoint_id: ActorCheckpointID
    timestamp: float


class CheckpointContext(NamedTuple):
    """What ``should_checkpoint`` decides on."""
    actor_id: ActorID
    num_tasks_since_last_checkpoint: int
    time_elapsed_ms_since_last_checkpoint: float


class Checkpointable(metaclass=abc.ABCMeta):
    """An actor that saves checkpoints and restores the newest one on restart."""

    @abc.abstractmethod
    def should_checkpoint(self, checkpoint_context: CheckpointContext) -> bool:
        """Called after every call on the actor: save a checkpoint now?"""

    @abc.abstractmethod
    def save_checkpoint(self, actor_id: ActorID, checkpoint_id: ActorCheckpointID) -> None:
        """Save the actor's state under ``checkpoint_id`` (a file, a database...)."""

    @abc.abstractmethod
    def load_checkpoint(self, actor_id: ActorID,
                        available_checkpoints: list[Checkpoint]) -> ActorCheckpointID | None:
        """On restart, after ``__init__``: restore one of ``available_checkpoints``
        (newest first) and return its id, or return None to start afresh."""

    @abc.abstractmethod
    def checkpoint_expired(self, actor_id: ActorID, checkpoint_id: ActorCheckpointID) -> None:
        """``checkpoint_id`` will not be offered again: its data may be deleted."""


def exit_actor() -> None:
    """End the current actor (its pending calls fail with ``RayActorError``)."""
    ctx = context.current() if context.is_set() else None
    if ctx is None or ctx.actor_id is None:
        raise TypeError("exit_actor() called outside an actor method")
    raise SystemExit(0)


# --- the executor's side ------------------------------------------------------------

class _Checkpoints:
    """Runs a Checkpointable actor's hooks in its executor.

    As in Ray 0.7, a hook that raises fails neither the call nor the actor: its
    traceback goes to the actor's stderr (printed on the driver) and to
    ``hpc_ray.errors()`` as an error of type ``"checkpoint"``.
    """

    def __init__(self, actor: Checkpointable, actor_id: int, ctx) -> None:
        self.actor = actor
        self.actor_id = ActorID._of(actor_id)
        self.raw_id = actor_id
        self.ctx = ctx
        self.calls = 0
        self.last = time.monotonic()

    def restore(self) -> None:
        try:
            recorded = self.ctx.control("actor_checkpoints", self.raw_id)
            if not recorded:
                return
            available = [Checkpoint(ActorCheckpointID(b), t) for b, t in recorded]
            chosen = self.actor.load_checkpoint(self.actor_id, available)
            if chosen is not None and all(chosen != c.checkpoint_id for c in available):
                raise ValueError(f"load_checkpoint returned {chosen!r}: it must return the "
                                 f"id of one of available_checkpoints, or None")
        except Exception:
            self._failed("restoring a checkpoint")

    def after_call(self) -> None:
        """After each call, the one that raised included (Ray 0.7 does the same)."""
        self.calls += 1
        now = time.monotonic()
        cc = CheckpointContext(self.actor_id, self.calls, (now - self.last) * 1000.0)
        try:
            if not self.actor.should_checkpoint(cc):
                return
            checkpoint_id = ActorCheckpointID.from_random()
            self.actor.save_checkpoint(self.actor_id, checkpoint_id)
            self.calls, self.last = 0, now
            expired = self.ctx.control("actor_checkpoint_saved", self.raw_id,
                                       checkpoint_id.binary(), time.time(),
                                       CHECKPOINTS_TO_KEEP)
            for b in expired or ():
                self.actor.checkpoint_expired(self.actor_id, ActorCheckpointID(b))
        except Exception:
            self._failed("saving a checkpoint")

    def _failed(self, doing: str) -> None:
        text = (f"actor {type(self.actor).__name__} ({self.actor_id.hex()}) failed "
                f"{doing}:\n{traceback.format_exc()}")
        sys.stderr.write(text)
        try:
            self.ctx.control("push_error", "checkpoint", text, time.time())
        except Exception:  # the head is gone: the stderr line is all there is
            pass


def checkpoints_for(actor: Any, actor_id: int, ctx) -> _Checkpoints | None:
    """The checkpoint hooks of a newly made actor (restored if it has checkpoints)."""
    if not isinstance(actor, Checkpointable):
        return None
    hooks = _Checkpoints(actor, actor_id, ctx)
    hooks.restore()
    return hooks


def _install() -> None:
    from .runtime import hooks
    hooks.actor_created = checkpoints_for


_install()
