"""``@remote`` functions: options, submission, and shipping to workers once."""
from __future__ import annotations

import inspect
import os
import weakref
from typing import Any, Callable

from .ignored_options import warn_given_options
from .runtime import context
from .runtime.taskspec import build_spec
from .transport import messages as m
from .transport.serialization import dumps_definition

#: Options a remote function accepts (Ray 0.7 names and the modern ones).
FUNCTION_OPTIONS = ("num_returns", "num_return_vals", "num_cpus", "num_gpus", "resources",
                    "max_calls", "max_retries", "memory", "object_store_memory", "name",
                    "runtime_env", "scheduling_strategy")
#: Ray's default: a task whose process dies is retried 3 times (exceptions are not).
DEFAULT_MAX_RETRIES = 3


def _new_id() -> int:
    return int.from_bytes(os.urandom(8), "little")


#: Ray 0.2's options that 0.7 dropped, and what to pass instead (named in the error).
RAY_02_OPTIONS = {"num_custom_resource": "resources={'CustomResource': n}",
                  "checkpoint_interval": "an actor class that subclasses "
                                         "hpc_ray.actor.Checkpointable"}


def check_options(options: dict, valid: tuple, what: str) -> None:
    for key in options:
        if key not in valid:
            hint = (f"; Ray 0.2's {key} is gone since 0.7: use {RAY_02_OPTIONS[key]}"
                    if key in RAY_02_OPTIONS else "")
            raise ValueError(f"unknown option {key!r} for {what} (valid: {sorted(valid)}){hint}")
    lifetime = options.get("lifetime")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(f"lifetime for {what} must be 'detached', 'non_detached' or None, "
                         f"got {lifetime!r}")


def resources_from(options: dict, default_cpus: float, what: str) -> dict | None:
    """The resource request, or None for the default (1 CPU) on the hot path."""
    num_cpus = options.get("num_cpus")
    num_gpus = options.get("num_gpus")
    custom = options.get("resources") or {}
    if not isinstance(custom, dict):
        raise TypeError(f"resources must be a dict, got {type(custom).__name__}")
    for k, v in custom.items():
        if k in ("CPU", "GPU"):
            raise ValueError(f"use num_cpus/num_gpus instead of resources={{{k!r}: ...}}")
        if not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"resource {k!r} must be a number >= 0, got {v!r}")
    for name, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
        if v is not None and (not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"{name} must be a number >= 0, got {v!r}")
    # A request of one unit or less may be a fraction (tasks share the unit, a GPU
    # by id); above one it takes whole units, as Ray's check at decoration says.
    for name, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus), *(
            (f"resources[{k!r}]", v) for k, v in custom.items())):
        if v is not None and v > 1 and v != int(v):
            raise ValueError(f"Resource quantities >1 must be whole numbers: {name} "
                             f"of {what} is {v!r}")
    if num_cpus is None and not num_gpus and not custom:
        return None if default_cpus == 1 else {"CPU": default_cpus}
    res = {"CPU": default_cpus if num_cpus is None else num_cpus}
    if num_gpus:
        res["GPU"] = num_gpus
    res.update(custom)
    return res


def num_returns_from(options: dict) -> int:
    """How many refs a call returns: 0 runs it for its effects and returns None
    (as in Ray; its one result is dropped, an error shows in ``errors()``)."""
    n = options.get("num_returns", options.get("num_return_vals", 1))
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"num_returns must be an int >= 0, got {n!r}")
    return n


# --- argument checks at .remote() ---------------------------------------------------

class ArgCheck:
    """Checks a call's arguments against a signature, as calling the function would.

    The common call (positional arguments only, a count within range) costs two
    comparisons; anything else binds against the signature, once.
    """

    __slots__ = ("name", "signature", "lo", "hi")

    def __init__(self, name: str, signature: inspect.Signature) -> None:
        self.name = name
        self.signature = signature
        params = list(signature.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
        self.lo = sum(1 for p in positional if p.default is p.empty)
        self.hi = (1 << 30) if any(p.kind == p.VAR_POSITIONAL for p in params) \
            else len(positional)
        if any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in params):
            self.lo = self.hi + 1  # a required keyword: a call without kwargs fails

    def __call__(self, args: tuple, kwargs: dict) -> None:
        if kwargs or not self.lo <= len(args) <= self.hi:
            try:
                self.signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{self.name}() {exc}") from None

    def __reduce__(self):
        # Travels with actor handles: only what binding needs (names, kinds, whether
        # there is a default), never the defaults themselves (maybe unpicklable).
        params = tuple((p.name, int(p.kind), p.default is not p.empty)
                       for p in self.signature.parameters.values())
        return (_rebuild_check, (self.name, params))


def _rebuild_check(name: str, params: tuple) -> ArgCheck:
    P = inspect.Parameter
    return ArgCheck(name, inspect.Signature([
        P(pname, inspect._ParameterKind(kind), default=None if has_default else P.empty)
        for pname, kind, has_default in params]))


#: function -> its ArgCheck: read once per function, not per ``options()`` copy.
_CHECKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def function_check(fn: Any, name: str) -> ArgCheck | None:
    """``arg_check(fn, name)``, cached per function."""
    try:
        return _CHECKS[fn]
    except KeyError:
        check = _CHECKS[fn] = arg_check(fn, name)
        return check
    except TypeError:  # not weak-referenceable
        return arg_check(fn, name)


def arg_check(fn: Any, name: str, drop_first: bool = False) -> ArgCheck | None:
    """An ``ArgCheck`` for ``fn``, or None when its signature cannot be read."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if drop_first:
        params = list(sig.parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                                params[0].POSITIONAL_OR_KEYWORD):
            return None  # (*args) methods: nothing to check
        sig = sig.replace(parameters=params[1:])
    return ArgCheck(name, sig)


def remote_call_options(what: str, valid: tuple, num_return_vals=None, num_returns=None,
                        **options) -> dict:
    """The options ``_remote(...)`` was given (None means: not given)."""
    opts = {k: v for k, v in options.items() if v is not None}
    if num_returns is not None:
        opts["num_returns"] = num_returns
    elif num_return_vals is not None:
        opts["num_returns"] = num_return_vals
    check_options(opts, valid, what)
    return opts


class RemoteFunction:
    """A function whose calls run as tasks: ``f.remote(*args)`` returns refs."""

    def __init__(self, function: Callable, options: dict, fn_id: int | None = None) -> None:
        check_options(options, FUNCTION_OPTIONS, f"remote function {function.__name__}")
        self._function = function
        self._options = options
        self._fn_id = fn_id if fn_id is not None else _new_id()
        self._name = getattr(function, "__qualname__", function.__name__)
        self._num_returns = num_returns_from(options)
        self._resources = resources_from(options, 1, self._name)
        retries = options.get("max_retries", DEFAULT_MAX_RETRIES)
        if not isinstance(retries, int) or retries < -1:
            raise ValueError(f"max_retries must be an int >= -1, got {retries!r}")
        self._max_retries = 1 << 30 if retries == -1 else retries
        max_calls = options.get("max_calls", 0) or 0
        if not isinstance(max_calls, int) or max_calls < 0:
            raise ValueError(f"max_calls must be an int >= 0, got {max_calls!r}")
        self._max_calls = max_calls
        self._blob: bytes | None = None
        #: The context (session, in the driver) the blob was pickled for: a new
        #: session pickles the function again, with its globals as they are then.
        self._blob_ctx: object = None
        self._shipped_by: object = None
        self._check = function_check(function, self._name)
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__
        self.__wrapped__ = function
        # An attribute, as in Ray 0.7: a decorator above ``@remote`` that copies
        # ``__dict__`` (``functools.wraps``) keeps ``.remote``.
        self.remote = self._submit

    def __call__(self, *args, **kwargs):
        raise TypeError(f"remote function {self._name} cannot be called directly; "
                        f"use {self.__name__}.remote(...)")

    def _blob_for(self, ctx) -> bytes | None:
        """The pickled function, sent until a submission of this process carried it.

        ``remote()`` marks it shipped only once that submission was handed to the
        context: a thread that then sees it shipped submits after it, on the same
        ordered channel (two threads of a task may both send it; the head keeps one).
        """
        if self._shipped_by is ctx:
            return None
        ctx.register_function(self._fn_id, self._function)  # local mode calls it directly
        if self._blob is None or self._blob_ctx is not ctx:
            self._blob = dumps_definition(self._function, "remote function", self._name,
                                          stacklevel=4)
            self._blob_ctx = ctx
        return self._blob

    def _submit(self, *args, **kwargs):
        """``f.remote(*args, **kwargs)``: run the function as a task; its ref(s)."""
        check = self._check
        if check is not None and (kwargs or not check.lo <= len(args) <= check.hi):
            check(args, kwargs)
        ctx = context.current()
        keep: list = []
        blob = self._blob_for(ctx)
        n = self._num_returns
        spec = build_spec(self._fn_id, blob, self._name, args, kwargs,
                          n or 1, self._resources, self._max_retries,
                          self._max_calls, None, 0, ctx.put_serialized, keep)
        # (Held, its blob has not left: the next submission carries it too, so
        # that one sent before this one does not reach the head without it.)
        if ctx.submit(spec) is not False and blob is not None:
            self._shipped_by = ctx
        refs = [context.ObjectRef(oid) for oid in spec[m.T_RETURNS]]
        return refs[0] if n == 1 else (refs if n else None)

    def options(self, **options) -> "RemoteFunction":
        """A copy with some options replaced (``f.options(num_cpus=2).remote()``)."""
        warn_given_options(options, f"remote function {self._name}")
        merged = dict(self._options)
        merged.update(options)
        merged.pop("name", None)
        copy = RemoteFunction(self._function, merged, self._fn_id)
        copy._blob, copy._blob_ctx = self._blob, self._blob_ctx
        return copy

    def _remote(self, args: tuple | list | None = None, kwargs: dict | None = None,
                num_return_vals: int | None = None, num_returns: int | None = None,
                **options):
        """Ray 0.7's call with options: ``f._remote(args=[1], num_cpus=2)``
        (``num_return_vals=0`` runs the task for its effects and returns None)."""
        opts = remote_call_options(f"remote function {self._name}", FUNCTION_OPTIONS,
                                   num_return_vals, num_returns, **options)
        fn = self.options(**opts) if opts else self
        return fn.remote(*(args or ()), **(kwargs or {}))

    def __reduce__(self):
        return (_rebuild, (self._function, self._options, self._fn_id))

    def __repr__(self) -> str:
        return f"<hpc_ray remote function {self._name}>"


def _rebuild(function, options, fn_id) -> RemoteFunction:
    return RemoteFunction(function, options, fn_id)
