"""The scheduler interface and FIFO, the default.

The runner calls the hooks below; ``on_trial_result`` answers CONTINUE, PAUSE
(checkpoint the trial and give its resources back) or STOP.
"""
from __future__ import annotations

from ..trial import Trial

__all__ = ["TrialScheduler", "FIFOScheduler"]


class TrialScheduler:
    """Interface for implementing a trial scheduler."""

    _supports_buffered_results = False
    #: Whether it pauses trials: a paused trial is checkpointed, so its
    #: trainable must be a class (function trainables cannot be checkpointed).
    pauses_trials = False

    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"

    def on_trial_add(self, trial_runner, trial: Trial) -> None:
        """Called when a trial is added to the runner."""

    def on_trial_error(self, trial_runner, trial: Trial) -> None:
        """Called when a running trial failed for good."""

    def on_trial_result(self, trial_runner, trial: Trial, result: dict) -> str:
        """Called on each result of a running trial; returns CONTINUE, PAUSE or STOP."""
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, trial_runner, trial: Trial, result: dict) -> None:
        """Called when a running trial completed (done, stopped by a criterion)."""

    def on_trial_remove(self, trial_runner, trial: Trial) -> None:
        """Called when a paused or pending trial is stopped."""

    def choose_trial_to_run(self, trial_runner) -> Trial | None:
        """The next trial to start among the pending and paused ones, or None."""
        raise NotImplementedError

    def debug_string(self) -> str:
        return ""


def paused_in_order(trials) -> list[Trial]:
    """The paused trials, in the order they were paused (the oldest resumes first)."""
    return sorted((t for t in trials if t.status == Trial.PAUSED),
                  key=lambda t: getattr(t, "_paused_seq", 0))


def _metric_sign(mode: str) -> float:
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
    return 1.0 if mode == "max" else -1.0


def _resolve_metric(metric: str, reward_attr: str | None) -> str:
    # Ray 0.7's deprecated reward_attr wins (and means mode="max").
    return reward_attr if reward_attr is not None else metric


class FIFOScheduler(TrialScheduler):
    """Runs trials in the order they were added; never stops one early."""

    #: Decides nothing per result, so a trial may run several iterations per
    #: call (subclasses that do decide set this back to False).
    _supports_buffered_results = True

    def choose_trial_to_run(self, trial_runner) -> Trial | None:
        # One resources check per distinct request: thousands of pending trials
        # usually ask for the same thing.
        fits: dict[tuple, bool] = {}
        trials = getattr(trial_runner, "unfinished_trials", trial_runner.get_trials)()
        for candidates in ((t for t in trials if t.status == Trial.PENDING),
                           paused_in_order(trials)):
            for trial in candidates:
                key = tuple(sorted(trial.resources.items()))
                if key not in fits:
                    fits[key] = trial_runner.has_resources(trial.resources)
                if fits[key]:
                    return trial
        return None

    def debug_string(self) -> str:
        return "Using FIFO scheduling algorithm."
