"""What a task or an actor call that failed reports (TASK_FAILED's record), as
Ray 0.7 describes each failure: the exception with its traceback, ``exit()``
as a crashed worker or an exited actor, an argument's own error passed on."""
from __future__ import annotations

import pickle
import sys
import traceback

from ..exceptions import ActorDiedError, TaskError, WorkerCrashedError
from ..transport import messages as m
from . import values


class DepFailed(Exception):
    """An argument of a direct call is an error: the call fails with it."""

    def __init__(self, record: tuple) -> None:
        super().__init__()
        self.record = record


class Where:
    """The process a failure happened in, as its error names it."""

    __slots__ = ("rank", "world_size", "host", "pid")

    def __init__(self, rank: int, world_size: int, host: str, pid: int) -> None:
        self.rank, self.world_size, self.host, self.pid = rank, world_size, host, pid


def failure_record(exc: BaseException, spec: list, where: Where) -> tuple[tuple, str | None]:
    """The error record of ``spec``'s failure with ``exc``, and what the process
    prints of it: the error the task's own code raised, as ``get`` would raise it
    (Ray: "If a task throws an exception, that exception will be printed in the
    background of the driver process"; the executor's stderr goes there).
    None for a failure it passes on (an argument's error, an error a ``get``
    inside it raised: printed where it happened) and for ``exit()``."""
    try:
        return _describe(exc, spec, where)
    except (RecursionError, pickle.PicklingError):
        # The task failed deep in its own recursion, so formatting and pickling
        # its error overflowed too (cloudpickle says PicklingError): describe
        # it again with room to spare, or the caller would never hear of it.
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(limit + 2000)
        try:
            return _describe(exc, spec, where)
        finally:
            sys.setrecursionlimit(limit)


def _describe(exc: BaseException, spec: list, where: Where) -> tuple[tuple, str | None]:
    if isinstance(exc, DepFailed):
        return exc.record, None   # as the head fails a call whose argument failed
    name = spec[m.T_NAME]
    if isinstance(exc, SystemExit):
        # exit() ends a worker in Ray 0.7: a task's caller sees RayWorkerError,
        # an actor's RayActorError, and the actor is gone (not restarted).
        place = f"rank {where.rank} ({where.host}), pid {where.pid}"
        if spec[m.T_ACTOR] is not None:
            return values.error_record(ActorDiedError(
                f"actor method {name} called {exit_call(exc)} on {place}: the actor has "
                f"exited")), None
        return values.error_record(WorkerCrashedError(
            f"task {name} called {exit_call(exc)} on {place}: its worker exited")), None
    if isinstance(exc, KeyboardInterrupt) and spec[m.T_ACTOR] is None:
        # (Not a KeyboardInterrupt in the caller's get, which would read as its
        # own Ctrl-C; where it was raised stays in the traceback.)
        exc = RuntimeError(f"KeyboardInterrupt raised inside task {name}").with_traceback(
            exc.__traceback__)
    return error_record(exc, name, where)


def print_error(text: str) -> None:
    """Print a failure's text on this process's stderr, which reaches the driver's."""
    print(text, file=sys.stderr, end="" if text.endswith("\n") else "\n")


def exit_call(exc: SystemExit) -> str:
    """How the code called exit: ``exit()``, ``exit(3)``, ``exit('why')``."""
    return "exit()" if exc.code is None else f"exit({exc.code!r})"


def error_record(exc: BaseException, name: str, where: Where) -> tuple[tuple, str | None]:
    """``exc`` raised by ``name``'s code, as a TaskError with its traceback, and
    that error's text to print: None for an error a get inside it raised (as
    Ray's, the TaskError names this task and holds both tracebacks; the inner
    one was printed where it was raised)."""
    tb = (f"### Worker {where.rank} of {where.world_size} on {where.host}, pid {where.pid}\n"
          + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    error = TaskError(name, tb, where.rank, where.host, exc)
    if isinstance(exc, (TaskError, ActorDiedError)) and getattr(exc, "_from_get", False):
        return values.error_record(error), None
    return values.error_record(error), TaskError.__str__(error)
