"""The public API: argument checks, then a call into the process's runtime context."""
from __future__ import annotations

import atexit
import contextlib
import inspect
import json
import os
import socket
import sys
import threading
import time
import warnings
from typing import Any, Iterator

from . import launch
from .actors import ActorClass, ActorHandle, get_actor, kill, method  # noqa: F401
from .custom_serializers import register_custom_serializer  # noqa: F401
from .exceptions import RayError
from .ignored_options import warn_given_options, warn_ignored_init
from .remote_function import RemoteFunction
from .runtime import context, launched
from .runtime.context import ObjectRef
from .transport.serialization import dumps

#: ``init()`` keywords of Ray 0.7 that mean nothing on an MPI job; accepted and ignored.
_IGNORED_INIT_ARGS = (
    "address", "redis_address", "redis_max_memory", "log_to_driver", "node_ip_address",
    "object_id_seed", "redirect_worker_output", "redirect_output", "num_redis_shards",
    "redis_max_clients", "redis_password", "plasma_directory", "huge_pages",
    "include_webui", "include_dashboard", "dashboard_host", "dashboard_port", "job_id",
    "configure_logging", "logging_level", "logging_format", "plasma_store_socket_name",
    "raylet_socket_name", "temp_dir", "load_code_from_local", "_internal_config",
    "namespace", "runtime_env", "_temp_dir", "_system_config", "num_workers",
    "start_ray_local",
)

#: Ray 0.2's ``init()`` keywords that 0.7 dropped, and what to pass instead.
_RAY_02_INIT_ARGS = {"driver_mode": "local_mode=True (for driver_mode=ray.PYTHON_MODE)",
                     "num_custom_resource": "resources={'CustomResource': n}"}

_session = None
_lock = threading.RLock()
#: Functions given to run_function_on_all_workers() before init(): run at start-up.
_pending_functions: list = []
#: Set when an mpiexec job's workers were shut down: they cannot come back.
_mpi_workers_gone = False
#: COMM_WORLD of a launch whose rank 0 runs in local mode while its worker ranks
#: wait for a session (``_launched_world``); None once one starts.
_parked_world = None


def init(address: str | None = None, *, num_cpus: int | None = None,
         num_gpus: int | None = None, resources: dict | None = None,
         object_store_memory: int | None = None, local_mode: bool = False,
         ignore_reinit_error: bool = False, **kwargs) -> dict:
    """Start hpc_ray in this job, or join it as a worker rank.

    Under ``mpiexec`` rank 0 returns and runs the script; every other rank serves
    as a worker inside this call and exits when the driver is done. Without a
    launcher, ``num_cpus`` worker processes are spawned on this machine.

    Args:
        num_cpus: embedded mode: the number of worker processes (default: the
            machine's cores); under mpiexec: CPUs per worker rank (default 1, or
            ``SLURM_CPUS_PER_TASK``). ``0`` makes a cluster without CPUs, as in
            Ray: only ``num_cpus=0`` tasks and actors run (embedded: on one
            worker process that holds no CPU); ``local_mode`` ignores it.
        num_gpus: GPUs per node (embedded: of this machine), their ids split
            over the node's worker ranks. Where ``CUDA_VISIBLE_DEVICES`` is set
            the ids are its first ``num_gpus`` (``"2,3"`` and ``num_gpus=2``:
            tasks get GPUs 2 and 3, as in Ray); more than it lists is a
            ``ValueError``.
        resources: custom resources, e.g. ``{"ssd": 1}``: once, on the node of
            the first worker rank (shared by its ranks), as Ray gives them to
            the head's node; ``experimental.set_resource`` adds them elsewhere.
        object_store_memory: bytes of shared memory per node for large objects.
        local_mode: run every task serially in this process, for debugging.
        ignore_reinit_error: make a second ``init()`` a no-op instead of an error.
        log_to_driver: (keyword) print what tasks and actors print on this
            process's ``sys.stdout``/``sys.stderr``, each line prefixed
            ``(pid=…, rank=…)`` (default True); False leaves it in the worker
            ranks' own output.

    Returns:
        A dict describing the job (``job_id``, ``world_size``, ``mode``).

    Raises:
        RayError: if called twice without ``ignore_reinit_error``.
    """
    global _session
    unknown = [k for k in kwargs if k not in _IGNORED_INIT_ARGS]
    if unknown:
        hints = [f"{k}: use {_RAY_02_INIT_ARGS[k]}" for k in unknown if k in _RAY_02_INIT_ARGS]
        raise TypeError(f"init() got unexpected keyword argument(s) {unknown}"
                        + (f" (Ray 0.2's, gone since 0.7; {'; '.join(hints)})" if hints else ""))
    if resources is not None and not isinstance(resources, dict):
        raise TypeError(f"resources must be a dict, got {type(resources).__name__}")
    for key, amount in (resources or {}).items():
        if key in ("CPU", "GPU"):
            raise ValueError(f"use num_cpus/num_gpus instead of resources={{{key!r}: ...}}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(f"resources={{{key!r}: {amount!r}}}: a resource's amount must "
                             f"be a number >= 0")
    if num_cpus is not None and (not isinstance(num_cpus, int) or isinstance(num_cpus, bool)
                                 or num_cpus < 0):
        raise ValueError(f"num_cpus must be an int >= 0, got {num_cpus!r}")
    with _lock:
        if _session is not None:
            if ignore_reinit_error:
                return _session_info()
            raise RayError("hpc_ray.init() was already called; call shutdown() first "
                           "or pass ignore_reinit_error=True")
        if context.is_set():
            # A task or actor: its process already belongs to the session. Started
            # here, a second session would take the process's later tasks with it.
            if ignore_reinit_error:
                return None
            raise RayError("hpc_ray.init() called in a task or actor, whose process "
                           "already belongs to the session: call init() in the driver "
                           "only (or pass ignore_reinit_error=True)")
        if local_mode:
            world = _launched_world()
            if world is not None and world.Get_rank() != 0:
                launch.worker_exit(launch.run_worker(world))
            _park_workers(world)
            warn_ignored_init(dict(kwargs, address=address))
            from .runtime.local import LocalContext
            ctx = LocalContext()
            context.set_id_prefix(0, 0)
            context.set_current(ctx)
            _session = ("local", ctx)
            atexit.register(shutdown)
            _run_pending_functions()
            return _session_info()
        MPI = launch.mpi()
        world = MPI.COMM_WORLD
        if world.Get_size() > 1 and _mpi_workers_gone:
            raise RayError("hpc_ray was shut down in this mpiexec job and its worker ranks "
                           "have exited; init() can start only once per mpiexec job "
                           "(embedded mode can start again)")
        if world.Get_size() > 1 and world.Get_rank() != 0:
            # A worker rank: serve until the driver is done, never return.
            gone = launch.run_worker(world)
            launch.worker_exit(gone)
        warn_ignored_init(dict(kwargs, address=address))
        from .runtime.session import check_num_gpus, start_driver, store_size
        if world.Get_size() > 1:
            # Rank 0: if init() fails before its set-up reaches the waiting
            # ranks, they leave when the script ends (``_park_workers``).
            _park_workers(world)
        check_num_gpus(num_gpus)
        object_store_memory = store_size(object_store_memory)
        global _parked_world
        _parked_world = None     # start_driver's set-up reaches the waiting ranks
        # Ray's log_to_driver: what tasks and actors print shows up here, prefixed.
        context.log_to_driver = bool(kwargs.get("log_to_driver", True))
        from .runtime.interrupts import deferred
        # A Ctrl-C once start_driver has put hpc_ray's handler in waits until the
        # session is known (and shut down at exit): between the two it was lost,
        # with its worker ranks running.
        with deferred():
            session = start_driver(num_cpus, num_gpus, resources, object_store_memory)
            context.set_current(session.ctx)
            _session = ("mpi", session)
            atexit.register(shutdown)
        try:
            from . import preempt
            preempt.install_preempt_handler()
        except (ImportError, AttributeError, ValueError):
            pass  # not in the main thread, or no preempt support
        _run_pending_functions()
        return _session_info()


def _launched_world():
    """COMM_WORLD where this process is one of several ranks of a launch, else
    None (a plain ``python`` run: local mode starts no MPI)."""
    if "mpi4py.MPI" not in sys.modules and not launched.under_launcher():
        return None
    world = launch.mpi().COMM_WORLD
    return world if world.Get_size() > 1 else None


def _park_workers(world) -> None:
    """Rank 0 of a launch runs without a session for now (in local mode, or
    ``python -m hpc_ray`` running the script before its ``init()``): its worker
    ranks wait in ``run_worker`` for a session, which a later ``init()`` may
    start; if none has started by the time the script ends (it exited, raised,
    or never called ``init()``), they are let go then, and the job ends with
    the script's own exit status."""
    global _parked_world
    if world is None or _parked_world is not None or _mpi_workers_gone:
        return
    _parked_world = world

    def release() -> None:
        global _parked_world, _mpi_workers_gone
        if _parked_world is not None:
            launch.release_workers(_parked_world)
            _parked_world = None
            _mpi_workers_gone = True
    atexit.register(release)


def _run_pending_functions() -> None:
    while _pending_functions:
        run_function_on_all_workers(_pending_functions.pop(0))


def _session_info() -> dict:
    """What init() returns: the job, and Ray 0.7's address fields (this host's name;
    None for the servers hpc_ray does not run)."""
    kind, obj = _session
    addresses = {"node_ip_address": socket.gethostname(), "redis_address": None,
                 "object_store_address": None, "raylet_socket_name": None,
                 "webui_url": None}
    if kind == "local":
        return {"mode": "local", "job_id": "local", "world_size": 1, **addresses}
    return {"mode": "embedded" if obj.embedded else "mpi", "job_id": obj.job_id,
            "world_size": obj.ctx.world["size"], "session_name": f"hpc_ray-{obj.job_id}",
            **addresses}


def shutdown(exiting_interpreter: bool = False) -> None:
    """Stop the workers and release the store. Safe to call twice."""
    global _session, _mpi_workers_gone
    with _lock:
        if _session is None:
            return
        kind, obj = _session
        _session = None
        context.set_current(None)
        if kind == "mpi":
            from .runtime.session import stop_driver
            stop_driver(obj)
            _mpi_workers_gone = not obj.embedded
        context.reset_local_refs()
        from . import reusable as _reusables
        _reusables.reset()


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``, and in tasks and actors, as in Ray."""
    return _session is not None or context.is_set()


def remote(*args, **kwargs):
    """Make a function a remote function, or a class an actor class.

    Usable bare (``@remote``) or with options (``@remote(num_returns=2,
    num_cpus=1, num_gpus=1, resources={...}, max_calls=N, max_retries=N)``;
    for classes ``max_restarts`` and resources held for the actor's lifetime).
    Unknown options raise ``ValueError`` here, at decoration; ``@remote()``
    with no options raises ``TypeError``, as in Ray 0.7. Ray's first API,
    ``@remote([argument types], [return types])``, sets ``num_returns``. The
    calls' arguments are checked against the signature at ``.remote()``
    (``TypeError``).
    """
    def make(obj, options):
        warn_given_options(options, f"{getattr(obj, '__name__', obj)}")
        if inspect.isclass(obj):
            return ActorClass(obj, options)
        if inspect.isroutine(obj):
            return RemoteFunction(obj, options)
        # (Ray 0.7's words; a functools.partial or a callable instance is neither.)
        raise TypeError("The @ray.remote decorator must be applied to either a function or "
                        f"to a class, got {type(obj).__name__} (wrap it in a def)")

    if len(args) == 1 and not kwargs and (callable(args[0]) or inspect.isclass(args[0])):
        return make(args[0], {})
    if len(args) == 2 and all(isinstance(a, list) for a in args) and not kwargs:
        # Ray's first API, which the Pong example still writes: @remote([argument
        # types], [return types]). The types go unchecked; the returns count.
        return lambda obj: make(obj, {"num_returns": len(args[1])})
    if args or not kwargs:
        # Ray 0.7 rejects @remote() too: options, or no parentheses at all.
        raise TypeError("@remote must be used either without parentheses (@remote) or "
                        "with keyword options, e.g. @remote(num_returns=2, num_cpus=1, "
                        "num_gpus=1, resources={'Custom': 1}, max_calls=1)")
    return lambda obj: make(obj, kwargs)


def _check_timeout(timeout) -> None:
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")


def get(object_refs, timeout: float | None = None):
    """The value of a ref, or the values of a list of refs (in order).

    Large numpy arrays come back as read-only views of the shared-memory store.

    Raises:
        TaskError: the task (or one upstream of it) raised; it is also an
            instance of the original exception class.
        WorkerCrashedError: the process running the task died.
        GetTimeoutError: ``timeout`` seconds passed first.
        TypeError: ``object_refs`` is not a ref or a list of refs.
    """
    _check_timeout(timeout)
    if type(object_refs) is ObjectRef:
        if object_refs.id not in context._local:   # (check_ref, inline: the hot path)
            context.check_ref(object_refs)
        return context.current().get([object_refs], timeout)[0]
    if isinstance(object_refs, (list, tuple)):
        for r in object_refs:
            if type(r) is not ObjectRef:
                raise TypeError(f"get() expects ObjectRefs, got an element of type "
                                f"{type(r).__name__}: {r!r:.80}")
        if not object_refs:
            return []
        context.check_refs(object_refs)
        return context.current().get(list(object_refs), timeout)
    raise TypeError(f"get() expects an ObjectRef or a list of ObjectRefs, got "
                    f"{type(object_refs).__name__}: {object_refs!r:.80}")


def put(value: Any) -> ObjectRef:
    """Store ``value`` in the object store and return its ref."""
    return context.current().put(value)


def wait(object_refs: list, num_returns: int = 1, timeout: float | None = None,
         fetch_local: bool = True) -> tuple[list, list]:
    """Split refs into (ready, not ready), both in input order.

    Returns when ``num_returns`` are ready or ``timeout`` seconds passed.

    Raises:
        TypeError: ``object_refs`` is not a list of refs.
        ValueError: duplicates, or ``num_returns`` out of range.
    """
    if not isinstance(object_refs, (list, tuple)):
        raise TypeError(f"wait() expects a list of ObjectRefs, got "
                        f"{type(object_refs).__name__}")
    for r in object_refs:
        if type(r) is not ObjectRef:
            raise TypeError(f"wait() expects ObjectRefs, got an element of type "
                            f"{type(r).__name__}")
    ids = [r.id for r in object_refs]
    if len(set(ids)) != len(ids):
        raise ValueError("wait() requires a list of unique ObjectRefs; got duplicates")
    context.check_refs(object_refs)
    _check_timeout(timeout)
    if not ids:
        return [], []
    if not isinstance(num_returns, int) or not 1 <= num_returns <= len(ids):
        raise ValueError(f"num_returns must be between 1 and {len(ids)}, "
                         f"got {num_returns!r}")
    ready = context.current().wait(ids, num_returns, timeout)
    if len(ready) == len(ids):
        return list(object_refs), []
    return [r for r, i in zip(object_refs, ids) if i in ready], \
        [r for r, i in zip(object_refs, ids) if i not in ready]


def as_completed(object_refs: list, timeout: float | None = None) -> Iterator[ObjectRef]:
    """Yield refs as their objects become ready (like ``concurrent.futures.as_completed``).

    Raises:
        GetTimeoutError: if ``timeout`` seconds pass before all are ready.
    """
    from .exceptions import GetTimeoutError
    remaining = list(object_refs)
    deadline = None if timeout is None else time.monotonic() + timeout
    while remaining:
        ready, remaining = wait(remaining, num_returns=len(remaining), timeout=0)
        if not ready:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, remaining = wait(remaining, num_returns=1, timeout=left)
            if not ready:
                raise GetTimeoutError(f"{len(remaining)} objects not ready after {timeout} s")
        yield from ready


def progress(object_refs: list, desc: str | None = None, timeout: float | None = None,
             **tqdm_kwargs) -> list:
    """Wait for ``object_refs`` with a tqdm progress bar; return their values in order."""
    from tqdm.auto import tqdm
    refs = list(object_refs)
    with tqdm(total=len(refs), desc=desc or "hpc_ray", unit="task", **tqdm_kwargs) as bar:
        for _ in as_completed(refs, timeout=timeout):
            bar.update(1)
    return get(refs)


# --- cluster state ------------------------------------------------------------------

def _state_context():
    """The context for the global-state calls, or Ray 0.7's error for them."""
    if not context.is_set():
        raise RayError("The ray.global_state API cannot be used before ray.init has been "
                       "called.")
    return context.current()


def cluster_resources() -> dict:
    """Total resources of all worker ranks: ``{"CPU": 4.0, "GPU": 1.0, custom: ...}``
    (floats, as Ray 0.7's, whole or not)."""
    return {k: float(v) for k, v in _state_context().control("cluster_resources").items()}


def available_resources() -> dict:
    """Resources not held by running tasks and actors right now (floats)."""
    return {k: float(v) for k, v in _state_context().control("available_resources").items()}


def nodes() -> list[dict]:
    """One dict per node: host name, ranks, resources, store size."""
    return _state_context().control("nodes")


def tasks(task_id=None) -> dict:
    """The task table, or one entry of it (``task_id``: its hex id or 20 bytes)."""
    table = _state_context().control("tasks")
    return table if task_id is None else _entry(table, task_id, "task")


def objects(object_id=None) -> dict:
    """The object table, or one entry of it (``object_id``: as ``_entry`` takes it)."""
    table = _state_context().control("objects")
    return table if object_id is None else _entry(table, object_id, "object")


def _entry(table: dict, key, what: str) -> dict:
    """``table``'s entry for ``key``: an ObjectRef, a hex id or 20 bytes."""
    hex_id = key.hex() if isinstance(key, (ObjectRef, bytes, bytearray)) else key
    if hex_id not in table:
        raise KeyError(f"no {what} {hex_id} in the job's {what}s" + (
            " (an ObjectRef names an object: objects() has it)" if what == "task" else ""))
    return table[hex_id]


def get_gpu_ids() -> list[int]:
    """The GPU ids reserved for the current task or actor (``CUDA_VISIBLE_DEVICES``)."""
    if not context.is_set():
        return []
    return list(context.current().gpu_ids)


def get_resource_ids() -> dict:
    """The resources the current task or actor holds: ``{name: [(id, fraction), ...]}``."""
    if not context.is_set():
        return {}
    out: dict = {}
    for name, amount in (context.current().resources or {}).items():
        if amount and name != "GPU":
            whole, part = int(amount), amount - int(amount)
            out[name] = [(i, 1.0) for i in range(whole)] + ([(whole, part)] if part else [])
    gpus = get_gpu_ids()
    if gpus:
        # A fraction of a GPU is a share of one id (runtime/gpu_ids.py).
        share = min(1.0, (context.current().resources or {}).get("GPU", 1.0))
        out["GPU"] = [(g, share) for g in gpus]
    return out


def run_function_on_all_workers(function) -> None:
    """Run ``function(worker_info)`` on every worker process (and here) before later tasks.

    Called before ``init()``, the function is kept and run when ``init()`` starts
    the job (as in Ray 0.7).
    """
    if not context.is_set():
        _pending_functions.append(function)
        return
    blob = dumps(function)
    ctx = context.current()
    ctx.control("run_function", blob)
    if ctx.is_driver:
        function({"worker_rank": 0, "pid": os.getpid()})


# --- timeline -----------------------------------------------------------------------

def timeline(filename: str | None = None) -> list[dict] | None:
    """Chrome trace events: one complete event per task (and per ``profile`` span).

    Load the file in chrome://tracing or https://ui.perfetto.dev.
    """
    ctx = _state_context()
    raw = ctx.control("timeline")
    job_id = ctx.job_id
    events = []
    for ev in raw:
        if isinstance(ev, dict):
            events.append(ev)
            continue
        name, rank, t0, t1, pid, tid = ev
        events.append({"cat": "task", "name": name, "ph": "X", "pid": f"rank {rank}",
                       "tid": pid, "ts": t0 * 1e6, "dur": max(0.0, (t1 - t0) * 1e6),
                       "args": {"rank": rank, "task_id": f"{tid:040x}", "pid": pid,
                                "function": name, "job_id": job_id}})
    if filename is None:
        return events
    with open(filename, "w") as f:
        json.dump(events, f)
    return None


def object_transfer_timeline(filename: str | None = None) -> list[dict] | None:
    """Chrome trace events of object transfers between nodes (Ray 0.7's API).

    hpc_ray does not record transfers (they are MPI point-to-point messages
    between ranks), so the list is empty; with ``filename`` an empty trace is
    written, which chrome://tracing loads.
    """
    _state_context()  # raises before init(), as the other calls do
    if filename is None:
        return []
    with open(filename, "w") as f:
        json.dump([], f)
    return None


def get_webui_url() -> None:
    """Ray 0.7's web UI address. hpc_ray has no web UI and opens no port: None.

    Use ``timeline()``, ``tasks()``, ``objects()``, ``nodes()`` and
    ``available_resources()`` to look at a running job instead.
    """
    return None


def errors(all_jobs: bool = False, include_cluster_errors: bool = True) -> list[dict]:
    """The job's errors so far, one dict per failed task (Ray 0.7's ``ray.errors()``;
    all are the job's: neither argument changes the list).

    Each has ``type`` ("task"), ``message`` (the error with its traceback, as
    ``get`` raises it; the newest 1,000 are kept, else a line saying where it
    failed), ``task_id``, ``function`` and ``timestamp``, for every failed task
    the head's history still holds (``HPC_RAY_HEAD_HISTORY_BYTES``).
    Other errors follow, with ``type``, ``message`` and ``timestamp``: an actor's
    constructor that raised (type "task", its traceback in ``message``) and a
    Checkpointable actor's hook that raised (type "checkpoint").
    """
    out = []
    texts = _state_context().control("failure_texts")
    with warnings.catch_warnings():
        # (tasks()' warning that the oldest are gone is about tasks(): the list
        # here is what the history keeps, as the docstring says.)
        warnings.filterwarnings("ignore", message="tasks\\(\\): the ")
        table = tasks()
    for tid, t in table.items():
        # An actor ended on purpose (``__ray_terminate__``) is no error.
        if t.get("State") == "FAILED" and not t["FunctionName"].endswith(".__ray_terminate__"):
            rank = t["Rank"]
            where = f"on rank {rank}" if rank is not None and rank >= 0 else "before it ran"
            out.append({"type": "task", "task_id": tid, "function": t["FunctionName"],
                        "message": texts.get(tid) or f"task {t['FunctionName']} failed "
                                                     f"{where}; get() of its result raises "
                                                     f"the error",
                        "timestamp": t.get("EndTime")})
    out.extend(_state_context().control("pushed_errors"))
    return out


def error_info(worker=None) -> list[dict]:
    """Ray 0.2's name for ``errors()`` (its ``worker`` argument is ignored)."""
    return errors()


@contextlib.contextmanager
def profile(event_type: str, extra_data: dict | None = None):
    """Record a span that shows up in ``timeline()``: ``with profile("load"): ...``."""
    if extra_data is not None and not isinstance(extra_data, dict):
        raise TypeError("extra_data must be a dict")
    t0 = time.time()
    try:
        yield
    finally:
        t1 = time.time()
        ctx = context.current() if context.is_set() else None
        if ctx is not None:
            rank = ctx.rank
            extra = dict(extra_data or {})
            event = {"cat": event_type, "name": extra.pop("name", event_type), "ph": "X",
                     "pid": f"rank {rank}", "tid": os.getpid(), "ts": t0 * 1e6,
                     "dur": (t1 - t0) * 1e6,
                     "args": dict(extra, event_type=event_type, rank=rank)}
            if "cname" in extra:
                event["cname"] = extra["cname"]
            ctx.record_profile(event)
