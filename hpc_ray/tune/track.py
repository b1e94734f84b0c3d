"""``tune.track`` (Ray 0.7.2): metrics from a function trainable that takes only
its config.

    def train(config):
        for step in range(10):
            tune.track.log(mean_accuracy=step * config["lr"])
"""
from __future__ import annotations

from .error import TuneError
from .function_runner import _current, report

__all__ = ["log", "trial_dir"]


def log(**metrics) -> None:
    """Report ``metrics`` as the trial's next result (``tune.report``)."""
    report(**metrics)


def trial_dir() -> str:
    """The directory of the running trial's results and checkpoints."""
    reporter = getattr(_current, "reporter", None)
    if reporter is None:
        raise TuneError("tune.track.trial_dir() called outside a trial run by tune.run")
    return reporter.logdir
