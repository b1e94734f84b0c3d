"""``OptunaSearch``: Optuna's samplers (TPE by default) as a Tune search algorithm.

Optuna is optional: ``pip install 'hpc_ray[tune-optuna]'``.  Each trial is an
Optuna trial asked for when a slot is free and told its result when it ends
(the best value of ``metric`` it reported).
"""
from __future__ import annotations

from .search import SuggestionAlgorithm

__all__ = ["OptunaSearch"]

_INSTALL = ("OptunaSearch needs the optuna package, which is not installed: "
            "pip install 'hpc_ray[tune-optuna]' (or pip install optuna)")


def _import_optuna():
    try:
        import optuna
    except ImportError as err:
        raise ImportError(_INSTALL) from err
    return optuna


class OptunaSearch(SuggestionAlgorithm):
    """Suggest configs with an Optuna study.

    Args:
        space: ``{name: spec}`` where spec is ``("uniform", low, high)``,
            ``("loguniform", low, high)``, ``("int", low, high)`` or
            ``("categorical", [choices])``; ``tune.uniform``/``loguniform``/
            ``choice``/``randint`` values work too.
        metric: the result field to optimize.
        mode: "min" or "max".
        sampler: an ``optuna.samplers`` instance (default TPE, seeded by ``seed``).
        max_concurrent: trials asked for before earlier ones are told.
        seed: seed of the default sampler.
    """

    def __init__(self, space: dict, metric: str = "episode_reward_mean", mode: str = "max",
                 sampler=None, max_concurrent: int = 10, seed: int | None = None) -> None:
        optuna = _import_optuna()
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        super().__init__(max_concurrent=max_concurrent)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._space = {name: _distribution(optuna, spec) for name, spec in space.items()}
        self._metric = metric
        self._mode = mode
        self._study = optuna.create_study(
            direction="maximize" if mode == "max" else "minimize",
            sampler=sampler or optuna.samplers.TPESampler(seed=seed))
        self._ot_trials: dict = {}
        self._best: dict[str, float] = {}

    def _suggest(self, trial_id: str) -> dict:
        ot = self._study.ask(self._space)
        self._ot_trials[trial_id] = ot
        return dict(ot.params)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        value = result.get(self._metric)
        if isinstance(value, (int, float)):
            old = self._best.get(trial_id)
            better = old is None or (value > old if self._mode == "max" else value < old)
            if better:
                self._best[trial_id] = value

    def _on_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        ot = self._ot_trials.pop(trial_id, None)
        if ot is None:
            return
        value = self._best.pop(trial_id, None)
        if error or value is None:
            self._study.tell(ot, state=self._optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(ot, value)


def _distribution(optuna, spec):
    from ..sample import _Choice, _Randint, _Uniform
    d = optuna.distributions
    if isinstance(spec, _Uniform):
        return d.FloatDistribution(spec.low, spec.high, log=spec.log)
    if isinstance(spec, _Randint):
        return d.IntDistribution(spec.low, spec.high - 1)
    if isinstance(spec, _Choice):
        return d.CategoricalDistribution(spec.categories)
    if isinstance(spec, d.BaseDistribution):
        return spec
    kind, *args = spec
    if kind == "uniform":
        return d.FloatDistribution(args[0], args[1])
    if kind == "loguniform":
        return d.FloatDistribution(args[0], args[1], log=True)
    if kind == "int":
        return d.IntDistribution(args[0], args[1])
    if kind == "categorical":
        return d.CategoricalDistribution(args[0])
    raise ValueError(f"unknown search space entry {spec!r} (known: uniform, loguniform, "
                     f"int, categorical, or a tune sampler)")
