"""The search algorithm interface (Ray 0.7's ``SearchAlgorithm``/``SuggestionAlgorithm``)."""
from __future__ import annotations

import copy

from ..sample import generate_variants
from ..trial import Trial

__all__ = ["SearchAlgorithm", "SuggestionAlgorithm", "tell_complete"]


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
    """A searcher that proposes one config at a time.

    Subclasses override ``_suggest(trial_id)``: the parameters of the next
    trial (merged into the experiment's ``config``), or None when it has none
    to give now (the runner asks again later, after results came in).  Trials
    are made ``num_samples`` times per experiment, at most ``max_concurrent``
    unfinished at once; ``on_trial_result``/``on_trial_complete`` tell the
    searcher how each went.

    Args:
        max_concurrent: trials suggested and not yet complete, at most.
    """

    def __init__(self, max_concurrent: int = 10) -> None:
        if not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"max_concurrent must be an int >= 1, got {max_concurrent!r}")
        self._max_concurrent = max_concurrent
        self._experiments: list = []
        self._made = 0
        self._live: set[str] = set()
        self._generator = None

    def _ensure_state(self) -> None:
        # A subclass may not call SuggestionAlgorithm.__init__ (Ray 0.7's took no
        # arguments, and its examples skip it).
        if not hasattr(self, "_live"):
            SuggestionAlgorithm.__init__(self, getattr(self, "_max_concurrent", 10))

    def add_configurations(self, experiments) -> None:
        """Add experiments: an ``Experiment``, a list of them, or ``{name: spec}``."""
        from ..experiment import convert_to_experiment_list
        self._ensure_state()
        self._experiments.extend(convert_to_experiment_list(experiments))

    @property
    def _total(self) -> int:
        return sum(e.num_samples for e in self._experiments)

    def skip(self, count: int) -> None:
        """Resume: ``count`` trials exist already."""
        self._ensure_state()
        self._made = count

    def next_trials(self) -> list[Trial]:
        """The trials to queue now; the batch ends where ``_suggest`` returns None."""
        self._ensure_state()
        trials = []
        while self._made < self._total and len(self._live) < self._max_concurrent:
            trial = self._next_trial()
            if trial is None:
                break
            trials.append(trial)
        return trials

    def _next_trial(self) -> Trial | None:
        index, experiment = self._made, None
        for exp in self._experiments:
            if index < exp.num_samples:
                experiment = exp
                break
            index -= exp.num_samples
        trial_id = Trial.new_id()
        suggested = self._suggest(trial_id)
        if suggested is None:
            return None
        trial = next(self._generate_trials(experiment, suggested, trial_id))
        self._live.add(trial_id)
        return trial

    def _generate_trials(self, experiment, suggested: dict, trial_id: str):
        """The trial of ``suggested`` parameters (over the experiment's config)."""
        config = copy.deepcopy(experiment.config_without_search())
        config.update(copy.deepcopy(suggested))
        _tag, resolved = next(generate_variants(config))
        tag = f"{self._made}_" + ",".join(f"{k}={_short(v)}" for k, v in suggested.items())
        self._made += 1
        yield experiment.make_trial(resolved, tag, trial_id)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False, early_terminated: bool = False) -> None:
        self._ensure_state()
        self._live.discard(trial_id)
        self._on_complete(trial_id, result, error)

    def is_finished(self) -> bool:
        """No trial left to make (some may still be running)."""
        self._ensure_state()
        return self._made >= self._total

    def _suggest(self, trial_id: str) -> dict | None:
        """The next trial's parameters, or None for "not now"."""
        raise NotImplementedError(f"{type(self).__name__} must implement _suggest(trial_id)")

    def _on_complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        pass


def tell_complete(search_alg: SearchAlgorithm, trial_id: str, **how) -> None:
    """Tell ``search_alg`` that a trial ended (``how``: ``result=``, ``error=``),
    freeing its place under ``max_concurrent`` first: a subclass whose
    ``on_trial_complete`` is written as Ray 0.7's, without ``super()`` (0.7's base
    kept no count), must not keep it taken; new trials stopped at the limit."""
    live = getattr(search_alg, "_live", None)
    if live is not None:
        live.discard(trial_id)
    search_alg.on_trial_complete(trial_id, **how)


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)[:20]
