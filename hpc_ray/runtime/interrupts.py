"""Ctrl-C in the driver: ``KeyboardInterrupt`` only where it cannot break the runtime.

Python's default SIGINT handler raises ``KeyboardInterrupt`` between any two
bytecodes of the main thread: between taking rank 0's MPI progress lock and
the ``try`` that gives it back, between receiving a batch of messages and
handling it, or inside ``threading.Condition.__enter__`` (Python code, also
under ``Event.set``) after it took its lock, which then stays held for good.
Results are then lost or the job stalls. So while the main thread
runs one of the runtime's critical sections (``with deferred():``), a SIGINT
only sets a flag, and the ``KeyboardInterrupt`` is raised as the outermost
section ends. Waits in ``get``/``wait`` run as a loop of short sections, so the
interrupt reaches the user within one turn of that loop (at most ~0.1 s).

Only the main thread receives signals in Python, so only its sections count.
The handler is installed by ``init()`` when SIGINT still has Python's default
handler, and removed by ``shutdown()``; a handler the user set is left alone.

SIGTERM (Slurm's end of a job, sent to every process of the step) is
``hpc_ray.preempt``'s: it sets ``terminated`` here before the driver exits, so
that shutdown waits only briefly for worker ranks the same signal ended, and
where some did not confirm (``skip_finalize``), ``leave_without_finalize``, the
driver's last exit handler, ends the process before mpi4py's MPI_Finalize,
which would wait for them until Slurm's SIGKILL.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

from .. import _config

_MAIN = threading.main_thread()
_MAIN_IDENT = _MAIN.ident
_get_ident = threading.get_ident
_depth = 0          # the main thread's nesting of deferred() sections
_pending = False    # a SIGINT arrived inside a section
_installed = False
#: The driver was sent SIGTERM and is exiting (set by ``hpc_ray.preempt``).
terminated = False
#: Set by rank 0's shutdown when ``terminated`` and some worker rank did not confirm.
skip_finalize = False


#: Code of functions a ``KeyboardInterrupt`` must not cross (``protect``): the
#: ref counts' (``context.ObjectRef``), whose ``__del__`` takes the lock without
#: ``with`` (an interrupt just after the take left it held, and the next ref made
#: or ``shutdown()`` blocked for good) and swallows what it raises (the Ctrl-C was lost).
_protected: set = set()
#: Seconds after which an interrupt deferred out of a protected function, and
#: not raised by a section's end meanwhile, is sent again.
RETRY_DELAY = 0.01


def protect(*functions) -> None:
    """Defer a SIGINT that arrives while one of ``functions`` runs, as inside a
    section: it is raised as the next section ends, or sent again ``RETRY_DELAY``
    later."""
    for fn in functions:
        _protected.add(fn.__code__)


def _on_sigint(signum, frame) -> None:
    global _pending
    if _depth:
        _pending = True
        return
    while frame is not None:
        if frame.f_code in _protected:
            _pending = True
            timer = threading.Timer(RETRY_DELAY, _send_again)
            timer.daemon = True
            timer.start()
            return
        frame = frame.f_back
    _pending = False
    raise KeyboardInterrupt


def _send_again() -> None:
    if _pending:
        os.kill(os.getpid(), signal.SIGINT)


class _Deferred:
    __slots__ = ("main",)

    def __enter__(self):
        global _depth
        self.main = _get_ident() == _MAIN_IDENT
        if self.main:
            _depth += 1
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        global _depth, _pending
        if self.main:
            _depth -= 1
            if _depth == 0 and _pending:
                _pending = False
                if exc_type is None:
                    raise KeyboardInterrupt
        return False


def deferred() -> _Deferred:
    """A critical section of the driver thread: SIGINT waits until it ends."""
    return _Deferred()


def install() -> None:
    global _installed
    if threading.current_thread() is not _MAIN:
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
        _installed = True
        _hook_ipython()


_ipython_hooked = False


def _hook_ipython() -> None:
    """A Jupyter kernel sets Python's default SIGINT handler before each cell it
    runs (and puts the one it found back after): the handler goes back in at
    each cell's start, or from the second cell on an Interrupt could land inside
    the runtime (a put's store block was lost for good)."""
    global _ipython_hooked
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or _ipython_hooked:
        return
    shell.events.register("pre_run_cell", _for_cell)
    _ipython_hooked = True


def _for_cell(*_info) -> None:
    if _installed and threading.current_thread() is _MAIN \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def uninstall() -> None:
    global _installed, _pending
    if _installed and threading.current_thread() is _MAIN:
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        _installed = False
        _pending = False


def leave_without_finalize() -> None:
    """An exit handler run after the others (``hpc_ray`` registers it when it is
    imported): after ``skip_finalize``, leave with SIGTERM's status now.

    Also leave now after a spawned worker rank died (``launch.spawned_lost``)
    where mpi4py, not ``launch.finalize_at_exit``, would call MPI_Finalize (the
    script imported ``mpi4py.MPI`` before ``init()``): it would crash. The
    script's exit status is not known here: the status is 1."""
    import sys
    launch = sys.modules.get(__package__ + ".launch")   # not imported: no session ran
    lost = (launch is not None and launch.spawned_lost is not None
            and sys.modules["mpi4py"].rc.finalize is not False)
    if skip_finalize or lost:
        if not skip_finalize:
            sys.stderr.write("hpc_ray: leaving without MPI_Finalize, which would crash now "
                             "that a worker rank died, with exit status 1 (mpi4py.MPI was "
                             "imported before hpc_ray.init(): the script's own status is "
                             "not known)\n")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(128 + signal.SIGTERM if skip_finalize else 1)


def ignore_in_workers() -> None:
    """Worker ranks and executors ignore SIGINT: a Ctrl-C at a terminal reaches
    every process of the job, and it is the driver's to handle. Executors are
    spawned after this and inherit it."""
    if threading.current_thread() is _MAIN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


#: Directory where every hpc_ray process (driver, worker ranks, executors) writes
#: all its threads' stacks when it gets SIGUSR2; unset: SIGUSR2 is left alone.
#: The test harness sets it, and signals a launch that is about to time out, so a
#: hang shows where every process of the job was, not only the driver.
STACKS_DIR_ENV = "HPC_RAY_STACKS_DIR"
_stacks_file = None


def dump_stacks_on_sigusr2() -> None:
    """With ``HPC_RAY_STACKS_DIR`` set: SIGUSR2 writes this process's stacks to
    ``<dir>/stacks-<pid>.txt`` (faulthandler, so it works with the GIL held)."""
    global _stacks_file
    directory = _config.os_environ_get(STACKS_DIR_ENV[len("HPC_RAY_"):], None)
    if not directory or _stacks_file is not None:
        return
    import faulthandler
    try:
        _stacks_file = open(os.path.join(directory, f"stacks-{os.getpid()}.txt"), "w")
        faulthandler.register(signal.SIGUSR2, file=_stacks_file, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        pass
