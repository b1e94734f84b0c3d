"""The trial actor: one trainable instance inside an hpc_ray actor on a worker rank.

::

    driver (TrialRunner)                         trial actor (worker rank)
    setup.remote(config, checkpoint, reuse) ───▶ chdir to the trial's directory;
                                                 reset_config(config) or a new
                                                 trainable; restore the checkpoint
    train.remote(n, s) ────────────────────────▶ trainable.train() up to n times or
                   ◀── [(result, checkpoint bytes | None)]  s seconds; saves on
                                                            checkpoint iterations
    save.remote() ─────────────────────────────▶ checkpoint bytes (pause, PBT, end)
    export.remote(formats, logdir) ────────────▶ trainable.export_model() (export_formats)
    stop.remote(), __ray_terminate__ ──────────▶ trainable.stop(); the actor exits

Calls on one actor run in order, so ``setup`` and the first ``train`` are sent
together without waiting: one round trip starts a trial.  An error in ``setup``
is raised again by the ``train`` behind it, where the driver is waiting.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback

import cloudpickle

from ..transport.serialization import dumps
from . import result as R
from .error import ResetConfigError, TuneError
from .function_runner import FunctionRunner, wrap_function
from .trainable import Trainable, _overrides, pack_dir

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
        #: The setup's error (its class and text), raised again by train().
        self._error: tuple[type, str] | None = None
        #: What the trainable raised after the results a train() call returned.
        self._raised: Exception | None = None
        # Trainables run in their trial's directory; this is where the actor began,
        # and relative import paths ("" or PYTHONPATH=.) keep meaning what they did.
        os.environ.setdefault("TUNE_ORIG_WORKING_DIR", os.getcwd())
        sys.path[:] = [os.path.abspath(p) if not os.path.isabs(p) else p for p in sys.path]
        self._checkpoint_freq = 0
        self._checkpoint_at_end = False
        self._stop_criterion: dict = {}
        #: A trial is set up and has not ended yet.
        self._live = False

    def setup(self, config: dict, logdir: str | None, checkpoint: bytes | None,
              reuse: bool, checkpoint_freq: int, checkpoint_at_end: bool,
              stop: dict, same_trial: bool = False) -> None:
        """Set up a trial: ``reuse`` the trainable in place when it resets
        (``reset_config``), else make a new one.  A ``reset_config`` of the
        user's that says no fails the run when the actor moves to another trial
        (``reuse_actors``); for the same trial's new config (PBT) the trainable
        is made anew from the checkpoint, as Ray 0.7 restarts it."""
        self._error = self._raised = None
        self._live = True
        self._checkpoint_freq = checkpoint_freq
        self._checkpoint_at_end = checkpoint_at_end
        self._stop_criterion = stop
        try:
            # The trainable runs in its trial's directory, so that relative paths
            # land beside its results (on a node that does not see the driver's
            # disk: in the temporary directory).
            workdir = logdir if logdir and os.path.isdir(logdir) else tempfile.gettempdir()
            previous = os.getcwd()
            os.chdir(workdir)
            reset = False
            if self._trainable is not None and reuse:
                reset = bool(self._trainable.reset_config(dict(config)))
                if not reset and not same_trial and _user_reset(self._trainable):
                    raise ResetConfigError(
                        f"{type(self._trainable).__name__}.reset_config() returned False: "
                        f"with reuse_actors=True a trial's actor takes the next trial "
                        f"through reset_config(new_config), which must apply the config "
                        f"and return True; fix it, drop it, or pass reuse_actors=False")
            if reset:
                t = self._trainable
                t.config = dict(config)
                t._iteration, t._time_total = 0, 0.0
                t._timesteps_total = t._episodes_total = None
                t._time_since_restore, t._iterations_since_restore = 0.0, 0
                t._timesteps_since_restore = 0
            else:
                if self._trainable is not None:
                    # In its own trial's directory: relative paths in _stop mean that.
                    with contextlib.suppress(OSError):
                        os.chdir(previous)
                    self._stop_quietly()
                    os.chdir(workdir)
                # As in Ray 0.7, logdir is the trial's before _setup runs: an RLlib
                # trainer's "output": "logdir" and monitor files go there.
                self._trainable = self._cls(dict(config),
                                            logger_creator=lambda _c: _TrialDir(workdir))
            self._trainable.logdir = workdir
            if checkpoint is not None:
                self._trainable.restore_from_object(checkpoint)
        except BaseException as err:  # noqa: BLE001 - reported by the next train()
            kind = ResetConfigError if isinstance(err, ResetConfigError) else TuneError
            self._error = (kind, f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
            raise

    def train(self, max_results: int = 1,
              max_seconds: float = 0.0) -> list[tuple[dict, bytes | None]]:
        """Run iterations until one meets the stop criterion (or says done), or
        ``max_results`` results, or ``max_seconds``; return each result with its
        checkpoint bytes (or None).  The runner asks for more than one only when
        its scheduler decides nothing per result (FIFO): one round trip then
        carries a whole short trial.  A call ends at a checkpoint too."""
        if self._error is not None:
            kind, text = self._error
            raise kind(f"the trial could not be set up:\n{text}")
        if self._raised is not None:
            raised, self._raised = self._raised, None
            raise raised
        t = self._trainable
        out = []
        start = time.monotonic()
        while True:
            try:
                result = t.train()
            except Exception as err:
                if not out:
                    raise
                # The results before it go to the driver first (logged, as Ray logs
                # each as it comes); the next call raises it.
                self._raised = err
                return out
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

    def export(self, export_formats: list, logdir: str | None
               ) -> tuple[dict, bytes | None]:
        """``Trainable.export_model`` into the trial's directory; where this node
        does not see it, into a temporary one whose files go back as bytes."""
        if logdir and os.path.isdir(logdir):
            return self._trainable.export_model(export_formats, logdir), None
        tmp = tempfile.mkdtemp(prefix="tune-export-")
        try:
            exported = self._trainable.export_model(export_formats, tmp)
            return ({k: os.path.relpath(str(v), tmp) for k, v in exported.items()},
                    pack_dir(tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

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


def _user_reset(trainable: Trainable) -> bool:
    """The user wrote this ``reset_config`` (a False from it is an answer; from
    the default one it means "make a new instance")."""
    return _overrides(trainable, "reset_config") and not isinstance(trainable, FunctionRunner)


def _stops(result: dict, criterion) -> bool:
    if result.get(R.DONE):
        return True
    if callable(criterion):
        return False  # decided on the driver, which then asks for a save
    return any(key in result and result[key] >= bound for key, bound in criterion.items())


class _TrialDir:
    """What a trainable's ``logger_creator`` gives in a trial: its ``logdir``
    only (the driver logs the trial's results)."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir

    def on_result(self, result: dict) -> None:
        pass

    def close(self) -> None:
        pass
