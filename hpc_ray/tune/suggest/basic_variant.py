"""The default search: grid search × ``num_samples`` random samples, all up front."""
from __future__ import annotations

from ..sample import generate_variants
from ..trial import Trial
from .search import SearchAlgorithm

__all__ = ["BasicVariantGenerator"]


class BasicVariantGenerator(SearchAlgorithm):
    """Generates every trial of the experiments: each grid point ``num_samples`` times.

    All trials are created at the start, so the experiment state file lists
    every one of them: a resumed experiment can lose none.
    """

    def __init__(self, shuffle: bool = False) -> None:
        self._shuffle = shuffle
        self._pending: list[Trial] = []
        self._experiments = []

    def add_configurations(self, experiments) -> None:
        """Add the trials of ``experiments``: an ``Experiment``, a list of them,
        or a dict ``{name: spec}`` as ``run_experiments`` takes."""
        from ..experiment import convert_to_experiment_list
        for exp in convert_to_experiment_list(experiments):
            self._experiments.append(exp)
            index = 0
            for _ in range(exp.num_samples):
                for tag, config in generate_variants(exp.config):
                    trial_id = Trial.new_id()
                    self._pending.append(exp.make_trial(config, f"{index}_{tag}" if tag
                                                        else str(index), trial_id))
                    index += 1
        if self._shuffle:
            import random
            random.shuffle(self._pending)

    def skip_all(self) -> None:
        """Resume: every trial is in the state file already."""
        self._pending.clear()

    def next_trials(self) -> list[Trial]:
        trials, self._pending = self._pending, []
        return trials

    def is_finished(self) -> bool:
        return not self._pending
