"""A bug in the head (rank 0) fails what it concerns, not the job (issue 33); a
head that fails for good still shuts the job down cleanly: no MPI_Abort."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

from _harness import check, expect_raises, init_kwargs, ok, report, section

import hpc_ray as ray
from hpc_ray.exceptions import HeadError, RayError
from hpc_ray.runtime import head as head_module

# The head lives in this process (rank 0): make two of its handlers buggy.
real_task_done = head_module.Head.task_done
real_schedule = head_module.Head.schedule
broken = [False]


def buggy_task_done(self, rank, tid, results, *rest):
    task = self.tasks.get(tid)
    if task is not None and task.spec[3].endswith("poisoned"):
        raise KeyError("a bug in the head")
    return real_task_done(self, rank, tid, results, *rest)


def buggy_schedule(self):
    if broken[0]:
        raise RuntimeError("the head's scheduler is broken for good")
    return real_schedule(self)


head_module.Head.task_done = buggy_task_done
head_module.Head.schedule = buggy_schedule

ray.init(**init_kwargs())


@ray.remote
def poisoned():
    return 1


@ray.remote
def fine(x):
    return x + 1


with section("one bad message"):
    err = expect_raises(HeadError, ray.get, poisoned.remote(), timeout=60)
    check(err is not None and "TASK_DONE" in str(err) and "a bug in the head" in str(err),
          repr(err))
    # The job goes on: later tasks run, and so do tasks that depend on each other.
    check(ray.get([fine.remote(i) for i in range(20)], timeout=60) == list(range(1, 21)))
    check(ray.get(fine.remote(fine.remote(1)), timeout=60) == 3)

with section("a head that fails for good"):
    broken[0] = True
    err = expect_raises(RayError, ray.get, fine.remote(1), timeout=30)
    check(err is not None and "head failed" in str(err), repr(err))
    report("after_failure", type(err).__name__)

ray.shutdown()            # must end the job cleanly: every rank exits 0
ok("head_bug")
