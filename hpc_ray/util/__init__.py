"""``ray.util`` of Ray 0.8 and later, as far as hpc_ray has it: ``ActorPool``.

``ray.util.collective`` is ``hpc_ray.collective`` here (its own API); the
queue, multiprocessing pool and placement groups are not provided.
"""
from .actor_pool import ActorPool

__all__ = ["ActorPool"]

_NOT_PROVIDED = {
    "queue": "an actor with a list and put/get methods, polled by its callers (hpc_ray's "
             "actors run one call at a time, so a blocking get would hold up the puts)",
    "multiprocessing": "tasks: [f.remote(x) for x in xs] and ray.get, or ActorPool.map",
    "placement_group": "resources= (custom resources per rank) and num_cpus",
    "collective": "hpc_ray.collective (allreduce and friends over MPI and shared memory)",
}


def __getattr__(name: str):
    if name in _NOT_PROVIDED:
        raise AttributeError(f"hpc_ray.util.{name} (Ray 0.8+) is not provided; use "
                             f"{_NOT_PROVIDED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
