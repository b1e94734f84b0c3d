"""``Experiment``: one experiment's specification (Ray 0.7's ``tune.Experiment``)."""
from __future__ import annotations

import inspect
import os
import warnings
from typing import Any

from ..runtime.head.resources import user_stacklevel
from . import resources as _res
from .error import TuneError
from .registry import get_trainable
from .result import DEFAULT_RESULTS_DIR
from .sample import spec_of
from .trainable import Trainable
from .trial import Trial

__all__ = ["Experiment", "DEFAULT_RESULTS_DIR", "convert_to_experiment_list"]


#: The keys of an experiment spec (``run_experiments({"name": spec})``): the
#: arguments of ``Experiment`` (``env`` is 0.7's shorthand for ``config["env"]``).
SPEC_KEYS = ("run", "stop", "config", "resources_per_trial", "num_samples", "local_dir",
             "upload_dir", "trial_name_creator", "loggers", "sync_function",
             "checkpoint_freq", "checkpoint_at_end", "keep_checkpoints_num",
             "checkpoint_score_attr", "export_formats", "max_failures", "restore",
             "repeat", "trial_resources", "custom_loggers", "env")


def _name_of(trainable) -> str:
    return getattr(trainable, "__name__", None) or type(trainable).__name__


def check_trainable(run: Any) -> None:
    """A function, a ``Trainable`` subclass or a name; anything else is a TuneError."""
    if isinstance(run, Trainable):
        raise TuneError(f"run must be a Trainable class, not an instance of it: pass "
                        f"{type(run).__name__}, not {type(run).__name__}(...)")
    if isinstance(run, type):
        if not issubclass(run, Trainable):
            raise TuneError(f"a trainable class must subclass tune.Trainable, got {run!r}")
    elif not (isinstance(run, str) or callable(run)):
        raise TuneError(f"run must be a function, a tune.Trainable subclass or a "
                        f"registered name, got {type(run).__name__}")


def check_stop(stop: Any) -> None:
    """``stop`` is a dict or a function ``f(trial_id, result) -> bool``."""
    if stop is None or isinstance(stop, dict):
        return
    if not callable(stop):
        raise ValueError(f"stop must be a dict or a function f(trial_id, result) -> bool, "
                         f"got {type(stop).__name__}")
    try:
        inspect.signature(stop).bind("trial_id", {})
    except TypeError:
        raise ValueError(f"a stop function must take (trial_id, result), got "
                         f"{getattr(stop, '__name__', stop)}{inspect.signature(stop)}") from None
    except ValueError:
        pass  # a builtin without a signature: trust it


class Experiment:
    """Tracks an experiment's specification.

    Args follow ``tune.run``; ``run`` is the trainable (function, class or a
    registered name).  A name is looked up when the experiment runs, so it may
    be registered after the ``Experiment`` is made.
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
        check_trainable(run)
        self._run = run
        self.trainable_name = run if isinstance(run, str) else _name_of(run)
        if repeat is not None:
            num_samples = repeat
        if trial_resources is not None and resources_per_trial is None:
            resources_per_trial = trial_resources
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
        if checkpoint_freq < 0:
            raise ValueError(f"checkpoint_freq must be >= 0, got {checkpoint_freq!r}")
        check_stop(stop)
        if upload_dir:
            warn_ignored("upload_dir", "results stay in local_dir; copy them yourself "
                         "(rsync, or a job step after tune.run)")
        if sync_function is not None:
            warn_ignored("sync_function", "nothing is uploaded, so nothing is synced")
        for logger in list(loggers or ()) + list(custom_loggers or ()):
            if not isinstance(logger, type):
                raise TypeError(f"loggers must be tune.logger.Logger subclasses, "
                                f"got {logger!r}")
        self.name = name or self.trainable_name
        self.stop = stop or {}
        self.config = config or {}
        self._given_resources = resources_per_trial
        if resources_per_trial is not None:
            # A bad value fails here, not at run; a function of the trial's
            # config (``lambda spec: spec.config.num_gpus``) is checked per trial.
            _res.normalize(_with_placeholders(resources_per_trial))
        self.num_samples = num_samples
        self.local_dir = os.path.abspath(os.path.expanduser(local_dir or DEFAULT_RESULTS_DIR))
        self.trial_name_creator = getattr(trial_name_creator, "func", trial_name_creator)
        self.loggers = tuple(loggers or ()) + tuple(custom_loggers or ())
        self.checkpoint_freq = checkpoint_freq
        self.checkpoint_at_end = checkpoint_at_end
        self.keep_checkpoints_num = keep_checkpoints_num
        if checkpoint_score_attr is not None and not isinstance(checkpoint_score_attr, str):
            raise ValueError(f"checkpoint_score_attr must be a result key (or 'min-<key>'), "
                             f"got {checkpoint_score_attr!r}")
        self.checkpoint_score_attr = checkpoint_score_attr
        self.export_formats = list(export_formats or [])
        self.max_failures = max_failures
        self.restore = restore
        self._resources: dict | None = None

    @property
    def run(self):
        """The trainable (a registered name is looked up now)."""
        if isinstance(self._run, str):
            run = get_trainable(self._run)
            check_trainable(run)
            return run
        return self._run

    @property
    def resources_per_trial(self) -> dict:
        if self._resources is None:
            self._resources = _resources(self.run, self.config, self._given_resources)
        return self._resources

    @property
    def spec(self) -> dict:
        """The experiment as a spec dict (``run_experiments({name: spec})``)."""
        return {"run": self._run, "stop": self.stop, "config": self.config,
                "resources_per_trial": self._given_resources,
                "num_samples": self.num_samples, "local_dir": self.local_dir,
                "trial_name_creator": self.trial_name_creator, "loggers": self.loggers,
                "checkpoint_freq": self.checkpoint_freq,
                "checkpoint_at_end": self.checkpoint_at_end,
                "keep_checkpoints_num": self.keep_checkpoints_num,
                "checkpoint_score_attr": self.checkpoint_score_attr,
                "export_formats": self.export_formats, "max_failures": self.max_failures,
                "restore": self.restore}

    @property
    def experiment_dir(self) -> str:
        return os.path.join(self.local_dir, self.name)

    @classmethod
    def from_json(cls, name: str, spec: dict) -> "Experiment":
        """An experiment from a spec dict (``run_experiments({name: spec})``)."""
        if not isinstance(spec, dict):
            raise TuneError(f"experiment {name!r}: the spec must be a dict, "
                            f"got {type(spec).__name__}")
        spec = dict(spec)
        if "run" not in spec:
            raise TuneError(f"experiment {name!r} has no 'run' entry: give the trainable "
                            f"as spec['run']")
        unknown = sorted(set(spec) - set(SPEC_KEYS))
        if unknown:
            raise TuneError(f"experiment {name!r} has unknown key(s) {unknown} "
                            f"(valid: {sorted(SPEC_KEYS)})")
        if "env" in spec:  # Ray 0.7: a top-level env is config["env"]
            spec["config"] = dict(spec.get("config") or {}, env=spec.pop("env"))
        return cls(name, **spec)

    def config_without_search(self) -> dict:
        return dict(self.config)

    def make_trial(self, config: dict, tag: str, trial_id: str | None = None) -> Trial:
        resources = self.resources_per_trial
        if _has_functions(self._given_resources):
            resources = _res.normalize(_resolved(self._given_resources, config))
        return Trial(self.trainable_name, config, trial_id, tag, resources,
                     self.stop, self.checkpoint_freq, self.checkpoint_at_end,
                     self.keep_checkpoints_num, self.max_failures, self.experiment_dir,
                     self.trial_name_creator, loggers=self.loggers,
                     export_formats=self.export_formats,
                     checkpoint_score_attr=self.checkpoint_score_attr)


def warn_ignored(option: str, why: str) -> None:
    """A Ray 0.7 option hpc_ray accepts and does not act on: say so, once."""
    warnings.warn(f"{option} has no effect in hpc_ray's Tune: {why}", UserWarning,
                  stacklevel=user_stacklevel())


def _has_functions(given: Any) -> bool:
    """Whether ``resources_per_trial`` has values that are functions of a trial's
    config, as Ray 0.7's RLlib docs give them (``"gpu": lambda spec:
    spec.config.num_gpus``)."""
    return isinstance(given, dict) and any(callable(v) for v in given.values())


def _resolved(given: dict, config: dict) -> dict:
    """``given`` with each function called on ``spec`` (``spec.config``: the trial's)."""
    spec = spec_of(config)
    return {k: v(spec) if callable(v) else v for k, v in given.items()}


def _with_placeholders(given: Any) -> Any:
    """``given`` with 0 for its functions (their values are known per trial)."""
    if not _has_functions(given):
        return given
    return {k: 0 if callable(v) else v for k, v in given.items()}


def _resources(run: Any, config: dict, given: Any) -> dict:
    request = getattr(run, "default_resource_request", None)
    default = request(config) if callable(request) and isinstance(run, type) else None
    if given is not None and default:
        # Ray 0.7's Trial.__init__: the trainable sizes itself (RLlib's trainers
        # from num_workers...); a second answer would be ignored or conflict.
        raise ValueError(f"Resources for {run} have been automatically set to {default} "
                         f"by its `default_resource_request()` method. Please clear the "
                         f"`resources_per_trial` option.")
    if _has_functions(given):
        given = _with_placeholders(given)
    return _res.normalize(given if given is not None else default or {"cpu": 1, "gpu": 0})


def convert_to_experiment_list(experiments) -> list[Experiment]:
    """An ``Experiment``, a list of them, or a dict ``{name: spec}`` as a list."""
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, dict):
        return [Experiment.from_json(name, spec) for name, spec in experiments.items()]
    if isinstance(experiments, (list, tuple)) and all(isinstance(e, Experiment) for e in experiments):
        return list(experiments)
    raise TuneError(f"experiments must be an Experiment, a list of them or a dict of specs, "
                    f"got {type(experiments).__name__}")
