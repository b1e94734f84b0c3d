"""A worker rank out of file descriptors (its ``ulimit -n`` set low here, for
ranks 1..N-1 alone) cannot start a process for an actor: that actor fails, as
one whose process died at once (RayActorError on its calls), the rank says why
on stderr, and the job goes on. (It called MPI_Abort, which took the whole job
down, an embedded driver too.)"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import resource

from _harness import check, init_kwargs, ok, report, section

if os.environ.get("PMI_RANK", "0") != "0":
    resource.setrlimit(resource.RLIMIT_NOFILE, (96, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

import hpc_ray as ray

ray.init(**init_kwargs())


@ray.remote(num_cpus=0)
class Small:
    def ping(self):
        return "pong"


@ray.remote
def plain(x):
    return x + 1


with section("more actors than the ranks' descriptors allow"):
    actors = [Small.remote() for _ in range(60)]
    answers = []
    for a in actors:
        try:
            answers.append(ray.get(a.ping.remote(), timeout=60))
        except ray.exceptions.RayActorError:
            answers.append("failed")
    report("answers", {"pong": answers.count("pong"), "failed": answers.count("failed")})
    check(answers.count("pong") >= 10 and answers.count("failed") >= 1, answers)
    for a in actors:
        ray.kill(a)
    del actors
with section("the ranks serve on"):
    check(ray.get([plain.remote(i) for i in range(4)], timeout=60) == [1, 2, 3, 4])
ray.shutdown()
ok("few_fds")
