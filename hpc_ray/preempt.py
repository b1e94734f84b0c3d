"""Checkpoint hooks for the end of a Slurm job: time limit, preemption, requeue.

::

    Slurm ──USR1 at time limit - N s (--signal=B:USR1@N)──▶ batch shell
    batch shell (trap USR1) ──kill -USR1 $(cat $HPC_RAY_DRIVER_PIDFILE)──▶ driver (rank 0),
                                                  each driver of the job's steps
    Slurm ──TERM at the time limit or on scancel, KILL after KillWait──▶ every process

    driver: handler (always the main thread) ──▶ each on_preempt hook, once, in
            registration order; on SIGTERM then SystemExit(143), so atexit
            clean-up (hpc_ray.shutdown) still runs before Slurm's SIGKILL.

``hpc_ray.init()`` calls :func:`install_preempt_handler` on the driver; it also
writes the driver's pid to ``HPC_RAY_DRIVER_PIDFILE`` when that is set (the
templates in ``slurm/`` set it; several drivers, one per job step, each add
their line), so the batch script can signal the drivers and nothing else:
worker ranks never see the USR1.  After the hooks have run the
driver keeps going; it usually stops at its next step boundary and exits 0, and
the requeue template then calls ``scontrol requeue``.  The resumed job sees
``SLURM_RESTART_COUNT`` (:func:`requeue_count`) and finds its checkpoint.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from typing import Callable, TypeVar

from . import _config
from .runtime import interrupts
from .runtime.launch import ignore_preempt_signals  # noqa: F401  (re-exported)

__all__ = ["on_preempt", "install_preempt_handler", "ignore_preempt_signals",
           "requeue_count", "is_requeued", "preempted", "PREEMPT_SIGNALS"]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[[], object])

#: Signals that run the hooks.  USR1 is Slurm's advance warning (the batch
#: script forwards it); TERM is the last chance before SIGKILL when no warning
#: was asked for, with only KillWait seconds (30 by default) left.
PREEMPT_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

# Registered when hpc_ray is imported, before the user's exit handlers and
# init()'s shutdown, so it runs after them (atexit runs the last registered first).
atexit.register(interrupts.leave_without_finalize)

_hooks: list[Callable[[], object]] = []
_fired = False
#: The handlers that were in place before ours, to chain to (SIGTERM) and restore.
_previous: dict[int, object] = {}
_pidfile: str | None = None


# --- registration -----------------------------------------------------------


def on_preempt(fn: F) -> F:
    """Register ``fn()`` to run once when Slurm is about to stop the job.

    Use it as a decorator or call it; it returns ``fn`` unchanged.  Hooks run in
    the driver's main thread, in the order registered, when the driver receives
    SIGUSR1 (the templates forward Slurm's ``--signal=B:USR1@120`` to it) or,
    failing that, SIGTERM.  A hook should write a checkpoint and return quickly;
    the job ends soon after.  An exception in one hook is logged and the next
    hook still runs.

    Args:
        fn: a callable taking no arguments.

    Returns:
        ``fn``.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"on_preempt needs a callable, got {fn!r}")
    _hooks.append(fn)
    return fn


def preempted() -> bool:
    """True once the hooks have run: the job is near its end, stop at the next step."""
    return _fired


def requeue_count() -> int:
    """How many times Slurm has requeued this job (``SLURM_RESTART_COUNT``; 0 outside Slurm)."""
    raw = os.environ.get("SLURM_RESTART_COUNT", "")
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


def is_requeued() -> bool:
    """True in a job that Slurm has requeued: look for a checkpoint to resume from."""
    return requeue_count() > 0


# --- signal handling ----------------------------------------------------------


def _run_hooks() -> None:
    global _fired
    if _fired:
        return
    # Set first: a second signal arriving while a hook runs must not re-enter.
    _fired = True
    for hook in list(_hooks):
        try:
            hook()
        except Exception:
            logger.exception("hpc_ray: preemption hook %s failed",
                             getattr(hook, "__qualname__", hook))


def _handle(signum: int, frame) -> None:
    _run_hooks()
    if signum != signal.SIGTERM:
        return
    if interrupts.terminated:
        # A second SIGTERM (Slurm's to the whole step, after the batch shell's):
        # the exit is under way, and raising again would cut its clean-up short.
        return
    interrupts.terminated = True
    previous = _previous.get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # SIG_DFL, or None: set outside Python
        # The default action would kill us outright; exiting instead lets
        # atexit clean-up run (shutdown, shared memory) before Slurm's SIGKILL.
        raise SystemExit(128 + signum)


def install_preempt_handler(signals: tuple[int, ...] = PREEMPT_SIGNALS) -> bool:
    """Run the :func:`on_preempt` hooks when this process receives ``signals``.

    ``hpc_ray.init()`` calls this on the driver.  Installing twice is harmless.
    When ``HPC_RAY_DRIVER_PIDFILE`` is set, the driver's pid is written there
    (and removed at exit) so that a batch script can signal the driver alone.

    Args:
        signals: the signals to handle; SIGUSR1 and SIGTERM by default.

    Returns:
        True if installed; False when not called from the main thread, where
        Python cannot install signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        logger.debug("not in the main thread: no preemption handler")
        return False
    for signum in signals:
        current = signal.getsignal(signum)
        if current is not _handle:
            _previous[signum] = current
            signal.signal(signum, _handle)
    _write_pidfile()
    return True


def _write_pidfile() -> None:
    global _pidfile
    path = _config.os_environ_get("DRIVER_PIDFILE", None)
    if not path or _pidfile == path:
        return
    try:
        _edit_pidfile(path, os.getpid(), add=True)
    except OSError as exc:
        logger.warning("hpc_ray: cannot write the driver pid to %s (%s); the batch "
                       "script cannot forward Slurm's USR1 warning", path, exc)
        return
    _pidfile = path
    atexit.register(_remove_pidfile, path, os.getpid())


def _remove_pidfile(path: str, pid: int) -> None:
    # A forked child inherits atexit handlers; only the writer removes its pid.
    if os.getpid() != pid:
        return
    try:
        _edit_pidfile(path, pid, add=False)
    except OSError:
        pass


def _edit_pidfile(path: str, pid: int, add: bool) -> None:
    """Add ``pid`` to the file's lines (dropping those of processes gone), or take
    it out, the file going with the last. Drivers of several job steps share the
    batch script's file (its trap signals every pid in it): each edits it under
    a lock, and one that locked a file another just unlinked opens it again."""
    import fcntl
    while True:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if add else 0), 0o644)
        with os.fdopen(fd, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    continue
            except FileNotFoundError:
                if not add:
                    return
                continue
            pids = [int(word) for word in f.read().split() if word.isdigit()]
            pids = [p for p in pids if p != pid and (not add or _alive(p))]
            if add:
                pids.append(pid)
            elif not pids:
                os.unlink(path)
                return
            f.seek(0)
            f.truncate()
            f.write("".join(f"{p}\n" for p in pids))
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _reset() -> None:
    """Forget hooks and restore earlier handlers (for tests)."""
    global _fired
    for signum, previous in _previous.items():
        signal.signal(signum, signal.SIG_DFL if previous is None else previous)
    _previous.clear()
    _hooks.clear()
    _fired = False
