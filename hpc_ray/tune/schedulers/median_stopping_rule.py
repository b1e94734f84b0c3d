"""The median stopping rule (Vizier, https://research.google.com/pubs/pub46180.html):
stop a trial whose best result so far is worse than the median of the other
trials' running averages at the same point in time.

"The other trials" are those whose results reached that time (running or
completed: a completed trial's final result counts), each averaged over its
results from ``grace_period`` to that time: modern Ray's rule.  Ray 0.7.6
compared against completed trials only, so nothing stopped before
``min_samples_required`` trials had ended."""
from __future__ import annotations

import numpy as np

from ..trial import Trial
from .trial_scheduler import (FIFOScheduler, TrialScheduler, _metric_sign, _resolve_metric,
                              paused_in_order)

__all__ = ["MedianStoppingRule"]


class MedianStoppingRule(FIFOScheduler):
    """Stop trials that fall below the median of the others.

    Args:
        time_attr: the result field that measures progress (increasing).
        reward_attr: deprecated 0.7 name for ``metric`` with ``mode="max"``.
        metric: the result field to optimize.
        mode: "min" or "max".
        grace_period: no trial is stopped before this ``time_attr``.
        min_samples_required: other trials needed to compute a median.
        hard_stop: stop (True) or pause (False) the trials below the median.
        verbose: log the median and best result at each decision.
    """

    _supports_buffered_results = False

    def __init__(self, time_attr: str = "time_total_s", reward_attr: str | None = None,
                 metric: str = "episode_reward_mean", mode: str = "max",
                 grace_period: float = 60.0, min_samples_required: int = 3,
                 hard_stop: bool = True, verbose: bool = True) -> None:
        self._time_attr = time_attr
        self._metric = _resolve_metric(metric, reward_attr)
        self._sign = 1.0 if reward_attr is not None else _metric_sign(mode)
        self._grace_period = grace_period
        self._min_samples = min_samples_required
        self._hard_stop = hard_stop
        self.pauses_trials = not hard_stop
        #: trial_id -> [(time, signed metric)] of every result.
        self._results: dict[str, list[tuple[float, float]]] = {}
        self._completed: set[str] = set()
        self._stopped: set[str] = set()

    def on_trial_result(self, trial_runner, trial: Trial, result: dict) -> str:
        if self._time_attr not in result or self._metric not in result:
            return TrialScheduler.CONTINUE
        t = result[self._time_attr]
        history = self._results.setdefault(trial.trial_id, [])
        history.append((t, self._sign * result[self._metric]))
        if trial.trial_id in self._stopped:
            # Only a paused trial reports again: it was resumed to run to the end.
            return TrialScheduler.CONTINUE
        if t < self._grace_period:
            return TrialScheduler.CONTINUE
        others = [self._running_mean(tid, t) for tid, rows in self._results.items()
                  if tid != trial.trial_id and rows and rows[-1][0] >= t]
        others = [v for v in others if v is not None]
        if len(others) < self._min_samples:
            return TrialScheduler.CONTINUE
        best = max(v for _, v in history)
        median = float(np.median(others))
        if best < median:
            self._stopped.add(trial.trial_id)
            return TrialScheduler.STOP if self._hard_stop else TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE

    def _running_mean(self, trial_id: str, t: float) -> float | None:
        values = [v for time, v in self._results[trial_id] if self._grace_period <= time <= t]
        return float(np.mean(values)) if values else None

    def on_trial_complete(self, trial_runner, trial: Trial, result: dict) -> None:
        self._completed.add(trial.trial_id)
        if self._time_attr in result and self._metric in result:
            history = self._results.setdefault(trial.trial_id, [])
            point = (result[self._time_attr], self._sign * result[self._metric])
            if not history or history[-1] != point:  # (the runner may have told us)
                history.append(point)

    def choose_trial_to_run(self, trial_runner) -> Trial | None:
        for trial in trial_runner.get_trials():
            if trial.status == Trial.PENDING and trial_runner.has_resources(trial.resources):
                return trial
        # Paused (below-median) trials resume once nothing else is left.
        if any(t.status in (Trial.PENDING, Trial.RUNNING) for t in trial_runner.get_trials()):
            return None
        for trial in paused_in_order(trial_runner.get_trials()):
            if trial_runner.has_resources(trial.resources):
                return trial
        return None

    def debug_string(self) -> str:
        return (f"Using MedianStoppingRule: num_stopped={len(self._stopped)}.")
