"""HyperBand (https://arxiv.org/abs/1603.06560), synchronous successive halving.

Trials fill brackets, the smallest first.  Bracket ``s`` holds up to
``n0(s) = ceil(s_max_1 / (s + 1) * eta**s)`` trials and first runs each of them
for ``r0(s) = max_t * eta**-s`` units of ``time_attr``.  A trial reaching the
bracket's milestone is paused (checkpointed, its resources freed); when every
live trial of the bracket has reached it, the best ``1/eta`` continue (their
milestone multiplied by ``eta``) and the others stop.  Pausing needs a
checkpointable trainable (``_save``/``_restore``).
"""
from __future__ import annotations

import math

from ..trial import Trial
from .trial_scheduler import FIFOScheduler, TrialScheduler, _metric_sign, _resolve_metric

__all__ = ["HyperBandScheduler"]


class _Bracket:
    def __init__(self, time_attr: str, n0: int, r0: float, max_t: float, eta: float,
                 s: int) -> None:
        self.time_attr = time_attr
        self.n0 = n0
        self.r = r0
        self.max_t = max_t
        self.eta = eta
        self.halvings_left = s
        #: Every trial added, and the live ones with their latest signed metric.
        self.trials: list[Trial] = []
        self.live: dict[Trial, float | None] = {}
        self.progress: dict[Trial, float] = {}

    def filled(self) -> bool:
        return len(self.trials) >= self.n0

    def add(self, trial: Trial) -> None:
        self.trials.append(trial)
        self.live[trial] = None
        self.progress[trial] = 0

    def update(self, trial: Trial, t: float, value: float) -> None:
        self.live[trial] = value
        self.progress[trial] = t

    def reached(self, trial: Trial) -> bool:
        return self.progress.get(trial, 0) >= min(self.r, self.max_t)

    def all_reached(self) -> bool:
        return all(self.reached(t) for t in self.live)

    def finished(self) -> bool:
        return self.halvings_left <= 0 or self.r >= self.max_t

    def halve(self) -> tuple[list[Trial], list[Trial]]:
        ranked = sorted(self.live, key=lambda t: self.live[t] if self.live[t] is not None
                        else -math.inf, reverse=True)
        keep = max(1, int(math.ceil(len(ranked) / self.eta)))
        self.halvings_left -= 1
        self.r = min(self.r * self.eta, self.max_t)
        return ranked[:keep], ranked[keep:]

    def remove(self, trial: Trial) -> None:
        self.live.pop(trial, None)

    def completion(self) -> float:
        if not self.trials:
            return 0.0
        return sum(min(self.progress.get(t, 0), self.r) for t in self.trials) / (
            len(self.trials) * max(self.r, 1e-9))

    def __str__(self) -> str:
        states: dict[str, int] = {}
        for t in self.trials:
            states[t.status] = states.get(t.status, 0) + 1
        return (f"Bracket(Max Size (n)={self.n0}, Milestone (r)={self.r:g}, "
                f"completed={100 * self.completion():.1f}%): {states}")


class HyperBandScheduler(FIFOScheduler):
    """HyperBand early stopping (it pauses trials: class trainables only).

    Args:
        time_attr: the result field that measures progress (increasing).
        reward_attr: deprecated 0.7 name for ``metric`` with ``mode="max"``.
        metric: the result field to optimize.
        mode: "min" or "max".
        max_t: trials stop at this ``time_attr``.
        reduction_factor: ``eta``: the top ``1/eta`` of a bracket go on at each halving.
    """

    pauses_trials = True

    _supports_buffered_results = False

    def __init__(self, time_attr: str = "training_iteration", reward_attr: str | None = None,
                 metric: str = "episode_reward_mean", mode: str = "max", max_t: float = 81,
                 reduction_factor: float = 3) -> None:
        if max_t <= 0:
            raise ValueError(f"max_t must be > 0, got {max_t!r}")
        self._time_attr = time_attr
        self._metric = _resolve_metric(metric, reward_attr)
        self._sign = 1.0 if reward_attr is not None else _metric_sign(mode)
        self._eta = reduction_factor
        self._max_t = max_t
        self._s_max_1 = int(round(math.log(max_t) / math.log(reduction_factor))) + 1
        self._bands: list[list[_Bracket]] = [[]]
        self._trial_bracket: dict[Trial, _Bracket] = {}
        self._num_stopped = 0

    def _new_bracket(self) -> _Bracket | None:
        band = self._bands[-1]
        if len(band) >= self._s_max_1:
            band = []
            self._bands.append(band)
        s = len(band)
        r0 = self._max_t * self._eta ** (-s)
        n0 = int(math.ceil(self._s_max_1 / (s + 1) * self._eta ** s))
        bracket = _Bracket(self._time_attr, n0, r0, self._max_t, self._eta, s)
        band.append(bracket)
        return bracket if int(r0) > 0 else None

    def on_trial_add(self, trial_runner, trial: Trial) -> None:
        band = self._bands[-1]
        bracket = band[-1] if band else None
        while bracket is None or bracket.filled():
            bracket = self._new_bracket()
        bracket.add(trial)
        self._trial_bracket[trial] = bracket

    def on_trial_result(self, trial_runner, trial: Trial, result: dict) -> str:
        bracket = self._trial_bracket[trial]
        if self._time_attr in result and self._metric in result:
            bracket.update(trial, result[self._time_attr], self._sign * result[self._metric])
        if result.get(self._time_attr, 0) >= self._max_t:
            bracket.remove(trial)
            return TrialScheduler.STOP
        if not bracket.reached(trial):
            return TrialScheduler.CONTINUE
        return self._process(trial_runner, bracket, trial)

    def _process(self, trial_runner, bracket: _Bracket, current: Trial | None) -> str:
        """Halve the bracket once every live trial reached its milestone; return
        the decision for ``current`` (the trial whose result is being handled)."""
        action = TrialScheduler.PAUSE
        if not bracket.all_reached() or not bracket.live:
            return action
        if bracket.finished():
            for t in list(bracket.live):
                if t is not current and t.status == Trial.PAUSED:
                    trial_runner.stop_trial(t)
            bracket.live.clear()
            return TrialScheduler.STOP
        good, bad = bracket.halve()
        for t in bad:
            bracket.remove(t)
            self._num_stopped += 1
            if t is current:
                action = TrialScheduler.STOP
            elif t.status == Trial.PAUSED:
                trial_runner.stop_trial(t)
        for t in good:
            if t is current:
                action = TrialScheduler.CONTINUE
            elif t.status == Trial.PAUSED:
                trial_runner.unpause_trial(t)
        return action

    def on_trial_remove(self, trial_runner, trial: Trial) -> None:
        bracket = self._trial_bracket.get(trial)
        if bracket is None:
            return
        bracket.remove(trial)
        if bracket.live and not bracket.finished():
            self._process(trial_runner, bracket, None)

    def on_trial_complete(self, trial_runner, trial: Trial, result: dict) -> None:
        self.on_trial_remove(trial_runner, trial)

    def on_trial_error(self, trial_runner, trial: Trial) -> None:
        self.on_trial_remove(trial_runner, trial)

    def choose_trial_to_run(self, trial_runner) -> Trial | None:
        for band in self._bands:
            for bracket in sorted(band, key=lambda b: b.completion()):
                for trial in bracket.trials:
                    if (trial.status == Trial.PENDING and trial in bracket.live
                            and trial_runner.has_resources(trial.resources)):
                        return trial
        # Trials the bands do not know (added before this scheduler saw them).
        for trial in trial_runner.get_trials():
            if (trial.status == Trial.PENDING and trial not in self._trial_bracket
                    and trial_runner.has_resources(trial.resources)):
                return trial
        return None

    def debug_string(self) -> str:
        lines = [f"Using HyperBand: num_stopped={self._num_stopped} "
                 f"total_brackets={sum(len(b) for b in self._bands)}"]
        for i, band in enumerate(self._bands):
            lines.append(f"Round #{i}:")
            lines += [f"  {b}" for b in band]
        return "\n".join(lines)
