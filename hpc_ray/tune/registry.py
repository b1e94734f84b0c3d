"""``register_trainable``: trainables by name (for lambdas and ``run("name")``)."""
from __future__ import annotations

from typing import Callable

from .error import TuneError

__all__ = ["register_trainable", "get_trainable", "register_env"]

_TRAINABLES: dict[str, object] = {}
_ENVS: dict[str, Callable] = {}


def register_trainable(name: str, trainable) -> None:
    """Register a function or ``tune.Trainable`` subclass under ``name``.

    Args:
        name: the name to pass to ``tune.run``.
        trainable: a function ``f(config, reporter)`` or a ``Trainable`` subclass.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not callable(trainable):
        raise TypeError(f"trainable must be a function or a Trainable subclass, got {trainable!r}")
    _TRAINABLES[name] = trainable


def get_trainable(name: str):
    if name not in _TRAINABLES:
        # RLlib's trainers ("PPO", "A3C"...) register themselves on import.
        import importlib
        try:
            importlib.import_module("hpc_ray.rllib")
        except ImportError:
            pass
    try:
        return _TRAINABLES[name]
    except KeyError:
        raise TuneError(f"unknown trainable {name!r} (registered: {sorted(_TRAINABLES)}); "
                        f"call tune.register_trainable({name!r}, ...) first") from None


def register_env(name: str, env_creator: Callable) -> None:
    """Register an environment creator under ``name`` (for ``hpc_ray.rllib``).

    The registration reaches every worker process of the job (rollout workers
    and trial actors make the env there), through ``run_function_on_all_workers``.
    """
    if not callable(env_creator):
        raise TypeError(f"env_creator must be callable, got {env_creator!r}")
    from .. import api

    def install(_info=None, _name=name, _creator=env_creator):
        # Through the module: cloudpickle would ship a copy of a global dict.
        import importlib
        importlib.import_module("hpc_ray.tune.registry")._ENVS[_name] = _creator
    install()
    api.run_function_on_all_workers(install)
