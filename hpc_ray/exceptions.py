"""Every public hpc_ray exception, in one place.

Exceptions cross process boundaries (a task's error is stored as its result and
re-raised by ``get`` in the driver), so each keeps its fields in ``args`` and
pickles without custom state; the one exception is a ``TaskError`` that is also
an instance of the task's exception class, whose ``args`` are the cause's and
which pickles through ``__reduce__``.
"""
from __future__ import annotations

import types

__all__ = [
    "RayError",
    "TaskError",
    "RayTaskError",
    "GetTimeoutError",
    "RayTimeoutError",
    "RayConnectionError",
    "RayletError",
    "ObjectStoreFullError",
    "InfeasibleTaskError",
    "WorkerCrashedError",
    "HeadError",
    "RayWorkerError",
    "ActorDiedError",
    "RayActorError",
    "UnreconstructableError",
    "RemoteTraceback",
]


class RayError(Exception):
    """Base class of every hpc_ray error."""


class RemoteTraceback(Exception):
    """Carries a traceback formatted where the error happened (set as ``__cause__``)."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class TaskError(RayError):
    """A task raised an exception; ``get`` re-raises it as this.

    ``get`` raises an instance of a class derived from both ``TaskError`` and the
    original exception class, so ``except ValueError`` and ``except TaskError``
    both catch it.

    Attributes:
        function_name: the remote function (or actor method) that raised.
        traceback_str: the traceback, formatted on the worker.
        rank: the MPI rank that ran the task.
        host: the host name of that rank.
        cause: the original exception, when it could be pickled.

    Other attributes are looked up on ``cause`` (as Ray's ``RayTaskError`` does), so
    ``except MyError as e: e.code`` reads the task's ``MyError.code``; the error that
    is also an instance of the cause's class has the cause's ``args`` and built-in
    fields too (``except KeyError as e: e.args[0]`` is the key, ``e.errno`` and
    ``e.filename`` an ``OSError``'s).
    """

    def __init__(self, function_name: str = "", traceback_str: str = "",
                 rank: int = -1, host: str = "", cause: BaseException | None = None):
        # Not super(): in a class derived with the cause's class, the next
        # __init__ in line would be the cause's own, with its own signature.
        BaseException.__init__(self, function_name, traceback_str, rank, host, cause)
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.rank = rank
        self.host = host
        self.cause = cause

    def __str__(self) -> str:
        return (f"{self.function_name} failed on worker rank {self.rank} "
                f"({self.host}):\n{self.traceback_str}")

    def __getattr__(self, name: str):
        # Only for names not found on the error itself. Dunders are not forwarded
        # (pickle, copy and friends probe them and must see this class's own), and
        # ``cause`` is read from __dict__: while the error is being unpickled or
        # built by _instantiate it is not set yet, and self.cause would recurse.
        cause = self.__dict__.get("cause")
        if cause is None or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}",
                name=name, obj=self)
        return getattr(cause, name)

    def as_instanceof_cause(self) -> "TaskError":
        """Return a copy that is also an instance of the original exception class
        (for a task that failed in ``get``, the class its subtask raised)."""
        root = _root_cause(self.cause)
        cls = type(root) if root is not None else None
        if cls is None or isinstance(self, cls):
            return self
        err = _also_instance_of(cls, (self.function_name, self.traceback_str, self.rank,
                                      self.host, self.cause))
        return self if err is None else err


#: Ray's name for :class:`TaskError` (the same class, so either catches it).
RayTaskError = TaskError


_DERIVED: dict[type, type] = {}


def _root_cause(cause: BaseException | None) -> BaseException | None:
    """What a chain of tasks failing in ``get`` started from: the error of the
    innermost task, not the TaskError each level above wraps it in."""
    while isinstance(cause, TaskError) and cause.cause is not None:
        cause = cause.cause
    return cause


def _can_subclass(cls: type) -> bool:
    try:
        _derived_class(cls)
        return True
    except TypeError:
        return False


def _also_instance_of(cls: type | None, fields: tuple) -> TaskError | None:
    """A TaskError with ``fields`` that is also an instance of ``cls``; None where
    ``cls`` cannot be mixed in or its instances cannot be made this way."""
    if cls is None or not _can_subclass(cls):
        return None
    err = _instantiate(_derived_class(cls))
    if err is not None:
        TaskError.__init__(err, *fields)
        _take_cause_fields(err, _root_cause(fields[4]))
    return err


def _take_cause_fields(err: TaskError, cause: BaseException | None) -> None:
    """Give ``err`` the cause's ``args`` and the fields that built-in exception types
    keep in C slots (``OSError.errno``/``filename``, ``KeyError``'s key in ``args``,
    ``SyntaxError.lineno``, ``ImportError.name``, ...): those exist on the derived
    class, as None, so ``TaskError.__getattr__`` never forwards them."""
    if cause is None:
        return
    err.args = cause.args
    for klass in type(cause).__mro__:
        if klass.__module__ != "builtins" or klass in (BaseException, object):
            continue
        for name, field in vars(klass).items():
            if name.startswith("__") or not isinstance(
                    field, (types.MemberDescriptorType, types.GetSetDescriptorType)):
                continue
            try:
                setattr(err, name, getattr(cause, name))
            except (AttributeError, TypeError, ValueError):
                continue


def _rebuild_task_error(cause_cls, fields):
    err = _also_instance_of(cause_cls, fields)
    return TaskError(*fields) if err is None else err


def _instantiate(derived: type):
    """An uninitialised instance; exception types differ in which __new__ is safe."""
    for new in (derived.__new__, BaseException.__new__):
        try:
            return new(derived)
        except TypeError:
            continue
    return None


def _portable_cause(cause: BaseException | None) -> BaseException | None:
    """The cause if it survives a pickle round trip, else None (the class is kept)."""
    if cause is None:
        return None
    try:
        import pickle

        import cloudpickle
        pickle.loads(cloudpickle.dumps(cause))
        return cause
    except Exception:
        return None


def _derived_class(cls: type) -> type:
    derived = _DERIVED.get(cls)
    if derived is None:
        def __reduce__(self):
            return (_rebuild_task_error, (type(_root_cause(self.cause)), (
                self.function_name, self.traceback_str, self.rank, self.host,
                _portable_cause(self.cause))))

        derived = type(f"TaskError({cls.__name__})", (TaskError, cls), {
            "__reduce__": __reduce__,
            "__str__": TaskError.__str__,
            "__init__": TaskError.__init__,
            "__module__": __name__,
        })
        _DERIVED[cls] = derived
    return derived


class GetTimeoutError(RayError, TimeoutError):
    """``get`` did not finish within its timeout."""


#: Ray 0.7's name for :class:`GetTimeoutError`.
RayTimeoutError = GetTimeoutError


class RayConnectionError(RayError):
    """Ray 0.7's error for a lost connection to its services (kept for ``except``
    clauses; hpc_ray raises WorkerCrashedError or ActorDiedError instead)."""


class RayletError(RayError):
    """Ray 0.7's error for a failed raylet (kept for ``except`` clauses; hpc_ray has
    no raylet)."""


class InfeasibleTaskError(RayError, ValueError):
    """A task asks for more than any worker rank can ever hold (it would wait forever)."""


class ObjectStoreFullError(RayError, MemoryError):
    """An object does not fit in the node's shared-memory object store."""


class WorkerCrashedError(RayError):
    """The process running a task died (segfault, ``os._exit``, killed by the OOM killer)."""


RayWorkerError = WorkerCrashedError


class ActorDiedError(RayError):
    """The actor is dead: killed, crashed past ``max_restarts``, or its call was lost."""


RayActorError = ActorDiedError


class HeadError(RayError):
    """The head (rank 0) hit a bug handling a message: what it concerned fails with
    this, and the job goes on."""


class UnreconstructableError(RayError):
    """The object was freed or lost and cannot be recomputed."""


#: Modern Ray's exception names, and their bases here. hpc_ray raises none of them:
#: they exist so that an ``except`` clause that names them, copied from a newer
#: program, does not fail with AttributeError when another error reaches it.
_MODERN = (
    ("ObjectLostError", "UnreconstructableError"),
    ("ObjectFetchTimedOutError", "ObjectLostError"),
    ("OwnerDiedError", "ObjectLostError"),
    ("ObjectReconstructionFailedError", "ObjectLostError"),
    ("TaskCancelledError", "RayError"),
    ("RaySystemError", "RayError"),
    ("OutOfMemoryError", "RayError"),
    ("RuntimeEnvSetupError", "RayError"),
    ("ActorUnavailableError", "RayError"),
    ("NodeDiedError", "RayError"),
    ("LocalRayletDiedError", "RayError"),
    ("TaskUnschedulableError", "RayError"),
    ("ActorUnschedulableError", "RayError"),
    ("PendingCallsLimitExceeded", "RayError"),
)
__all__ += [name for name, _ in _MODERN]
for _name, _base in _MODERN:
    globals()[_name] = type(_name, (globals()[_base],), {
        "__doc__": f"Modern Ray's {_name}: never raised by hpc_ray.", "__module__": __name__})
del _name, _base
