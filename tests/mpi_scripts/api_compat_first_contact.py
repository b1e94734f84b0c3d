"""First contact: a driver started as /path/to/venv/bin/python with no mpiexec on PATH.

    python api_compat_first_contact.py found    the launcher beside the interpreter is used
    python api_compat_first_contact.py missing  none anywhere: init() fails at once, saying
                                                what to do (it hung before)
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import shutil
import sys

from _harness import check, ok, report

import hpc_ray as ray
from hpc_ray import launch

check(shutil.which("mpiexec") is None, "the test must run without mpiexec on PATH")
if sys.argv[1] == "missing":
    launch._launcher_dirs = lambda: []  # as if no launcher were installed anywhere
    try:
        ray.init(num_cpus=1)
    except ray.exceptions.RayError as err:
        report("message", str(err))
    else:
        check(False, "init() did not fail")
        ray.shutdown()
    check(not ray.is_initialized())
else:
    ray.init(num_cpus=1)

    @ray.remote
    def square(x):
        return x * x

    check(ray.get(square.remote(7)) == 49)
    ray.shutdown()
ok("api_compat_first_contact")
