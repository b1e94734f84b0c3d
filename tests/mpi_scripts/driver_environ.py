"""What the driver sets, changes or deletes in os.environ before init() reaches its
tasks and actors, in every launch mode (under ``python -m hpc_ray`` the worker
ranks never run the script: the changes go with the session's config).

The test launches it with HPC_RAY_TEST_ENV_CHANGED and HPC_RAY_TEST_ENV_DELETED
set. Under ``python -m hpc_ray`` a launcher's per-rank variable the driver
changed (hydra's MPI_LOCALRANKID, Open MPI's OMPI_COMM_WORLD_LOCAL_RANK) keeps
each worker rank's own value.
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import MODE, check, init_kwargs, ok, report

import hpc_ray as ray

EXPECTED = {"MY_SETTING": "from-driver", "OMP_NUM_THREADS": "1",
            "HPC_RAY_TEST_ENV_CHANGED": "driver", "HPC_RAY_TEST_ENV_DELETED": None}

check(os.environ.get("HPC_RAY_TEST_ENV_DELETED") == "launcher", "the test's variable is not set")
os.environ["MY_SETTING"] = "from-driver"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["HPC_RAY_TEST_ENV_CHANGED"] = "driver"
del os.environ["HPC_RAY_TEST_ENV_DELETED"]
PER_RANK = next((k for k in ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")
                 if k in os.environ), None)
local_rank = os.environ.get(PER_RANK) if PER_RANK else None
if MODE == "module" and PER_RANK:
    os.environ[PER_RANK] = "driver"
ray.init(**init_kwargs())


def seen():
    return {k: os.environ.get(k) for k in EXPECTED}


@ray.remote
def task_env():
    return seen()


@ray.remote
class Actor:
    def env(self):
        return seen(), os.environ.get(PER_RANK) if PER_RANK else None


tasks = ray.get([task_env.remote() for _ in range(8)])
check(all(t == EXPECTED for t in tasks), f"tasks saw {tasks}")
report("task_env", tasks[0])
for in_rank in (False, True):
    actor = Actor.options(in_rank=True).remote() if in_rank else Actor.remote()
    env, actor_local_rank = ray.get(actor.env.remote())
    check(env == EXPECTED, f"actor (in_rank={in_rank}) saw {env}")
    report(f"actor_env_in_rank_{in_rank}", env)
    if in_rank and MODE == "module" and PER_RANK:
        # The worker rank's own local rank, never rank 0's (changed) one.
        check(actor_local_rank not in (None, "driver", local_rank),
              f"in-rank actor's {PER_RANK} {actor_local_rank!r} (driver's {local_rank!r})")
ray.shutdown()
ok("driver_environ")
