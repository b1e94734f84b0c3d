"""Population Based Training (https://deepmind.com/blog/population-based-training-neural-networks).

Every ``perturbation_interval`` units of ``time_attr`` a trial is ranked
against the population: a trial in the top ``quantile_fraction`` is
checkpointed (its checkpoint becomes the one others clone); a trial in the
bottom ``quantile_fraction`` *exploits* a random top trial (restores its
checkpoint) and *explores* (its config is the top trial's, mutated by
``hyperparam_mutations``/``custom_explore_fn``).  The runner applies the
change before the trial's next iteration, in the same actor.
"""
from __future__ import annotations

import copy
import logging
import math
import random
from typing import Callable

from ..sample import _Domain
from ..trial import Trial
from .trial_scheduler import FIFOScheduler, TrialScheduler, _metric_sign, _resolve_metric

__all__ = ["PopulationBasedTraining", "explore"]

logger = logging.getLogger(__name__)


def explore(config: dict, mutations: dict, resample_probability: float,
            custom_explore_fn: Callable | None) -> dict:
    """A copy of ``config`` with each key of ``mutations`` perturbed or resampled."""
    new = copy.deepcopy(config)
    for key, space in mutations.items():
        if isinstance(space, dict):
            new[key] = explore(config.get(key, {}), space, resample_probability, None)
        elif isinstance(space, (list, tuple)):
            values = list(space)
            if random.random() < resample_probability or config.get(key) not in values:
                new[key] = random.choice(values)
            else:
                i = values.index(config[key]) + random.choice([-1, 1])
                new[key] = values[min(max(i, 0), len(values) - 1)]
        else:
            sample = (lambda: space.sample(None)) if isinstance(space, _Domain) else (
                getattr(space, "func", space))
            if random.random() < resample_probability or key not in config:
                new[key] = sample()
            else:
                factor = random.choice([0.8, 1.2])
                value = config[key] * factor
                new[key] = int(value) if isinstance(config[key], int) else value
    if custom_explore_fn is not None:
        new = custom_explore_fn(new)
        if new is None:
            raise ValueError("custom_explore_fn must return the new config")
    return new


class _State:
    def __init__(self) -> None:
        self.last_perturbation_time = 0.0
        self.last_score: float | None = None
        self.last_checkpoint: str | None = None


class PopulationBasedTraining(FIFOScheduler):
    """Population Based Training.

    Args:
        time_attr: the result field that measures progress (increasing).
        reward_attr: deprecated 0.7 name for ``metric`` with ``mode="max"``.
        metric: the result field to optimize.
        mode: "min" or "max".
        perturbation_interval: ``time_attr`` units between perturbations.
        hyperparam_mutations: per key, a list of values or a function (or a
            ``tune`` sampler) to resample from.
        quantile_fraction: fraction of the population cloned from / into; 0
            means no exploitation at all.
        resample_probability: chance of resampling instead of perturbing.
        custom_explore_fn: ``f(config) -> config`` run after the mutations.
        log_config: write each exploit to ``pbt_policy_<trial>.txt``.
    """

    pauses_trials = True

    _supports_buffered_results = False

    def __init__(self, time_attr: str = "time_total_s", reward_attr: str | None = None,
                 metric: str = "episode_reward_mean", mode: str = "max",
                 perturbation_interval: float = 60.0, hyperparam_mutations: dict | None = None,
                 quantile_fraction: float = 0.25, resample_probability: float = 0.25,
                 custom_explore_fn: Callable | None = None, log_config: bool = True) -> None:
        if not hyperparam_mutations and not custom_explore_fn:
            raise ValueError("give hyperparam_mutations or custom_explore_fn")
        if not 0 <= quantile_fraction <= 0.5:
            raise ValueError(f"quantile_fraction must be in [0, 0.5], got {quantile_fraction!r}")
        self._time_attr = time_attr
        self._metric = _resolve_metric(metric, reward_attr)
        self._sign = 1.0 if reward_attr is not None else _metric_sign(mode)
        self._interval = perturbation_interval
        self._mutations = hyperparam_mutations or {}
        self._quantile = quantile_fraction
        self._resample = resample_probability
        self._custom_explore = custom_explore_fn
        self._log_config = log_config
        self._state: dict[Trial, _State] = {}
        self._num_perturbations = 0

    def on_trial_add(self, trial_runner, trial: Trial) -> None:
        self._state[trial] = _State()

    def on_trial_result(self, trial_runner, trial: Trial, result: dict) -> str:
        if self._time_attr not in result or self._metric not in result:
            return TrialScheduler.CONTINUE
        state = self._state.setdefault(trial, _State())
        t = result[self._time_attr]
        state.last_score = self._sign * result[self._metric]
        if t - state.last_perturbation_time < self._interval:
            return TrialScheduler.CONTINUE
        state.last_perturbation_time = t
        lower, upper = self._quantiles()
        if trial in upper:
            state.last_checkpoint = trial_runner.save_trial(trial)
        elif trial in lower:
            donors = [t for t in upper if self._state[t].last_checkpoint]
            if donors:
                self._exploit(trial_runner, trial, random.choice(donors))
        # A population larger than the cluster takes turns: yield to a waiting trial.
        if any(t.status in (Trial.PENDING, Trial.PAUSED) for t in trial_runner.get_trials()):
            return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE

    def _quantiles(self) -> tuple[list[Trial], list[Trial]]:
        scored = [t for t, s in self._state.items()
                  if s.last_score is not None and not t.is_finished()]
        scored.sort(key=lambda t: self._state[t].last_score)
        if len(scored) <= 1 or self._quantile == 0:
            return [], []
        n = math.ceil(len(scored) * self._quantile)   # (Ray's rounding: up)
        n = min(n, len(scored) // 2)
        if n == 0:
            return [], []
        return scored[:n], scored[-n:]

    def _exploit(self, trial_runner, trial: Trial, donor: Trial) -> None:
        new_config = explore(donor.config, self._mutations, self._resample,
                             self._custom_explore)
        logger.info("PBT: %s exploits %s, config %s -> %s", trial, donor, trial.config,
                    new_config)
        self._num_perturbations += 1
        if self._log_config and trial.logdir:
            import json
            import os
            with open(os.path.join(os.path.dirname(trial.logdir),
                                   f"pbt_policy_{trial.trial_id}.txt"), "a") as f:
                f.write(json.dumps([trial.trial_id, donor.trial_id,
                                    trial.last_result.get(self._time_attr),
                                    repr(trial.config), repr(new_config)]) + "\n")
        donor_state = self._state[donor]
        trial_runner.exploit_trial(trial, new_config, donor_state.last_checkpoint)
        self._state[trial].last_score = donor_state.last_score

    def choose_trial_to_run(self, trial_runner) -> Trial | None:
        # Time-multiplex a population larger than the cluster: least progress first.
        candidates = [t for t in trial_runner.get_trials()
                      if t.status in (Trial.PENDING, Trial.PAUSED)
                      and trial_runner.has_resources(t.resources)]
        if not candidates:
            return None
        # Ties (trials paused at the same point) resume in the order they were paused.
        return min(candidates, key=lambda t: (self._state.get(t, _State()).last_perturbation_time,
                                              t._paused_seq))

    def debug_string(self) -> str:
        return f"PopulationBasedTraining: {self._num_perturbations} perturbs"
