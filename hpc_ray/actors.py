"""Actors: ``@remote`` classes whose instances live in an executor on one rank."""
from __future__ import annotations

import inspect
import pickle
import weakref
from typing import Any

from .ignored_options import warn_given_options
from .remote_function import (_new_id, arg_check, check_options, num_returns_from,
                              remote_call_options, resources_from)
from .runtime import context
from .runtime.taskspec import build_spec, method_meta as _method_meta
from .transport import messages as m
from .transport.serialization import dumps_definition, register_by_name

#: Options an actor class accepts (0.7 names and modern ones).
ACTOR_OPTIONS = ("num_cpus", "num_gpus", "resources", "max_restarts", "max_reconstructions",
                 "max_task_retries", "name", "lifetime", "memory", "object_store_memory",
                 "namespace", "get_if_exists", "runtime_env", "max_concurrency",
                 "scheduling_strategy", "in_rank")
#: ``max_task_retries`` is modern Ray's name of a method's ``max_retries``.
METHOD_OPTIONS = ("num_returns", "num_return_vals", "max_retries", "max_task_retries")


def _method_retries(options: dict, default: int | None) -> int | None:
    """A call's retries as ``options`` give them, else ``default`` (None: as the
    actor's ``max_task_retries`` says, which the head reads)."""
    retries = options.get("max_retries", options.get("max_task_retries", default))
    if retries is default:
        return retries
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < -1:
        raise ValueError(f"max_retries must be an int >= -1, got {retries!r}")
    return retries


def method(*args, **kwargs):
    """Annotate an actor method: ``@method(num_returns=2, max_retries=1)``.

    ``max_retries`` (or ``max_task_retries``): how often a call lost with the
    actor's process runs again on the restarted actor (-1: always; 0: never;
    left out: as the actor's ``max_task_retries`` says).
    """
    if args and callable(args[0]) and len(args) == 1 and not kwargs:
        return args[0]
    check_options(kwargs, METHOD_OPTIONS, "method")
    num_returns = num_returns_from(kwargs)
    retries = _method_retries(kwargs, None)

    def decorate(fn):
        fn.__hpc_ray_num_returns__ = num_returns
        fn.__hpc_ray_max_retries__ = retries
        return fn
    return decorate


def _method_checks(cls: type, meta: dict[str, int]) -> dict:
    """Argument checks of each method (``self`` dropped, as a call through a handle)."""
    checks = {}
    for name in meta:
        raw = inspect.getattr_static(cls, name, None)
        if isinstance(raw, staticmethod):
            check = arg_check(raw.__func__, f"{cls.__name__}.{name}")
        elif isinstance(raw, classmethod):
            check = arg_check(getattr(cls, name), f"{cls.__name__}.{name}")
        elif inspect.isfunction(raw):
            check = arg_check(raw, f"{cls.__name__}.{name}", drop_first=True)
        else:
            check = None
        if check is not None:
            checks[name] = check
    return checks


def _init_check(cls: type):
    """The check of ``C.remote(...)``'s arguments against ``C.__init__``."""
    if cls.__new__ is not object.__new__:
        return None  # a custom __new__ may take anything
    if cls.__init__ is object.__init__:
        return arg_check(lambda: None, cls.__name__)
    return arg_check(cls.__init__, cls.__name__, drop_first=True)


#: class -> (method meta, method checks, constructor check): read once per class.
_CLASS_INFO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _class_info(cls: type) -> tuple:
    info = _CLASS_INFO.get(cls)
    if info is None:
        meta = _method_meta(cls)
        info = _CLASS_INFO[cls] = (meta, _method_checks(cls, meta), _init_check(cls))
    return info


#: Names of ``ActorClass`` itself, never forwarded to the user's class.
_OWN_NAMES = frozenset(("remote", "options", "_remote", "_cls", "_options", "_class_id",
                        "_meta", "_blob", "_checks", "_init_check", "__mro_entries__"))


class ActorClass:
    """What ``@remote`` makes of a class: ``C.remote(*args)`` creates an actor."""

    def __init__(self, cls: type, options: dict, class_id: int | None = None) -> None:
        check_options(options, ACTOR_OPTIONS, f"actor class {cls.__name__}")
        if inspect.isabstract(cls):
            raise TypeError(f"actor class {cls.__name__} is abstract: implement "
                            f"{sorted(cls.__abstractmethods__)}")
        self._cls = cls
        self._options = options
        self._class_id = class_id if class_id is not None else _new_id()
        self._meta, self._checks, self._init_check = _class_info(cls)
        self._blob: bytes | None = None
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__
        # Validate now so a bad option fails at decoration, not at first use.
        resources_from(options, 0, cls.__name__)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor class {self.__name__} cannot be instantiated directly; "
                        f"use {self.__name__}.remote(...)")

    def __mro_entries__(self, bases: tuple):
        # ``class B(A)`` with an actor class A: Python asks A for B's real bases.
        # Ray 0.7's words (its ActorClass metaclass also named the subclass,
        # which Python does not tell a base at this point).
        raise TypeError(f"Attempted to define a subclass of actor class "
                        f"'{self.__name__}'. Inheriting from actor classes is not "
                        f"currently supported. You can instead inherit from a non-actor "
                        f"base class and make the derived class an actor class "
                        f"(with @ray.remote).")

    def __getattr__(self, name: str) -> Any:
        # Class attributes and static/class methods, reachable as in Ray 0.7
        # (``Counter.LIMIT``, ``Counter.helper()``); instance methods need an actor.
        if name.startswith("__") or name in _OWN_NAMES:
            raise AttributeError(name)
        raw = inspect.getattr_static(self._cls, name)  # AttributeError if absent
        if inspect.isfunction(raw):
            raise AttributeError(f"{name!r} is a method of actor class {self.__name__}: "
                                 f"call it on an actor, {self.__name__}.remote().{name}"
                                 f".remote(...)")
        return getattr(self._cls, name)

    def options(self, **options) -> "ActorClass":
        warn_given_options(options, f"actor class {self.__name__}")
        merged = dict(self._options)
        merged.update(options)
        copy = ActorClass(self._cls, merged, self._class_id)
        copy._blob = self._blob
        return copy

    def _remote(self, args: tuple | list | None = None, kwargs: dict | None = None,
                **options) -> "ActorHandle":
        """Ray 0.7's creation with options: ``C._remote(args=[1], num_cpus=1)``."""
        opts = remote_call_options(f"actor class {self.__name__}", ACTOR_OPTIONS, **options)
        cls = self.options(**opts) if opts else self
        return cls.remote(*(args or ()), **(kwargs or {}))

    def remote(self, *args, **kwargs) -> "ActorHandle":
        if self._init_check is not None:
            self._init_check(args, kwargs)
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
            self._blob = dumps_definition(self._cls, "actor class", self.__name__, stacklevel=3)
        actor_id = _new_id()
        ctx.register_function(self._class_id, self._cls)
        keep: list = []
        # An hpc_ray extension: in_rank=True runs the actor in its rank's own process,
        # with MPI (see hpc_ray.collective.get_communicator), without crash isolation.
        placement = m.IN_RANK if opts.get("in_rank") else 0
        spec = build_spec(self._class_id, self._blob, self.__name__, args, kwargs, 1,
                          resources, 0, placement, actor_id, 0, ctx.put_serialized, keep)
        # A creation spec's retries field carries the calls' retries: the actor's
        # process takes direct calls (runtime/peer_calls.py) only without them.
        spec[m.T_RETRIES] = task_retries
        # The actor lives while some process holds a handle to it (as in Ray): each
        # handle carries a ref to this token, counted like any object ref; when the
        # head frees the token, the actor ends once its pending calls are done.
        # Named and detached actors live until killed.
        detached = name is not None or opts.get("lifetime") == "detached"
        lifetime = None if detached else ctx.put(None)
        ctx.control("create_actor", spec, resources, restarts, name, self.__name__,
                    task_retries, self._meta, None if lifetime is None else lifetime.id)
        return ActorHandle(actor_id, self.__name__, self._meta, self._checks, lifetime)

    def __reduce__(self):
        return (ActorClass, (self._cls, self._options, self._class_id))


class ActorMethod:
    """``handle.name``: ``.remote(...)`` calls the actor's method ``name``.

    It keeps the handle's ``_target`` (actor id, class name, lifetime ref), not
    the handle: the handle keeps its methods (``a.m`` in a loop costs a lookup,
    not a new object), and a method that kept the handle would make a cycle
    that kept a dropped handle (and so its actor) alive until the next garbage
    collection of the process.
    """

    __slots__ = ("_target", "_name", "_call_name", "_num_returns", "_check", "_max_retries")

    def __init__(self, target: tuple, name: str, num_returns: int,
                 check=None, max_retries: int | None = None) -> None:
        self._target = target
        self._name = name
        #: The calls' name in tasks() and the timeline: "Class.method".
        self._call_name = f"{target[1]}.{name}"
        self._num_returns = num_returns
        self._check = check
        #: Retries of a call lost with the actor's process (None: the actor's
        #: max_task_retries); needs max_restarts to have an actor to retry on.
        self._max_retries = max_retries

    def remote(self, *args, **kwargs):
        check = self._check
        if check is not None and (kwargs or not check.lo <= len(args) <= check.hi):
            check(args, kwargs)
        actor_id, _, lifetime = self._target
        num_returns = self._num_returns
        ctx = context.current()
        keep: list = []    # large arguments' ref, held until the call is submitted
        spec = build_spec(self._name, None, self._call_name, args, kwargs,
                          num_returns or 1, None, self._max_retries, 0, actor_id, 0,
                          ctx.put_serialized, keep)
        ctx.submit_call(spec, lifetime)
        if num_returns == 1:
            return context.ObjectRef(spec[m.T_RETURNS][0])
        if not num_returns:   # (the result is dropped: as in Ray, None)
            return None
        return [context.ObjectRef(oid) for oid in spec[m.T_RETURNS]]

    def options(self, **options) -> "ActorMethod":
        check_options(options, METHOD_OPTIONS, f"method {self._name}")
        retries = _method_retries(options, self._max_retries)
        num_returns = (num_returns_from(options) if "num_returns" in options
                       or "num_return_vals" in options else self._num_returns)
        return ActorMethod(self._target, self._name, num_returns, self._check, retries)

    def _remote(self, args: tuple | list | None = None, kwargs: dict | None = None,
                num_return_vals: int | None = None, num_returns: int | None = None,
                **options):
        """Ray 0.7's call with options: ``a.f._remote(args=[1], num_return_vals=2)``;
        ``num_return_vals=0`` returns None (the call runs; its value is dropped)."""
        opts = remote_call_options(f"method {self._name}", METHOD_OPTIONS,
                                   num_return_vals, num_returns, **options)
        method = self.options(**opts) if opts else self
        return method.remote(*(args or ()), **(kwargs or {}))

    def __call__(self, *args, **kwargs):
        raise TypeError(f"actor method {self._name} cannot be called directly; "
                        f"use .{self._name}.remote(...)")


class ActorHandle:
    """A reference to an actor; pass it to tasks and other actors freely."""

    def __init__(self, actor_id: int, class_name: str, meta: dict[str, tuple[int, int]],
                 checks: dict | None = None, lifetime=None) -> None:
        self._actor_id = actor_id
        self._class_name = class_name
        self._meta = meta or {}
        #: A ref to the actor's lifetime token (None: named or detached).
        self._lifetime = lifetime
        #: Argument checks per method (travel with the handle; not in handles
        #: from get_actor(), which has only the method table).
        self._checks = checks or {}
        self._target = (actor_id, class_name, lifetime)
        #: The class's part of the handle, pickled (``__reduce__``), once.
        self._class_blob: bytes | None = None

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_") and name not in self._meta and name != "__ray_terminate__":
            raise AttributeError(name)
        if name not in self._meta and name != "__ray_terminate__":
            raise AttributeError(f"actor {self._class_name} has no method {name!r}")
        num_returns, retries = self._meta.get(name, (1, None))
        method = ActorMethod(self._target, name, num_returns, self._checks.get(name), retries)
        if not name.startswith("_"):
            # Kept as an attribute: the next ``handle.name`` finds it without this call.
            self.__dict__[name] = method
        return method

    def __reduce__(self):
        # The class's part (name, method table, argument checks) goes as bytes
        # pickled once per handle, and a process unpickles it once per class
        # (``_CLASS_PARTS``): the checks' signatures are not rebuilt for every
        # task that takes the handle. The lifetime ref stays an object of the
        # pickle, so the head learns of it as of any nested ref.
        blob = self._class_blob
        if blob is None:
            blob = self._class_blob = pickle.dumps(
                (self._class_name, self._meta, self._checks), pickle.HIGHEST_PROTOCOL)
        return (_rebuild_handle, (self._actor_id, blob, self._lifetime))

    def __repr__(self) -> str:
        return f"ActorHandle({self._class_name}, {self._actor_id:016x})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self) -> int:
        return hash(self._actor_id)


#: A handle's pickled class part -> (class name, method table, argument checks):
#: the handles of one class unpickled in a process share them. Cleared when it
#: holds MAX_CLASS_PARTS (classes made on the fly, one per call).
_CLASS_PARTS: dict[bytes, tuple] = {}
MAX_CLASS_PARTS = 256


def _rebuild_handle(actor_id: int, blob: bytes, lifetime) -> ActorHandle:
    parts = _CLASS_PARTS.get(blob)
    if parts is None:
        if len(_CLASS_PARTS) >= MAX_CLASS_PARTS:
            _CLASS_PARTS.clear()
        parts = _CLASS_PARTS[blob] = pickle.loads(blob)
    handle = ActorHandle(actor_id, *parts, lifetime)
    handle._class_blob = blob
    return handle


register_by_name(ActorHandle)


def get_actor(name: str, namespace: str | None = None) -> ActorHandle:
    """The handle of the actor created with ``options(name=name)`` (a job is one
    namespace: ``namespace`` is accepted, with a warning, and not used)."""
    if namespace:
        from .ignored_options import WITHOUT_EFFECT, warn_without_effect
        warn_without_effect(f"get_actor(namespace={namespace!r})", WITHOUT_EFFECT["namespace"])
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    actor_id, class_name, meta = context.current().control("get_actor", name)
    return ActorHandle(actor_id, class_name, meta)


def kill(actor: ActorHandle, no_restart: bool = True) -> None:
    """Kill an actor now; its pending and later calls raise ActorDiedError."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill() takes an actor handle, got {type(actor).__name__}")
    context.current().control("kill", actor._actor_id, bool(no_restart))
