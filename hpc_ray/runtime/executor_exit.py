"""An executor's end: the clean-up of a normal Python exit, then ``os._exit``.

    its actor ends (exit_actor(), __ray_terminate__, its constructor raised)
        executor ──ACTOR_DIED──▶ rank, which keeps reading its pipes until EOF
    its last handle is gone (KILL_ACTOR ... graceful), the job ends, max_calls, idle
        rank ──SHUTDOWN──▶ executor
                                   │
                                   ▼
    leave(): drop the actor (its objects are finalized: files flushed and closed,
    TemporaryDirectory folders removed) ─▶ atexit handlers ─▶ MPI_Finalize, if user
    code initialised MPI ─▶ flush stdout/stderr ─▶ the last messages (RELEASE of
    the refs the actor held) ─▶ os._exit(0) ─▶ EOF at the rank

Bounded by the rank, not here: it kills a process still cleaning up after
``worker.LEAVE_TIMEOUT`` (one whose actor ended), ``ExecutorPool.reap``'s 5 s
(max_calls, idle) or ``WorkerLoop.close``'s 2 s (the end of the job).

This is not the interpreter's own exit: non-daemon threads are not joined
(there, a thread that never ends holds the process until the rank kills it) and
C-level exit functions (``Py_AtExit``) do not run. In a process that had
imported torch, ``sys.exit`` took 0.77 s and this 0.11 s (the collection of
``_drop_actor`` included). mpi4py's C-level exit function, the one whose absence
leaves something behind (MPICH's ``/dev/shm/mpich_shm_*`` segment), is replaced
by the call in ``_finalize_mpi``.

``os._exit`` called by user code (``flush_at_os_exit``) first sends what the
executor buffered: the answers of calls that ended before it.
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
import weakref
from typing import Any, NoReturn

#: True once ``leave`` began: a second call (user clean-up code whose wait read
#: another SHUTDOWN) skips the clean-up.
_leaving = False


#: The real ``os._exit``, which ``flush_at_os_exit`` wraps: the runtime's own
#: exits call this one (they flush first where there is anything to tell).
os_exit = os._exit


def flush_at_os_exit(ctx: Any) -> None:
    """Make ``os._exit`` send ``ctx``'s buffered messages first. The answers of
    calls that ended wait there (``executor.FLUSH_INTERVAL``): a later call that
    ends the process with ``os._exit`` would lose them, and the rank would report
    the finished calls as lost with it."""
    def _exit(status: int) -> NoReturn:
        lock = ctx.transport.lock
        # (Not in a child forked by user code, multiprocessing's: the socket and
        # the buffer are the parent's. Not when this thread holds the lock: it is
        # sending them.)
        if os.getpid() == ctx.pid and lock.acquire(timeout=1):
            lock.release()
            try:
                ctx.flush()
            except BaseException:   # (the rank is gone: nothing to tell it)
                pass
        os_exit(status)
    os._exit = _exit


def leave(ctx: Any, clean: bool = True) -> NoReturn:
    """End the executor ``ctx`` serves: its clean-up (unless ``clean`` is False),
    then the messages still owed to the rank, then ``os._exit(0)``. Whatever user
    code raises in the clean-up is printed to stderr, as Python prints it at exit."""
    global _leaving
    if clean and not _leaving:
        _leaving = True
        for step in (_drop_actor, _run_atexit, _finalize_mpi, _flush_output):
            try:
                step(ctx)
            except BaseException:   # user code: reported, and the next step still runs
                _report_failure(step)
    try:
        ctx.flush()
    except BaseException:   # (the rank is gone: nothing to tell it)
        pass
    os_exit(0)


#: True in a child that user code forked (``os.fork``, a ``multiprocessing``
#: fork) in this process: a flag per task, where ``os.getpid()`` is a system call.
forked = False


def _note_forked() -> None:
    global forked
    forked = True


os.register_at_fork(after_in_child=_note_forked)


def forked_child_ends(exc: BaseException | None) -> NoReturn:
    """End a child that user code forked in a task and that came back out of the
    task, returning (``exc`` None) or raising, instead of ending with ``os._exit``.
    It ends as a forked Python process would, with the exit status of ``exc`` (0,
    a ``SystemExit``'s code, or 1 after printing the traceback), and reports
    nothing: the task, the socket and the buffers are its parent's, which goes on.
    The parent's atexit handlers are not run here: they are the parent's clean-up."""
    status = 0
    if isinstance(exc, SystemExit):
        if isinstance(exc.code, int):
            status = exc.code
        elif exc.code is not None:
            print(exc.code, file=sys.stderr)
            status = 1
    elif exc is not None:
        import traceback
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        status = 1
    _flush_output(None)
    os_exit(status & 0xFF)


def _drop_actor(ctx: Any) -> None:
    """Let go of the actor instance, so that its objects are finalized."""
    actor = ctx.actor
    if actor is None:
        return
    ctx.actor = ctx.bound_actor = None
    ctx.bound = {}
    ctx.checkpoints = {}   # (a Checkpointable actor's hooks hold the instance)
    try:
        ref = weakref.ref(actor)
    except TypeError:   # (a class with __slots__ and no __weakref__)
        ref = None
    del actor
    # A collection costs ~0.1 s in a process that has imported torch: only when
    # the instance outlived its last reference here (a cycle), or cannot say.
    if ref is None or ref() is not None:
        gc.collect()


def _run_atexit(ctx: Any) -> None:
    # Runs and unregisters every handler, weakref.finalize's too; one that raises
    # is printed ("Exception ignored in atexit callback") and the rest still run.
    atexit._run_exitfuncs()


def _finalize_mpi(ctx: Any) -> None:
    """MPI_Finalize, as mpi4py does at exit, if user code initialised MPI here
    (as a singleton: the executor's environment has no launcher variables)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or getattr(ctx, "in_rank", False):
        return
    rc = getattr(sys.modules.get("mpi4py"), "rc", None)
    if getattr(rc, "finalize", None) is False:   # the user asked mpi4py not to
        return
    if mpi.Is_initialized() and not mpi.Is_finalized():
        # The launcher a task's MPI_Comm_spawn started ends with this process and
        # kills its proxies, which then leave hydra's topology file in /tmp: it
        # goes now (the spawned processes read it in their MPI_Init, long done).
        import psutil
        from . import launch
        for child in psutil.Process().children(recursive=True):
            launch.unlink_launcher_topology(child.pid)
        mpi.Finalize()


def _flush_output(ctx: Any) -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):   # (the rank's pipe is closed)
                pass


def _report_failure(step) -> None:
    try:
        import traceback
        sys.stderr.write(f"Exception ignored in the executor's clean-up "
                         f"({step.__name__}):\n{traceback.format_exc()}")
        sys.stderr.flush()
    except BaseException:   # (stderr is gone)
        pass
