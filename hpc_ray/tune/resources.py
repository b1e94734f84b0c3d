"""``Resources``: what a trial reserves (Ray 0.7's ``ray.tune.resources``).

A trial's resources are kept as one flat dict: ``cpu``, ``gpu``, ``extra_cpu``,
``extra_gpu``, each custom resource by its name, and each extra custom resource
as ``extra_custom/<name>``.  The trial's actor gets ``cpu``, ``gpu`` and the
custom resources; the ``extra_*`` part is held for the tasks and actors the
trainable starts itself.
"""
from __future__ import annotations

import collections
from typing import Any

__all__ = ["Resources", "normalize", "actor_options", "demand", "held", "fits", "shape",
           "resource_help"]

_BUILTIN = ("cpu", "gpu", "extra_cpu", "extra_gpu")
_EXTRA_CUSTOM = "extra_custom/"
#: The keys ``resources_per_trial`` takes besides custom resources' names
#: given through ``custom_resources``.
VALID_KEYS = _BUILTIN + ("custom_resources", "extra_custom_resources")


class Resources(collections.namedtuple(
        "Resources", ["cpu", "gpu", "extra_cpu", "extra_gpu", "custom_resources",
                      "extra_custom_resources"], defaults=(0, 0, None, None))):
    """Resources of a trial: what ``Trainable.default_resource_request`` returns.

    Args:
        cpu: CPUs of the trial's actor.
        gpu: GPUs of the trial's actor.
        extra_cpu: CPUs held for the tasks and actors the trainable starts.
        extra_gpu: GPUs held likewise.
        custom_resources: ``{name: amount}`` of the trial's actor.
        extra_custom_resources: ``{name: amount}`` held likewise.
    """

    __slots__ = ()

    def cpu_total(self) -> float:
        return self.cpu + self.extra_cpu

    def gpu_total(self) -> float:
        return self.gpu + self.extra_gpu

    def get_res_total(self, name: str) -> float:
        return ((self.custom_resources or {}).get(name, 0)
                + (self.extra_custom_resources or {}).get(name, 0))

    def summary_string(self) -> str:
        text = f"{self.cpu_total():g} CPUs, {self.gpu_total():g} GPUs"
        names = sorted(set(self.custom_resources or {}) | set(self.extra_custom_resources or {}))
        return text + "".join(f", {self.get_res_total(n):g} {n}" for n in names)


def normalize(given: Any) -> dict:
    """``resources_per_trial`` (a dict or a ``Resources``) as the flat dict."""
    if isinstance(given, Resources):
        given = given._asdict()
    if not isinstance(given, dict):
        raise TypeError(f"resources_per_trial must be a dict or a tune.resources.Resources, "
                        f"got {type(given).__name__}")
    flat: dict = {"cpu": 1, "gpu": 0}
    for key, value in given.items():
        if key in ("custom_resources", "extra_custom_resources"):
            if value is None:
                continue
            if not isinstance(value, dict):
                raise TypeError(f"resources_per_trial[{key!r}] must be a dict "
                                f"{{name: amount}}, got {type(value).__name__}")
            prefix = "" if key == "custom_resources" else _EXTRA_CUSTOM
            for name, amount in value.items():
                flat[prefix + str(name)] = amount
        elif key in ("CPU", "GPU"):
            flat[key.lower()] = value
        else:
            flat[key] = value  # a custom resource by name, as 0.7 also took it
    for key, value in flat.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"resources_per_trial[{key!r}] must be a number >= 0, "
                             f"got {value!r}")
    return flat


def actor_options(resources: dict) -> dict:
    """What the trial's actor asks for (``options()`` of the actor class)."""
    custom = {k: v for k, v in resources.items()
              if k not in _BUILTIN and not k.startswith(_EXTRA_CUSTOM) and v}
    options = {"num_cpus": resources.get("cpu", 1), "num_gpus": resources.get("gpu", 0)}
    if custom:
        options["resources"] = custom
    return options


def demand(resources: dict) -> dict:
    """What a trial holds, in the cluster's resource names."""
    need = {"CPU": resources.get("cpu", 1) + resources.get("extra_cpu", 0),
            "GPU": resources.get("gpu", 0) + resources.get("extra_gpu", 0)}
    for key, value in resources.items():
        if key in _BUILTIN:
            continue
        name = key[len(_EXTRA_CUSTOM):] if key.startswith(_EXTRA_CUSTOM) else key
        need[name] = need.get(name, 0) + value
    return need


def held(reservations) -> dict:
    """What the given trials' reservations (``resources_per_trial`` dicts) hold
    together, in the cluster's resource names."""
    used: dict[str, float] = {}
    for resources in reservations:
        for name, v in demand(resources).items():
            used[name] = used.get(name, 0.0) + v
    return used


def fits(resources: dict, used: dict, total: dict) -> bool:
    """Whether a trial asking ``resources`` fits beside ``used`` within ``total``."""
    return all(not v or used.get(name, 0.0) + v <= total.get(name, 0.0) + 1e-9
               for name, v in demand(resources).items())


def shape(resources: dict) -> tuple:
    return tuple(sorted((k, float(v)) for k, v in resources.items()))


def resource_help(trainable_name: str, config: dict) -> str:
    """How a trial of ``trainable_name`` asks for less: the trainable's own
    ``resource_help`` (RLlib's names ``num_workers``), else ``resources_per_trial``."""
    from .error import TuneError
    from .registry import get_trainable
    try:
        cls = get_trainable(trainable_name)
        text = cls.resource_help(config) if isinstance(cls, type) else ""
    except (TuneError, AttributeError):
        text = ""
    return f", or ask for less: {text.strip()}" if text else " or lower resources_per_trial"
