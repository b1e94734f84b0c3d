"""Options of Ray's API that hpc_ray accepts and does not act on, where a given
value asks for something that then does not happen: those warn, saying why."""
from __future__ import annotations

import warnings

from .runtime.head.resources import user_stacklevel

#: Modern Ray options of tasks, actors and ``init()``: a given value warns.
WITHOUT_EFFECT = {
    "runtime_env": "hpc_ray's tasks and actors run in the job's own environment: set "
                   "variables in the job script (every rank inherits them) or in the task, "
                   "and install packages before the job",
    "max_concurrency": "an actor runs one call at a time (a call that waits for a later "
                       "call to the same actor waits for ever); use several actors",
    "namespace": "a job is one namespace: actor names are the job's",
}

#: Ray 0.7 ``init()`` arguments whose value asks for something hpc_ray does not do
#: (connect to a running cluster, keep files or sockets at a path).
WARNED_INIT_ARGS = ("address", "redis_address", "temp_dir", "_temp_dir",
                    "plasma_store_socket_name", "raylet_socket_name", "plasma_directory",
                    "huge_pages")


def warn_without_effect(what: str, why: str) -> None:
    warnings.warn(f"{what} has no effect in hpc_ray: {why}", UserWarning,
                  stacklevel=user_stacklevel())


def warn_given_options(options: dict, what: str) -> None:
    """Warn of the options given to ``@remote`` or ``.options()`` that have no effect."""
    for key, why in WITHOUT_EFFECT.items():
        value = options.get(key)
        if value and not (key == "max_concurrency" and value == 1):
            warn_without_effect(f"{key}={value!r} for {what}", why)


def warn_ignored_init(given: dict) -> None:
    """Warn (on the driver) of ``init()`` arguments that have no effect here."""
    for key in ("runtime_env", "namespace"):
        if given.get(key):
            warn_without_effect(f"init({key}={given[key]!r})", WITHOUT_EFFECT[key])
    ignored = {k: v for k, v in given.items() if k in WARNED_INIT_ARGS and v}
    if not ignored:
        return
    what = ", ".join(f"{k}={v!r}" for k, v in ignored.items())
    warnings.warn(f"init({what}): ignored. hpc_ray connects to no running cluster (the "
                  f"mpiexec or Slurm job, or the ranks init() starts, is the cluster) and "
                  f"keeps no Ray files, sockets or plasma directory.",
                  stacklevel=user_stacklevel())
