"""``tune.track`` (Ray 0.7.2+): report metrics from a function that takes only
its config, inside Tune or on its own.

    def train(config):                       # run by tune.run: results go to Tune
        for step in range(10):
            tune.track.log(mean_accuracy=step * config["lr"])

    tune.track.init(experiment_dir="/tmp/runs", trial_name="by_hand")   # outside Tune:
    tune.track.log(loss=0.5)                 # result.json and progress.csv in
    tune.track.shutdown()                    # /tmp/runs/by_hand
"""
from __future__ import annotations

import logging
import os

from .error import TuneError
from .function_runner import _current, report

__all__ = ["init", "shutdown", "log", "trial_dir", "trial_name"]

logger = logging.getLogger(__name__)


class _NoSession(TuneError, ValueError):
    """``track.log`` without a session (0.7 raised ValueError)."""


class TrackSession:
    """A trial of one's own outside ``tune.run``: results are logged to
    ``experiment_dir/trial_name`` with Tune's loggers."""

    def __init__(self, experiment_dir: str | None = None, trial_name: str | None = None,
                 upload_dir: str | None = None, trial_config: dict | None = None) -> None:
        from .experiment import DEFAULT_RESULTS_DIR
        from .logger import TrialLogger
        from .trial import Trial
        self.trial_id = Trial.new_id()
        self.trial_name = trial_name or f"trial_{self.trial_id}"
        self.experiment_dir = os.path.abspath(os.path.expanduser(
            experiment_dir or os.path.join(DEFAULT_RESULTS_DIR, "default")))
        self.logdir = os.path.join(self.experiment_dir, self.trial_name)
        trial = Trial("track", trial_config or {}, self.trial_id)
        trial.logdir = self.logdir
        self._logger = TrialLogger(trial)
        self._iteration = 0

    def log(self, **metrics) -> None:
        self._iteration += 1
        result = dict(metrics)
        result.setdefault("training_iteration", self._iteration)
        result.setdefault("trial_id", self.trial_id)
        self._logger.on_result(result)

    def close(self) -> None:
        self._logger.close()


#: The session of this process (outside Tune), or None.
_session: TrackSession | None = None


def _in_trial() -> bool:
    return getattr(_current, "reporter", None) is not None


def init(ignore_reinit_error: bool = True, **session_kwargs) -> None:
    """Start a session: inside a trial run by ``tune.run`` there is one already
    (results go to Tune); elsewhere results go to ``experiment_dir/trial_name``.

    Args:
        ignore_reinit_error: a second ``init`` is ignored (else a ``ValueError``).
        **session_kwargs: ``experiment_dir``, ``trial_name``, ``upload_dir``,
            ``trial_config`` of a session outside Tune.
    """
    global _session
    if _in_trial():
        return
    if _session is not None:
        if ignore_reinit_error:
            logger.warning("tune.track.init(): a session already exists in this process")
            return
        raise ValueError("tune.track.init(): a session already exists in this process; "
                         "call tune.track.shutdown() first")
    _session = TrackSession(**session_kwargs)


def shutdown() -> None:
    """End this process' session (its files are closed)."""
    global _session
    if _session is not None:
        _session.close()
    _session = None


def log(**metrics) -> None:
    """Report ``metrics`` as the trial's next result."""
    if _in_trial():
        report(**metrics)
    elif _session is not None:
        _session.log(**metrics)
    else:
        raise _NoSession("tune.track.log() outside a trial run by tune.run and without "
                         "a session: call tune.track.init() first")


def trial_dir() -> str:
    """The directory of the running trial's results and checkpoints."""
    reporter = getattr(_current, "reporter", None)
    if reporter is not None:
        return reporter.logdir
    if _session is not None:
        return _session.logdir
    raise _NoSession("tune.track.trial_dir() outside a trial run by tune.run and without "
                     "a session: call tune.track.init() first")


def trial_name() -> str:
    """The running trial's name (outside Tune: the session's)."""
    if _session is not None and not _in_trial():
        return _session.trial_name
    return os.path.basename(trial_dir())

