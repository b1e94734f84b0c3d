"""Ctrl-C while init() starts the worker ranks (embedded): init() raises
KeyboardInterrupt, and the ranks it had spawned are gone when it has; a Jupyter
kernel's Interrupt during the first cell left them running."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import signal

import psutil

import hpc_ray as ray

print("INIT START", flush=True)
try:
    ray.init(num_cpus=2)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("INIT DONE", flush=True)    # (the Ctrl-Cs came after it)
    ray.shutdown()
except KeyboardInterrupt:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # (the test's next ones)
    print("INTERRUPTED", flush=True)
    import traceback
    traceback.print_exc()
# (A zombie is only a pid not reaped yet: subprocess leaves one when a Ctrl-C
# lands in its wait for the launcher's `mpiexec --version`.)
left = [p for p in psutil.Process().children(recursive=True) if p.status() != "zombie"]
print(f"CHILDREN {len(left)}", [(p.name(), p.status()) for p in left], flush=True)
