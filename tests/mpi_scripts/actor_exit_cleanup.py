"""An actor's process ends as a Python process does at exit, as in Ray 0.7 (whose
exit_actor() and __ray_terminate__ call sys.exit(0)): when the actor calls
exit_actor(), is sent __ray_terminate__, loses its last handle, or is still
alive at the end of the job, the objects it holds are finalized (a buffered
write reaches its file, a TemporaryDirectory is removed), its atexit handlers
run and what they print reaches the driver. kill() ends it at once, without
any of this (as in Ray). A plain task's atexit handlers run at the end of the
job too, and MPI initialised in a task (mpi4py, as a singleton) is finalized:
MPICH's /dev/shm segment goes with it."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import atexit
import gc
import tempfile

from _harness import check, init_kwargs, ok, poll_for, report, running, section, tmp_path

import hpc_ray as ray

ray.init(**init_kwargs())
T = 30
#: Seconds to wait for an ending actor's clean-up to show.
ENDS = 20


@ray.remote
class Writer:
    def __init__(self, name, folder):
        self.name = name
        self.fh = open(os.path.join(folder, f"{name}.log"), "w")
        self.scratch = tempfile.TemporaryDirectory(prefix=f"scratch-{name}-", dir=folder)
        marker = os.path.join(folder, f"{name}.atexit")

        def at_exit():
            with open(marker, "w") as f:
                f.write("ran")
            print(f"atexit line of {name}", flush=True)

        atexit.register(at_exit)

    def write(self):
        self.fh.write(f"buffered line of {self.name}\n")   # not flushed here
        return self.scratch.name, os.getpid()

    def bye(self):
        ray.actor.exit_actor()


@ray.remote
def task_with_atexit(folder):
    marker = os.path.join(folder, f"task-{os.getpid()}.atexit")
    atexit.register(lambda: open(marker, "w").close())
    return marker


@ray.remote
def task_with_mpi():
    from mpi4py import MPI
    mine = f"mpich_shm_{os.getpid():x}_"
    return MPI.COMM_WORLD.Get_size(), sorted(
        os.path.join("/dev/shm", f) for f in os.listdir("/dev/shm") if f.startswith(mine))


def start(name):
    w = Writer.remote(name, FOLDER)
    scratch, pid = ray.get(w.write.remote(), timeout=T)
    check(os.path.isdir(scratch), scratch)
    return w, scratch, pid


def cleaned_up(name, scratch):
    """What the end of actor ``name`` left: its file's text, whether its atexit
    handler ran, whether its TemporaryDirectory is still there."""
    log = os.path.join(FOLDER, f"{name}.log")
    with open(log) as f:
        text = f.read()
    return text, os.path.exists(os.path.join(FOLDER, f"{name}.atexit")), os.path.exists(scratch)


def expect_clean(name, scratch, pid):
    poll_for(lambda: os.path.exists(os.path.join(FOLDER, f"{name}.atexit"))
             and not os.path.exists(scratch), ENDS)
    text, ran, left = cleaned_up(name, scratch)
    report(f"cleanup_{name}", [text, ran, left])
    check(text == f"buffered line of {name}\n", f"{name}: the actor's file holds {text!r}")
    check(ran, f"{name}: its atexit handler did not run")
    check(not left, f"{name}: its TemporaryDirectory {scratch} is still there")
    check(poll_for(lambda: not running(pid), ENDS), f"{name}: its process {pid} is still there")


FOLDER = tmp_path("actor-files")
os.makedirs(FOLDER, exist_ok=True)

with section("ends during the job"):
    by_exit, s1, p1 = start("exit_actor")
    by_terminate, s2, p2 = start("terminate")
    by_scope, s3, p3 = start("last_handle")
    by_kill, s4, p4 = start("kill")
    by_exit.bye.remote()
    by_terminate.__ray_terminate__.remote()
    del by_scope
    gc.collect()
    ray.kill(by_kill)
    expect_clean("exit_actor", s1, p1)
    expect_clean("terminate", s2, p2)
    expect_clean("last_handle", s3, p3)
    # kill() ends the process at once: no clean-up (as in Ray).
    check(poll_for(lambda: not running(p4), ENDS), "kill: the process is still there")
    check(cleaned_up("kill", s4)[:2] == ("", False), cleaned_up("kill", s4))
    # The job goes on: a new actor and a task still run.
    w, s5, _ = start("after")
    check(ray.get(ray.remote(lambda: 7).remote(), timeout=T) == 7)

with section("end of the job"):
    at_end, s6, p6 = start("job_end")
    task_marker = ray.get(task_with_atexit.remote(FOLDER), timeout=T)
    mpi_size, segments = ray.get(task_with_mpi.remote(), timeout=T)
    report("mpi_in_task", [mpi_size, segments])
    ray.shutdown()
    expect_clean("job_end", s6, p6)
    check(os.path.exists(task_marker), "a plain task's atexit handler did not run")
    left = [s for s in segments if os.path.exists(s)]
    check(not left, f"MPI initialised in a task left {left}")
    for s in left:   # (so that the test's own leak check reports only this)
        os.unlink(s)

ok("actor_exit_cleanup")
