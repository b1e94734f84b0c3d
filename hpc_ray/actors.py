"""Actors: ``@remote`` classes whose instances live in an executor on one rank."""
from __future__ import annotations

import inspect
from typing import Any

from .remote_function import (_new_id, check_options, num_returns_from, resources_from)
from .runtime import context
from .runtime.taskspec import build_spec
from .transport import messages as m
from .transport.serialization import dumps

#: Options an actor class accepts (0.7 names and modern ones).
ACTOR_OPTIONS = ("num_cpus", "num_gpus", "resources", "max_restarts", "max_reconstructions",
                 "max_task_retries", "name", "lifetime", "memory", "object_store_memory",
                 "namespace", "get_if_exists", "runtime_env", "max_concurrency",
                 "scheduling_strategy", "in_rank")
METHOD_OPTIONS = ("num_returns", "num_return_vals", "max_retries")


def method(*args, **kwargs):
    """Annotate an actor method: ``@method(num_returns=2)``."""
    if args and callable(args[0]) and len(args) == 1 and not kwargs:
        return args[0]
    check_options(kwargs, METHOD_OPTIONS, "method")
    num_returns_from(kwargs)

    def decorate(fn):
        fn.__hpc_ray_num_returns__ = num_returns_from(kwargs)
        return fn
    return decorate


def _method_meta(cls: type) -> dict[str, int]:
    meta = {}
    for name, member in inspect.getmembers(cls):
        if callable(member) and (not name.startswith("__") or name == "__call__"):
            meta[name] = getattr(member, "__hpc_ray_num_returns__", 1)
    return meta


class ActorClass:
    """What ``@remote`` makes of a class: ``C.remote(*args)`` creates an actor."""

    def __init__(self, cls: type, options: dict, class_id: int | None = None) -> None:
        check_options(options, ACTOR_OPTIONS, f"actor class {cls.__name__}")
        self._cls = cls
        self._options = options
        self._class_id = class_id if class_id is not None else _new_id()
        self._meta = _method_meta(cls)
        self._blob: bytes | None = None
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__
        # Validate now so a bad option fails at decoration, not at first use.
        resources_from(options, 0, cls.__name__)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor class {self.__name__} cannot be instantiated directly; "
                        f"use {self.__name__}.remote(...)")

    def options(self, **options) -> "ActorClass":
        merged = dict(self._options)
        merged.update(options)
        return ActorClass(self._cls, merged, self._class_id)

    def remote(self, *args, **kwargs) -> "ActorHandle":
        ctx = context.current()
        opts = self._options
        name = opts.get("name")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if name is not None and opts.get("get_if_exists"):
            try:
                return get_actor(name)
            except ValueError:
                pass
        # An actor holds no CPU for its lifetime unless it asks (as in Ray).
        resources = resources_from(opts, 0, self.__name__) or {}
        resources = {k: v for k, v in resources.items() if v}
        restarts = opts.get("max_restarts", opts.get("max_reconstructions", 0))
        if not isinstance(restarts, int) or restarts < -1:
            raise ValueError(f"max_restarts must be an int >= -1, got {restarts!r}")
        task_retries = opts.get("max_task_retries", 0)
        if self._blob is None:
            try:
                self._blob = dumps(self._cls)
            except Exception as exc:
                raise TypeError(f"could not serialize actor class {self.__name__}: "
                                f"{type(exc).__name__}: {exc}") from exc
        actor_id = _new_id()
        register = getattr(ctx, "register_function", None)
        if register is not None:
            register(self._class_id, self._cls)
        keep: list = []
        # An hpc_ray extension: in_rank=True runs the actor in its rank's own process,
        # with MPI (see hpc_ray.collective.get_communicator), without crash isolation.
        placement = m.IN_RANK if opts.get("in_rank") else 0
        spec = build_spec(self._class_id, self._blob, self.__name__, args, kwargs, 1,
                          resources, 0, placement, actor_id, 0, ctx.put_serialized, keep)
        ctx.control("create_actor", spec, resources, restarts, name, self.__name__,
                    task_retries, self._meta)
        return ActorHandle(actor_id, self.__name__, self._meta)

    def __reduce__(self):
        return (ActorClass, (self._cls, self._options, self._class_id))


class ActorMethod:
    __slots__ = ("_handle", "_name", "_num_returns")

    def __init__(self, handle: "ActorHandle", name: str, num_returns: int) -> None:
        self._handle = handle
        self._name = name
        self._num_returns = num_returns

    def remote(self, *args, **kwargs):
        return self._handle._call(self._name, args, kwargs, self._num_returns)

    def options(self, **options) -> "ActorMethod":
        check_options(options, METHOD_OPTIONS, f"method {self._name}")
        return ActorMethod(self._handle, self._name, num_returns_from(options))

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor method {self._name} cannot be called directly; "
                        f"use .{self._name}.remote(...)")


class ActorHandle:
    """A reference to an actor; pass it to tasks and other actors freely."""

    def __init__(self, actor_id: int, class_name: str, meta: dict[str, int]) -> None:
        self._actor_id = actor_id
        self._class_name = class_name
        self._meta = meta or {}

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_") and name not in self._meta and name != "__ray_terminate__":
            raise AttributeError(name)
        if name not in self._meta and name != "__ray_terminate__":
            raise AttributeError(f"actor {self._class_name} has no method {name!r}")
        method = ActorMethod(self, name, self._meta.get(name, 1))
        # Cached on the instance: the next `handle.name` is a plain attribute lookup.
        self.__dict__[name] = method
        return method

    def _call(self, name: str, args: tuple, kwargs: dict, num_returns: int):
        ctx = context.current()
        keep: list = []
        spec = build_spec(name, None, f"{self._class_name}.{name}", args, kwargs,
                          num_returns, None, 0, 0, self._actor_id, 0,
                          ctx.put_serialized, keep)
        ctx.submit(spec)
        refs = [context.ObjectRef(oid) for oid in spec[m.T_RETURNS]]
        return refs[0] if num_returns == 1 else refs

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._class_name, self._meta))

    def __repr__(self) -> str:
        return f"ActorHandle({self._class_name}, {self._actor_id:016x})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self) -> int:
        return hash(self._actor_id)


def get_actor(name: str) -> ActorHandle:
    """The handle of the actor created with ``options(name=name)``."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    actor_id, class_name, meta = context.current().control("get_actor", name)
    return ActorHandle(actor_id, class_name, meta)


def kill(actor: ActorHandle, no_restart: bool = True) -> None:
    """Kill an actor now; its pending and later calls raise ActorDiedError."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill() takes an actor handle, got {type(actor).__name__}")
    context.current().control("kill", actor._actor_id, no_restart)
