"""Function trainables: ``f(config, reporter)`` or ``f(config)`` with ``tune.report``.

::

    trial actor thread (train())            user thread (f(config, reporter))
    ───────────────────────────             ─────────────────────────────────
    first call: start the thread ─────────▶ runs f ... reporter(**metrics)
    results.get()  ◀──────── result ─────── puts the result, then blocks on
    returns it to the driver                the continue semaphore
    next train(): continue.release() ─────▶ f goes on to its next report
    ...                                     f returns: puts an end marker
    returns the last result, done=True ◀─── (or the exception and traceback)

The user's function runs only between a ``train()`` call and its result, so a
trial that the driver stops or pauses is never running behind its back.
"""
from __future__ import annotations

import inspect
import queue
import threading
import traceback
from typing import Callable

from . import result as R
from .error import TuneError
from .trainable import Trainable

__all__ = ["FunctionRunner", "StatusReporter", "wrap_function", "report"]

#: How long ``stop()`` waits for the user's thread to notice it was stopped.
_STOP_JOIN_S = 5.0

_current = threading.local()


class _TrialStopped(StopIteration):
    """Raised in the user's thread by ``reporter()`` once the trial is stopped."""


class StatusReporter:
    """The ``reporter`` passed to a function trainable: ``reporter(**metrics)``.

    Raises:
        StopIteration: when the trial has been stopped.
    """

    def __init__(self, results: queue.Queue, continue_sem: threading.Semaphore,
                 runner: "FunctionRunner") -> None:
        self._results = results
        self._continue = continue_sem
        self._runner = runner

    def __call__(self, **metrics) -> None:
        if self._runner._stopping:
            raise _TrialStopped("trial stopped")
        self._results.put(("result", metrics))
        self._continue.acquire()
        if self._runner._stopping:
            raise _TrialStopped("trial stopped")

    @property
    def logdir(self) -> str:
        return self._runner.logdir


def report(_metrics: dict | None = None, **metrics) -> None:
    """Report metrics from a function trainable: ``tune.report(loss=0.1)`` or,
    as in Ray 2, ``tune.report({"loss": 0.1})``."""
    reporter = getattr(_current, "reporter", None)
    if reporter is None:
        raise TuneError("tune.report() called outside a function trainable run by tune.run")
    if _metrics is not None:
        if not isinstance(_metrics, dict):
            raise TypeError(f"report() takes a dict or keywords, got {type(_metrics).__name__}")
        metrics = {**_metrics, **metrics}
    reporter(**metrics)


class FunctionRunner(Trainable):
    """Runs the user's function in a thread; ``_train`` returns its next report."""

    _function: Callable | None = None

    def _setup(self, config: dict) -> None:
        self._results: queue.Queue = queue.Queue()
        self._continue = threading.Semaphore(0)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._last_metrics: dict = {}
        self._ended = False

    def _run(self, config: dict) -> None:
        reporter = StatusReporter(self._results, self._continue, self)
        _current.reporter = reporter
        fn = self._function
        try:
            if _takes_reporter(fn):
                fn(config, reporter)
            else:
                fn(config)
        except StopIteration:
            pass
        except BaseException as err:  # noqa: BLE001 - handed to the driver
            self._results.put(("error", f"{type(err).__name__}: {err}\n"
                                        f"{traceback.format_exc()}"))
            return
        finally:
            _current.reporter = None
        self._results.put(("end", None))

    def _train(self) -> dict:
        if self._ended:
            return dict(self._last_metrics, **{R.RESULT_DUPLICATE: True, R.DONE: True})
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, args=(dict(self.config),),
                                            name="tune-function", daemon=True)
            self._thread.start()
        else:
            self._continue.release()
        kind, value = self._results.get()
        if kind == "result":
            self._last_metrics = dict(value)
            return value
        self._ended = True
        if kind == "error":
            raise TuneError(f"the trainable function raised:\n{value}")
        return dict(self._last_metrics, **{R.RESULT_DUPLICATE: True, R.DONE: True})

    def _stop(self) -> None:
        self._stopping = True
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._continue.release()
            thread.join(_STOP_JOIN_S)

    def reset_config(self, new_config: dict) -> bool:
        self._stop()
        if self._thread is not None and self._thread.is_alive():
            return False
        self.config = dict(new_config)
        self._setup(self.config)
        return True

    def _save(self, checkpoint_dir: str):
        raise TuneError("function trainables cannot be checkpointed (as in Ray 0.7); "
                        "write a tune.Trainable subclass with _save/_restore")

    def _restore(self, checkpoint) -> None:
        raise TuneError("function trainables cannot be restored from a checkpoint")


def _takes_reporter(fn: Callable) -> bool:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return True
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def wrap_function(fn: Callable) -> type:
    """A ``FunctionRunner`` subclass that runs ``fn``."""
    name = getattr(fn, "__name__", "func")
    return type(name, (FunctionRunner,), {"_function": staticmethod(fn)})
