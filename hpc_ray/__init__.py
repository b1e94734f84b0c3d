"""hpc_ray: the Ray programming model inside an ordinary MPI or Slurm job.

    import hpc_ray as ray
    ray.init()                 # embedded, or rank 0 of an mpiexec/srun job

    @ray.remote
    def f(x):
        return x * x

    ray.get([f.remote(i) for i in range(4)])   # [0, 1, 4, 9]
"""
from . import actor, collective, exceptions, ray_constants, services, worker
from .actors import ActorClass, ActorHandle, get_actor, kill, method
from .api import (as_completed, available_resources, cluster_resources, error_info, errors, get,
                  get_gpu_ids, get_resource_ids, get_webui_url, init, is_initialized, nodes,
                  object_transfer_timeline, objects, profile, progress, put,
                  register_custom_serializer, remote, run_function_on_all_workers, shutdown,
                  tasks, timeline, wait)
from .preempt import on_preempt
from .reusable import Reusable, reusables
from .state import state as global_state   # (Ray 0.6's name; the module is 0.7's ray.state)
from .runtime import launched as _launched
from .runtime.context import ObjectRef
from .worker import LOCAL_MODE, SCRIPT_MODE, WORKER_MODE

# A rank of a launch notes so, before user code can start processes that inherit
# its launcher's variables (runtime/launched.py).
_launched.mark_rank()

ObjectID = ObjectRef

__version__ = "0.1.0"

__all__ = [
    "LOCAL_MODE", "SCRIPT_MODE", "WORKER_MODE",
    "ActorClass", "ActorHandle", "actor", "error_info", "errors", "get_webui_url",
    "object_transfer_timeline", "register_custom_serializer", "collective", "experimental", "worker", "ObjectID", "ObjectRef", "Reusable", "as_completed",
    "as_future", "available_resources", "cluster_resources", "exceptions", "get",
    "get_actor", "get_gpu_ids", "get_resource_ids", "global_state", "init", "is_initialized",
    "kill",
    "method", "nodes", "objects", "on_preempt", "profile", "progress", "put", "ray_constants",
    "remote", "reusables", "services",
    "run_function_on_all_workers", "shutdown", "tasks", "timeline", "util", "wait",
]


def __getattr__(name: str):
    # Imported when first used: they import asyncio (~0.1 s here), which every
    # driver, rank and executor process would pay at start-up otherwise.
    if name == "experimental":
        import importlib
        return importlib.import_module(".experimental", __name__)
    if name == "as_future":
        from .runtime.asyncio_compat import as_future
        return as_future
    if name == "util":
        import importlib
        return importlib.import_module(".util", __name__)
    if name in _NEWER:
        raise AttributeError(f"hpc_ray.{name} (Ray 0.8 and later) is not provided: "
                             f"{_NEWER[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Newer Ray API that hpc_ray does not have, and what to use instead.
_NEWER = {
    "cancel": "a task runs to its end; ray.kill(actor) ends an actor and fails its calls",
    "get_runtime_context": "ray.get_gpu_ids(), ray.get_resource_ids(), os.getpid() and "
                           "the job's environment (SLURM_JOB_ID, ...) say where code runs",
    "client": "the job is the cluster: run the driver inside it (mpiexec, srun, sbatch)",
}
