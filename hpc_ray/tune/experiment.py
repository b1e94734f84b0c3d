"""``Experiment``: one experiment's specification (Ray 0.7's ``tune.Experiment``)."""
from __future__ import annotations

import os
from typing import Any

from .error import TuneError
from .registry import get_trainable
from .trial import Trial

__all__ = ["Experiment", "DEFAULT_RESULTS_DIR"]

DEFAULT_RESULTS_DIR = os.path.expanduser(os.environ.get("TUNE_RESULT_DIR", "~/ray_results"))


def _name_of(trainable) -> str:
    return getattr(trainable, "__name__", None) or type(trainable).__name__


class Experiment:
    """Tracks an experiment's specification.

    Args follow ``tune.run``; ``run`` is the trainable (function, class or a
    registered name).
    """

    def __init__(self, name: str | None, run, stop: dict | None = None,
                 config: dict | None = None, resources_per_trial: dict | None = None,
                 num_samples: int = 1, local_dir: str | None = None, upload_dir=None,
                 trial_name_creator=None, loggers=None, sync_function=None,
                 checkpoint_freq: int = 0, checkpoint_at_end: bool = False,
                 keep_checkpoints_num: int | None = None, checkpoint_score_attr=None,
                 export_formats=None, max_failures: int = 3, restore: str | None = None,
                 repeat: int | None = None, trial_resources: dict | None = None,
                 custom_loggers=None) -> None:
        if isinstance(run, str):
            self.trainable_name = run
            run = get_trainable(run)
        else:
            self.trainable_name = _name_of(run)
        self.run = run
        if repeat is not None:
            num_samples = repeat
        if trial_resources is not None and resources_per_trial is None:
            resources_per_trial = trial_resources
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
        if checkpoint_freq < 0:
            raise ValueError(f"checkpoint_freq must be >= 0, got {checkpoint_freq!r}")
        if stop is not None and not (isinstance(stop, dict) or callable(stop)):
            raise TypeError(f"stop must be a dict or a function, got {type(stop).__name__}")
        self.name = name or self.trainable_name
        self.stop = stop or {}
        self.config = config or {}
        self.resources_per_trial = _resources(run, self.config, resources_per_trial)
        self.num_samples = num_samples
        self.local_dir = os.path.abspath(os.path.expanduser(local_dir or DEFAULT_RESULTS_DIR))
        self.trial_name_creator = getattr(trial_name_creator, "func", trial_name_creator)
        self.checkpoint_freq = checkpoint_freq
        self.checkpoint_at_end = checkpoint_at_end
        self.keep_checkpoints_num = keep_checkpoints_num
        self.max_failures = max_failures
        self.restore = restore

    @property
    def experiment_dir(self) -> str:
        return os.path.join(self.local_dir, self.name)

    @classmethod
    def from_json(cls, name: str, spec: dict) -> "Experiment":
        spec = dict(spec)
        if "run" not in spec:
            raise TuneError(f"experiment {name!r} has no 'run' entry")
        if "env" in spec:
            # RLlib's experiment files name the env beside run (Ray 0.7).
            spec["config"] = dict(spec.get("config") or {}, env=spec.pop("env"))
        return cls(name, **spec)

    def config_without_search(self) -> dict:
        return dict(self.config)

    def make_trial(self, config: dict, tag: str, trial_id: str | None = None) -> Trial:
        return Trial(self.trainable_name, config, trial_id, tag, self.resources_per_trial,
                     self.stop, self.checkpoint_freq, self.checkpoint_at_end,
                     self.keep_checkpoints_num, self.max_failures, self.experiment_dir,
                     self.trial_name_creator)


def _resources(run: Any, config: dict, given: dict | None) -> dict:
    if given is None:
        request = getattr(run, "default_resource_request", None)
        given = request(config) if callable(request) and isinstance(run, type) else None
        given = given or {"cpu": 1, "gpu": 0}
    if not isinstance(given, dict):
        raise TypeError(f"resources_per_trial must be a dict, got {type(given).__name__}")
    resources = {str(k).lower() if k in ("CPU", "GPU") else k: v for k, v in given.items()}
    resources.setdefault("cpu", 1)
    resources.setdefault("gpu", 0)
    for key, value in resources.items():
        if not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"resources_per_trial[{key!r}] must be a number >= 0, got {value!r}")
    return resources


def convert_to_experiment_list(experiments) -> list[Experiment]:
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, dict):
        return [Experiment.from_json(name, spec) for name, spec in experiments.items()]
    if isinstance(experiments, (list, tuple)) and all(isinstance(e, Experiment) for e in experiments):
        return list(experiments)
    raise TuneError(f"experiments must be an Experiment, a list of them or a dict of specs, "
                    f"got {type(experiments).__name__}")
