"""``HyperOptSearch``: HyperOpt's TPE as a Tune search algorithm (Ray 0.7's API).

HyperOpt is optional: ``pip install 'hpc_ray[tune-hyperopt]'``. The space is a
HyperOpt space (``hp.uniform``, ``hp.choice``, ... in a dict); each trial is a
HyperOpt trial document asked of ``tpe.suggest`` when a slot is free and given
its loss when it ends: the last result's ``metric``, negated for ``mode="max"``.

    from hyperopt import hp
    space = {"lr": hp.loguniform("lr", -10, -1), "momentum": hp.uniform("momentum", 0.1, 0.9)}
    algo = HyperOptSearch(space, max_concurrent=4, metric="mean_accuracy", mode="max")
    tune.run(train, num_samples=20, search_alg=algo)
"""
from __future__ import annotations

import copy

from .search import SuggestionAlgorithm

__all__ = ["HyperOptSearch"]

_INSTALL = ("HyperOptSearch needs the hyperopt package, which is not installed: "
            "pip install 'hpc_ray[tune-hyperopt]' (or pip install hyperopt)")


def _import_hyperopt():
    try:
        import hyperopt
        import hyperopt.pyll
        from hyperopt.fmin import generate_trials_to_calculate
    except ImportError as err:
        raise ImportError(_INSTALL) from err
    return hyperopt, generate_trials_to_calculate


class HyperOptSearch(SuggestionAlgorithm):
    """Suggest configs with HyperOpt's Tree-structured Parzen Estimators.

    Args:
        space: a HyperOpt search space (a dict of ``hp.*`` expressions).
        max_concurrent: trials suggested and not yet complete, at most.
        reward_attr: Ray 0.7's older way to name the metric (maximized).
        metric: the result field to optimize; mode: "min" or "max".
        points_to_evaluate: configs to try first, as HyperOpt names them (a
            ``hp.choice`` by the index of its option).
        n_initial_points: random suggestions before TPE models the results.
        random_state_seed: seed of the suggestions.
        use_early_stopped_trials: Ray 0.7's option of its searchers; trials a
            scheduler stopped early count with their last result here.
    """

    def __init__(self, space: dict, max_concurrent: int = 10, reward_attr: str | None = None,
                 metric: str = "episode_reward_mean", mode: str = "max",
                 points_to_evaluate: list | None = None, n_initial_points: int = 20,
                 random_state_seed: int | None = None,
                 use_early_stopped_trials: bool = True) -> None:
        hpo, trials_of_points = _import_hyperopt()
        if reward_attr is not None:
            metric, mode = reward_attr, "max"
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        super().__init__(max_concurrent=max_concurrent)
        import numpy as np
        self._hpo = hpo
        self._metric = metric
        self._sign = -1.0 if mode == "max" else 1.0      # HyperOpt minimizes a loss
        self._domain = hpo.Domain(lambda config: config, copy.deepcopy(space))
        points = list(points_to_evaluate or [])
        self._docs = trials_of_points(points) if points else hpo.Trials()
        self._docs.refresh()
        self._given = len(points)                         # given points not suggested yet
        self._n_initial = n_initial_points
        self._rng = np.random.default_rng(random_state_seed)
        self._doc_of: dict[str, dict] = {}                # trial id -> its HyperOpt trial

    def _suggest(self, trial_id: str) -> dict:
        hpo, docs = self._hpo, self._docs
        if self._given:
            doc = docs.trials[len(docs.trials) - self._given]
            self._given -= 1
        else:
            ids = docs.new_trial_ids(1)
            docs.refresh()
            doc = hpo.tpe.suggest(ids, self._domain, docs, int(self._rng.integers(2 ** 31 - 1)),
                                  n_startup_jobs=self._n_initial)[0]
            docs.insert_trial_docs([doc])
            docs.refresh()
        self._doc_of[trial_id] = doc
        # The document names choices by index: evaluate the space on it.
        memo = self._domain.memo_from_config(hpo.base.spec_from_misc(doc["misc"]))
        ctrl = hpo.base.Ctrl(docs, current_trial=doc)
        hpo.utils.use_obj_for_literal_in_memo(self._domain.expr, ctrl, hpo.base.Ctrl, memo)
        return copy.deepcopy(hpo.pyll.rec_eval(self._domain.expr, memo=memo))

    def _on_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        doc = self._doc_of.pop(trial_id, None)
        if doc is None:
            return
        hpo = self._hpo
        doc["refresh_time"] = hpo.utils.coarse_utcnow()
        value = (result or {}).get(self._metric)
        if error or not isinstance(value, (int, float)):
            doc["state"] = hpo.base.JOB_STATE_ERROR
            doc["misc"]["error"] = ("TuneError", f"the trial ended without {self._metric!r}"
                                    if not error else "the trial failed")
        else:
            doc["state"] = hpo.base.JOB_STATE_DONE
            doc["result"] = {"loss": self._sign * value, "status": hpo.STATUS_OK}
        self._docs.refresh()
