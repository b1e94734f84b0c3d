"""The trial actor: one trainable instance inside an hpc_ray actor on a worker rank.

::

    driver (TrialRunner)                         trial actor (worker rank)
    setup.remote(config, checkpoint, reuse) ───▶ reset_config(config) or a new
                                                 trainable; restore the checkpoint
    train.remote(n, s) ────────────────────────▶ trainable.train() up to n times or
                   ◀── [(result, checkpoint bytes | None)]  s seconds; saves on
                                                            checkpoint iterations
    save.remote() ─────────────────────────────▶ checkpoint bytes (pause, PBT, end)
    stop.remote(), __ray_terminate__ ──────────▶ trainable.stop(); the actor exits

Calls on one actor run in order, so ``setup`` and the first ``train`` are sent
together without waiting: one round trip starts a trial.  An error in ``setup``
is raised again by the ``train`` behind it, where the driver is waiting.
"""
from __future__ import annotations

import os
import tempfile
import time
import traceback

import cloudpickle

from ..transport.serialization import dumps
from . import result as R
from .error import TuneError
from .function_runner import wrap_function
from .trainable import Trainable

__all__ = ["TrialActor", "pack_trainable", "unpack_trainable"]


def pack_trainable(trainable) -> bytes:
    """The user's trainable (function or class) as bytes, shipped by value."""
    if isinstance(trainable, type):
        if not issubclass(trainable, Trainable):
            raise TypeError(f"a trainable class must subclass tune.Trainable, got {trainable!r}")
        return dumps(("class", trainable))
    if callable(trainable):
        return dumps(("function", trainable))
    raise TypeError(f"a trainable must be a function or a tune.Trainable subclass, "
                    f"got {trainable!r}")


def unpack_trainable(blob: bytes) -> type:
    kind, obj = cloudpickle.loads(blob)
    return wrap_function(obj) if kind == "function" else obj


class TrialActor:
    """Hosts the trainables of one or more trials, one after the other."""

    def __init__(self, trainable_blob: bytes) -> None:
        self._cls = unpack_trainable(trainable_blob)
        self._trainable: Trainable | None = None
        self._error: str | None = None
        self._checkpoint_freq = 0
        self._checkpoint_at_end = False
        self._stop_criterion: dict = {}
        #: A trial is set up and has not ended yet.
        self._live = False

    def setup(self, config: dict, logdir: str | None, checkpoint: bytes | None,
              reuse: bool, checkpoint_freq: int, checkpoint_at_end: bool,
              stop: dict) -> None:
        self._error = None
        self._live = True
        self._checkpoint_freq = checkpoint_freq
        self._checkpoint_at_end = checkpoint_at_end
        self._stop_criterion = stop
        try:
            reset = False
            if self._trainable is not None and reuse:
                reset = bool(self._trainable.reset_config(dict(config)))
            if reset:
                t = self._trainable
                t.config = dict(config)
                t._iteration, t._time_total = 0, 0.0
                t._timesteps_total = t._episodes_total = None
                t._time_since_restore, t._iterations_since_restore = 0.0, 0
            else:
                if self._trainable is not None:
                    self._stop_quietly()
                self._trainable = self._cls(dict(config))
            if logdir and os.path.isdir(logdir):
                self._trainable.logdir = logdir
            else:  # the driver's disk is not shared with this node
                self._trainable.logdir = tempfile.gettempdir()
            if checkpoint is not None:
                self._trainable.restore_from_object(checkpoint)
        except BaseException as err:  # noqa: BLE001 - reported by the next train()
            self._error = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
            raise

    def train(self, max_results: int = 1,
              max_seconds: float = 0.0) -> list[tuple[dict, bytes | None]]:
        """Run iterations until one meets the stop criterion (or says done), or
        ``max_results`` results, or ``max_seconds``; return each result with its
        checkpoint bytes (or None).  The runner asks for more than one only when
        its scheduler decides nothing per result (FIFO): one round trip then
        carries a whole short trial.  A call ends at a checkpoint too."""
        if self._error is not None:
            raise TuneError(f"the trial could not be set up:\n{self._error}")
        t = self._trainable
        out = []
        start = time.monotonic()
        while True:
            result = t.train()
            checkpoint = None
            stops = _stops(result, self._stop_criterion)
            if not result.get(R.RESULT_DUPLICATE):
                if self._checkpoint_freq and t._iteration % self._checkpoint_freq == 0:
                    checkpoint = t.save_to_object()
                elif self._checkpoint_at_end and stops:
                    checkpoint = t.save_to_object()
            out.append((result, checkpoint))
            # A checkpoint goes to the driver at once: a crash in a later
            # iteration of the same call must not take it along.
            if stops or result.get(R.RESULT_DUPLICATE):
                self._live = False
                return out
            if (checkpoint is not None or len(out) >= max_results
                    or time.monotonic() - start >= max_seconds):
                return out

    def start(self, setup_args: tuple, max_results: int, max_seconds: float):
        """A trial queued behind the current one: set up and train it, unless the
        current trial is still live (then None: the driver starts it later)."""
        if self._live:
            return None
        self.setup(*setup_args)
        return self.train(max_results, max_seconds)

    def save(self) -> tuple[int, bytes]:
        return self._trainable._iteration, self._trainable.save_to_object()

    def stop(self) -> None:
        self._stop_quietly()
        self._trainable = None

    def _stop_quietly(self) -> None:
        try:
            self._trainable.stop()
        except Exception:  # noqa: BLE001 - a failing _stop must not fail the next trial
            traceback.print_exc()

    def pid(self) -> int:
        return os.getpid()


def _stops(result: dict, criterion) -> bool:
    if result.get(R.DONE):
        return True
    if callable(criterion):
        return False  # decided on the driver, which then asks for a save
    return any(key in result and result[key] >= bound for key, bound in criterion.items())
