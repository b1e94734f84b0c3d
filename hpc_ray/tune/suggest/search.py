"""The search algorithm interface (Ray 0.7's ``SearchAlgorithm``/``SuggestionAlgorithm``)."""
from __future__ import annotations

import copy

from ..sample import generate_variants
from ..trial import Trial

__all__ = ["SearchAlgorithm", "SuggestionAlgorithm"]


class SearchAlgorithm:
    """Produces trials; hears about their results."""

    def add_configurations(self, experiments) -> None:
        raise NotImplementedError

    def next_trials(self) -> list[Trial]:
        return []

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        pass

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False, early_terminated: bool = False) -> None:
        pass

    def is_finished(self) -> bool:
        return True

    def set_finished(self) -> None:
        pass


class SuggestionAlgorithm(SearchAlgorithm):
    """A searcher that proposes one config at a time (``_suggest(trial_id)``),
    at most ``max_concurrent`` unfinished at once, ``num_samples`` in all."""

    def __init__(self, max_concurrent: int = 10) -> None:
        self._max_concurrent = max_concurrent
        self._experiment = None
        self._total = 0
        self._made = 0
        self._live: set[str] = set()

    def add_configurations(self, experiments) -> None:
        (self._experiment,) = experiments if isinstance(experiments, list) else [experiments]
        self._total = self._experiment.num_samples

    def skip(self, count: int) -> None:
        """Resume: ``count`` trials exist already."""
        self._made = count

    def next_trials(self) -> list[Trial]:
        trials = []
        while self._made < self._total and len(self._live) < self._max_concurrent:
            trial_id = Trial.new_id()
            suggested = self._suggest(trial_id)
            if suggested is None:
                break
            config = copy.deepcopy(self._experiment.config_without_search())
            config.update(suggested)
            tag, resolved = next(generate_variants(config))
            tag = f"{self._made}_" + ",".join(f"{k}={_short(v)}" for k, v in suggested.items())
            trials.append(self._experiment.make_trial(resolved, tag, trial_id))
            self._made += 1
            self._live.add(trial_id)
        return trials

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False, early_terminated: bool = False) -> None:
        self._live.discard(trial_id)
        self._on_complete(trial_id, result, error)

    def is_finished(self) -> bool:
        return self._made >= self._total

    def _suggest(self, trial_id: str) -> dict | None:
        raise NotImplementedError

    def _on_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        pass


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)[:20]
