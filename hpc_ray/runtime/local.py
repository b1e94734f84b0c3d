"""``init(local_mode=True)``: every task runs at once, serially, in the driver."""
from __future__ import annotations

import copy
import inspect
import os
import socket
import time
import traceback
from typing import Any

from ..exceptions import ActorDiedError, TaskError, WorkerCrashedError
from ..transport import messages as m
from ..transport.serialization import INLINE, dumps, loads
from . import context, hooks, taskspec
from .signals import ActorDiedSignal, ErrorSignal, source_of
from .task_failures import exit_call


class LocalContext(context.ContextBase):
    is_driver = True
    rank = 0

    def __init__(self) -> None:
        self.values: dict[int, tuple[bool, Any]] = {}
        self.fns: dict = {}
        self.actors: dict[int, Any] = {}
        self.actor_names: dict[str, tuple] = {}
        self.events: list = []
        self.gpu_ids: list[int] = []
        self.world = {"size": 1}
        self.job_id = "local"
        #: Signals by source (("task", id) or ("actor", id)), and each return id's
        #: task, as the head keeps them (``experimental.signal``).
        self.signals: dict = {}
        self.task_of: dict[int, int] = {}

    def hold_refs(self, ids) -> None:
        pass

    def register_function(self, fn_id, fn) -> None:
        """Local mode calls the function object itself, as Ray 0.7 does (no copy)."""
        self.fns[fn_id] = fn

    put_serialized = None  # local mode passes arguments by value

    def record_profile(self, event: dict) -> None:
        self.events.append(event)

    def _read(self, oid: int, rec) -> Any:
        ok, value = self.values[oid]
        if not ok:
            raise value
        return value

    def _args(self, spec: list) -> tuple[list, dict]:
        """Writable copies of the call's arguments, as Ray 0.7's local mode passes them
        (a task may change its numpy arguments in place without touching the caller's)."""
        payload = spec[m.T_PAYLOAD]
        if payload[0] == INLINE:  # out-of-band buffers as bytearrays: writable arrays
            payload = (INLINE, payload[1], [bytearray(b) for b in payload[2]])
        deps = [(pos, oid, None) for pos, oid in spec[m.T_DEPS]]
        return taskspec.load_args(payload, deps, self._read_copy)

    def _read_copy(self, oid: int, rec) -> Any:
        value = self._read(oid, rec)
        try:
            return copy.deepcopy(value)
        except Exception:  # locks, sockets...: pass the object itself
            return value

    def _method(self, actor: Any, name: str):
        """The class's method: an instance attribute of the same name does not hide it."""
        raw = inspect.getattr_static(type(actor), name, False)
        if raw is False or not hasattr(raw, "__get__"):
            return getattr(actor, name)
        return raw.__get__(actor, type(actor))

    def submit(self, spec: list) -> None:
        fn_id = spec[m.T_FN]
        if spec[m.T_BLOB] is not None and fn_id not in self.fns:
            self.fns[fn_id] = loads(spec[m.T_BLOB])
        t0 = time.time()
        actor_id, task_id = spec[m.T_ACTOR], spec[m.T_ID]
        for oid in spec[m.T_RETURNS]:
            self.task_of[oid] = task_id
        # The call runs here, on the caller's stack: it is the current task (or
        # actor) while it runs, for signals and exit_actor().
        outer = self.actor_id, self.current_task_id
        self.actor_id, self.current_task_id = actor_id, task_id
        try:
            self._run(spec, fn_id, actor_id)
        finally:
            self.actor_id, self.current_task_id = outer
        self.events.append((spec[m.T_NAME], 0, t0, time.time(), os.getpid(), spec[m.T_ID]))

    def _run(self, spec: list, fn_id, actor_id: int | None) -> None:
        # Run inline, as a task nested in the caller's process: its reusable
        # variables are its own, reinitialized after it (as on a worker).
        reusables = hooks.nested_begin()
        try:
            self._run_inline(spec, fn_id, actor_id)
        finally:
            hooks.after_task()
            hooks.nested_end(reusables)

    def _run_inline(self, spec: list, fn_id, actor_id: int | None) -> None:
        try:
            args, kwargs = self._args(spec)
            if actor_id is not None:
                actor = self.actors.get(actor_id)
                if actor is None:
                    raise ActorDiedError(f"actor for {spec[m.T_NAME]} is dead")
                result = self._method(actor, fn_id)(*args, **kwargs)
                if inspect.iscoroutine(result):   # an async def method
                    from .asyncio_compat import run_method
                    result = run_method(result)
            else:
                result = self.fns[fn_id](*args, **kwargs)
            n = len(spec[m.T_RETURNS])
            vals = [result] if n == 1 else list(result)
            if len(vals) != n:
                raise ValueError(f"{spec[m.T_NAME]} has num_returns={n} but returned "
                                 f"{len(vals)} values")
            for oid, v in zip(spec[m.T_RETURNS], vals):
                self.values[oid] = (True, v)
        except BaseException as exc:
            if isinstance(exc, SystemExit) and actor_id is not None:
                self.actors.pop(actor_id, None)
                err = ActorDiedError(f"actor method {spec[m.T_NAME]} called "
                                     f"{exit_call(exc)}: the actor has exited")
            elif isinstance(exc, SystemExit):
                err = WorkerCrashedError(f"task {spec[m.T_NAME]} called {exit_call(exc)}")
            elif isinstance(exc, (TaskError, ActorDiedError)):
                err = exc
            else:
                tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                err = TaskError(spec[m.T_NAME], tb, 0, socket.gethostname(),
                                exc).as_instanceof_cause()
            for oid in spec[m.T_RETURNS]:
                self.values[oid] = (False, err)
            signal = ActorDiedSignal if isinstance(err, ActorDiedError) else ErrorSignal
            self._signal(actor_id, spec[m.T_ID], dumps(signal(err)))

    def _signal(self, actor_id: int | None, task_id: int | None, blob: bytes) -> None:
        key = ("actor", actor_id) if actor_id is not None else ("task", task_id)
        self.signals.setdefault(key, []).append(blob)

    def _signal_source(self, key) -> tuple:
        return source_of(key, self.task_of)

    def get(self, refs: list, timeout) -> list:
        return [self._read(r.id, None) for r in refs]

    def put(self, value: Any) -> context.ObjectRef:
        oid = context.new_ids(1)
        self.values[oid] = (True, value)
        return context.ObjectRef(oid)

    def wait(self, ids: list[int], num_returns: int, timeout) -> set[int]:
        return set(ids[:num_returns])

    def control(self, name: str, *args) -> Any:
        if name == "create_actor":
            spec, resources, max_restarts, aname, class_name = args[:5]
            cls = self.fns.get(spec[m.T_FN]) or loads(spec[m.T_BLOB])
            deps = [(pos, oid, None) for pos, oid in spec[m.T_DEPS]]
            a, kw = taskspec.load_args(spec[m.T_PAYLOAD], deps, self._read)
            self.actors[spec[m.T_ACTOR]] = cls(*a, **kw)
            if aname is not None:
                self.actor_names[aname] = (spec[m.T_ACTOR], class_name, args[6] if len(args) > 6 else None)
            return None
        if name == "get_actor":
            if args[0] not in self.actor_names:
                raise ValueError(f"no actor named {args[0]!r}")
            return self.actor_names[args[0]]
        if name == "register_actor":
            aname, actor_id = args
            if aname in self.actor_names:
                raise ValueError(f"an actor named {aname!r} already exists")
            cls = type(self.actors[actor_id])
            self.actor_names[aname] = (actor_id, cls.__name__, taskspec.method_meta(cls))
            return None
        if name in ("actor_checkpoints", "pushed_errors"):
            return []
        if name == "failure_texts":
            return {}
        if name == "set_resource":
            return None
        if name == "kill":
            self.actors.pop(args[0], None)
            return None
        if name in ("cluster_resources", "available_resources"):
            return {"CPU": float(os.cpu_count() or 1)}
        if name == "nodes":
            return [{"NodeID": "node-0", "ClientID": "node-0",
                     "NodeManagerHostname": socket.gethostname(),
                     "Alive": True, "Resources": {"CPU": os.cpu_count()}, "Ranks": [0]}]
        if name == "timeline":
            return list(self.events)
        if name == "run_function":
            return None
        if name in ("tasks", "objects"):
            return {}
        if name == "signal_poll":
            sent = [(key, self.signals.get(self._signal_source(key), [])[cursor:], cursor)
                    for key, cursor in args[0]]
            return [(key, blobs, cursor + len(blobs)) for key, blobs, cursor in sent]
        if name == "signal_send":
            self._signal(*args)
            return None
        raise ValueError(f"unknown control call {name!r}")
