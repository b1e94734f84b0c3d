"""Asynchronous successive halving (ASHA, https://arxiv.org/abs/1810.05934).

Each bracket has rungs at ``grace_period * reduction_factor**k`` (bracket ``s``
starts ``s`` rungs later).  A trial reaching a rung is stopped unless its metric
is in the top ``1 / reduction_factor`` of the results recorded at that rung so
far; no trial ever waits for another.
"""
from __future__ import annotations

import math

import numpy as np

from ..trial import Trial
from .trial_scheduler import FIFOScheduler, TrialScheduler, _metric_sign, _resolve_metric

__all__ = ["AsyncHyperBandScheduler", "ASHAScheduler"]


class _Bracket:
    def __init__(self, min_t: float, max_t: float, reduction_factor: float, s: int) -> None:
        self.rf = reduction_factor
        count = int(math.log(max_t / min_t, reduction_factor) - s + 1) if max_t > min_t else 0
        #: Rung milestones, largest first, each with its recorded {trial_id: metric}.
        self.rungs = [(min_t * reduction_factor ** (k + s), {})
                      for k in reversed(range(max(count, 0)))]

    def on_result(self, trial: Trial, t: float, value: float) -> str:
        action = TrialScheduler.CONTINUE
        for milestone, recorded in self.rungs:
            if t < milestone or trial.trial_id in recorded:
                continue
            if recorded:
                cutoff = np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100)
                if value < cutoff:
                    action = TrialScheduler.STOP
            recorded[trial.trial_id] = value
            break
        return action

    def debug_str(self) -> str:
        return " | ".join(f"Rung(t={m:g}): {len(r)} recorded" for m, r in self.rungs)


class AsyncHyperBandScheduler(FIFOScheduler):
    """Asynchronous HyperBand (successive halving with early stopping).

    Args:
        time_attr: the result field that measures progress (increasing).
        reward_attr: deprecated 0.7 name for ``metric`` with ``mode="max"``.
        metric: the result field to optimize.
        mode: "min" or "max".
        max_t: trials are stopped at this ``time_attr``.
        grace_period: no trial is stopped before this ``time_attr``.
        reduction_factor: halving rate: the top ``1/reduction_factor`` go on.
        brackets: number of brackets (trials are assigned at random, softmax-weighted).
    """

    _supports_buffered_results = False

    def __init__(self, time_attr: str = "training_iteration", reward_attr: str | None = None,
                 metric: str = "episode_reward_mean", mode: str = "max", max_t: float = 100,
                 grace_period: float = 10, reduction_factor: float = 4,
                 brackets: int = 1) -> None:
        if grace_period <= 0 or max_t < grace_period:
            raise ValueError(f"need 0 < grace_period <= max_t, got grace_period="
                             f"{grace_period!r} max_t={max_t!r}")
        if reduction_factor <= 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor!r}")
        self._time_attr = time_attr
        self._metric = _resolve_metric(metric, reward_attr)
        self._sign = 1.0 if reward_attr is not None else _metric_sign(mode)
        self._max_t = max_t
        self._brackets = [_Bracket(grace_period, max_t, reduction_factor, s)
                          for s in range(brackets)]
        self._trial_bracket: dict[str, _Bracket] = {}
        self._num_stopped = 0
        weights = np.array([10 * math.exp(-s) for s in range(brackets)])
        self._probs = weights / weights.sum()

    def on_trial_add(self, trial_runner, trial: Trial) -> None:
        index = int(np.random.choice(len(self._brackets), p=self._probs))
        self._trial_bracket[trial.trial_id] = self._brackets[index]

    def on_trial_result(self, trial_runner, trial: Trial, result: dict) -> str:
        if self._time_attr not in result or self._metric not in result:
            return TrialScheduler.CONTINUE
        t = result[self._time_attr]
        if t >= self._max_t:
            action = TrialScheduler.STOP
        else:
            bracket = self._trial_bracket.setdefault(trial.trial_id, self._brackets[0])
            action = bracket.on_result(trial, t, self._sign * result[self._metric])
        if action == TrialScheduler.STOP:
            self._num_stopped += 1
        return action

    def on_trial_complete(self, trial_runner, trial: Trial, result: dict) -> None:
        if result and self._time_attr in result and self._metric in result:
            bracket = self._trial_bracket.get(trial.trial_id)
            if bracket is not None:
                bracket.on_result(trial, result[self._time_attr], self._sign * result[self._metric])

    def debug_string(self) -> str:
        lines = [f"Using AsyncHyperBand: num_stopped={self._num_stopped}"]
        lines += [f"Bracket: {b.debug_str()}" for b in self._brackets]
        return "\n".join(lines)


#: The modern name.
ASHAScheduler = AsyncHyperBandScheduler
