"""The executor: a child process of a worker rank that runs the user's code.

    worker rank ──[EXECUTE spec, REPLY, CREATE_ACTOR, RUN_FUNCTION, SHUTDOWN]──▶ executor
    worker rank ◀─[TASK_DONE, TASK_FAILED, SUBMIT, GET, WAIT, PUT, ALLOC, ...]── executor
                  (lists of head-format messages over a socketpair)

A segfault, ``os._exit`` or an OOM kill in user code ends this process, not the
MPI job: the rank sees EOF on the pipe, reports the lost tasks and starts a new
executor. The executor has no MPI of its own (it never imports ``mpi4py.MPI``;
the launcher's PMI variables are removed from its environment).

An executor blocked in ``get()`` (with or without a timeout) keeps reading its
pipe and runs the tasks the rank sends meanwhile (it tells the rank and head with
BLOCKED), so nested tasks never deadlock a fixed pool of ranks. When its wait is
over it sends UNBLOCK and runs the nested tasks the rank sent before hearing it
(they arrive ahead of the rank's answer), then takes its CPU back (BLOCKED -1).

The messages travel through ``executor_transport.ExecutorTransport`` (the pipe
to the rank, the sockets of direct calls, and the waits on them, with their
threads' rules); the actor calls, gets and waits go
through ``caller.Caller``, whose host here is ``executor_calls.ExecutorCallerHost``.
This module executes: tasks, actor creation, method calls, their results.
The process leaves through ``executor_exit.leave``: Python's clean-up at exit
(atexit handlers, the actor's finalizers), then ``os._exit``.

stdout and stderr are pipes to the rank (log_to_driver), line-buffered."""
from __future__ import annotations

import collections
import inspect
import json
import os
import pickle
import socket
import sys
import threading
import time
import traceback
import types
from multiprocessing.connection import Connection
from typing import Any

from ..exceptions import RayError, TaskError
from ..transport import messages as m
from ..transport.serialization import ERROR, RAW, SHM, is_raw, loads, loads_definition
from . import context, executor_exit, hooks, interrupts, peer_calls, taskspec, values
from .caller import Caller
from .executor_calls import ExecutorCallerHost
from .executor_transport import ExecutorTransport, Output, noting_output
from .nested_state import OuterState
from .peer_server import PeerServer
from .store import Arena
from .task_failures import DepFailed, Where, failure_record, print_error

#: Flush buffered messages to the rank after this many (or at any blocking point).
FLUSH_EVERY = 64
#: While executing a batch, send results at least this often (seconds).
FLUSH_INTERVAL = 0.002


_NOT_YET = object()


class ExecutorContext(context.ContextBase):
    """The API inside an executor: every call is a message to the rank."""

    is_driver = False

    def __init__(self, transport: ExecutorTransport, arena: Arena, node: int, rank: int,
                 size: int, store_size: int, session_id: str | None = None) -> None:
        #: The pipe to the rank and the other sockets, and the waits on them.
        self.transport = transport
        transport.owner = self
        self.emit = transport.emit
        self.arena = arena
        self.node = node
        self.rank = rank
        self.world_size = size
        self.store_size = store_size
        self.host = socket.gethostname()
        self.pid = os.getpid()
        #: Where this process is, as the errors of its tasks name it.
        self.where = Where(rank, size, self.host, self.pid)
        self.fns: dict[Any, Any] = {}
        self.actor = None
        self.actor_id = None
        self.gpu_ids: list[int] = []
        self.resources: dict = {}
        #: What ``_set_gpus`` last recorded, and the CUDA_VISIBLE_DEVICES it makes.
        self.held: Any = _NOT_YET
        self.visible_gpus = ""
        #: Tasks on this process's stack: the one it runs, and those nested in its
        #: waits (``executor_transport.MAX_NESTED``).
        self.depth = 0
        self.current_task_name: str | None = None
        self.current_task_id: int | None = None
        self.last_flush = time.monotonic()
        self.profile_events: list = []
        self.exiting = False
        #: Collectives (``collective_buffers``): the rank copies tensors straight
        #: from and to this process's memory, until the kernel refuses once; then
        #: they go through a scratch block of the store, given back (appended here
        #: by its finalizer, any thread, any time; sent at a flush) when replaced.
        self.cross_memory = True
        self.collective_scratch = None
        #: Groups run among this node's executors through the store
        #: (``collective_shm``): name -> ShmGroup, or None for the rank's route;
        #: ``collective_shm`` False sends every operation through the rank.
        self.collective_groups: dict = {}
        self.collective_shm = True
        self.freed_blocks: collections.deque = collections.deque()
        #: (actor class, method name) -> the class attribute a call goes to.
        self.methods: dict = {}
        #: The current actor's plain methods, bound: name -> bound method.
        self.bound_actor = None
        self.bound: dict = {}
        #: actor id -> hpc_ray.actor's hooks, for Checkpointable actors only (an
        #: in-rank context hosts several actors).
        self.checkpoints: dict = {}
        self.peer_session = session_id if peer_calls.ENABLED else None
        self.peer = (peer_calls.PeerCaller(session_id, transport.readers, transport.channels,
                                           transport.channel_lock, self.control)
                     if self.peer_session else None)
        transport.peer = self.peer
        self.peer_server: PeerServer | None = None
        self.caller = Caller(ExecutorCallerHost(self), self.peer, threading.Lock())
        #: HOLD messages sent so far (a direct call's answer waits for the head to
        #: confirm those the call made: see ``peer_calls``).
        self.holds_sent = 0
        #: Refs nested in the running task's arguments (a plain task's, not an
        #: actor's): the head holds them for the task until its result comes.
        self.task_pins: frozenset = frozenset()
        #: Holds of such refs not sent yet (``hold_refs``): they go ahead of the
        #: next batch for the rank, which the task's result always is.
        self.deferred_holds: list = []
        #: Objects this process knows exist (put here, seen by get or wait), while
        #: it holds refs to them: direct calls may take them as arguments.
        self.ready_ids: set = set()

    # --- sends -----------------------------------------------------------------

    def flush(self) -> None:
        context.collect()
        released = context.released
        peer = self.peer
        if released or self.transport.out or self.freed_blocks or self.profile_events \
                or peer is not None and peer.finished:
            self._flush_out(released, peer)
        # (Else nothing for the rank: an actor answering direct calls, mostly.)
        server = self.peer_server
        if server is not None and server.queued:
            server.send_answers()
        self.last_flush = time.monotonic()

    def _flush_out(self, released, peer) -> None:
        transport = self.transport
        with transport.lock:
            out = transport.out
            deferred = self.deferred_holds
            if released:
                ids = self.caller.host.released(released, deferred)
                if ids:
                    out.append((m.RELEASE, ids))
            if self.freed_blocks:
                blocks = []
                while self.freed_blocks:
                    blocks.append(self.freed_blocks.popleft())
                out.append((m.FREE_BLOCKS, blocks))
            if self.profile_events:
                events, self.profile_events = self.profile_events, []
                out.append((m.PROFILE, events))
            if peer is not None and peer.finished:
                # A task's process reports when the task ends; an actor's, by count
                # and age only (not with every call it answers).
                done = peer.report_due(self.current_task_id is None and self.actor_id is None)
                if done:
                    # Pickled once here: the rank passes the bytes on unread.
                    out.append((m.DIRECT_DONE, pickle.dumps(done, pickle.HIGHEST_PROTOCOL)))
            if out:
                if deferred:
                    out.insert(0, (m.HOLD, deferred))
                    self.deferred_holds = []
                transport.out = []
                transport.send(out)

    @property
    def out(self) -> list:
        """The messages not sent yet."""
        return self.transport.out

    def _request(self, msg_kind: int, *fields, timeout: float | None = None,
                 on_timeout: tuple | None = None, blocking: bool = False) -> Any:
        """Send a request to the head and wait for its reply
        (``ExecutorTransport.request``)."""
        return self.transport.request(msg_kind, *fields, timeout=timeout,
                                      on_timeout=on_timeout, blocking=blocking)

    # --- API --------------------------------------------------------------------

    def record_profile(self, event: dict) -> None:
        self.profile_events.append(event)   # sent with the next flush

    def hold_refs(self, ids) -> None:
        self.caller.host.hold_refs(ids)

    def submit(self, spec: list) -> bool:
        return self.caller.submit(spec)

    def submit_call(self, spec: list, lifetime) -> None:
        self.caller.submit_call(spec, lifetime)

    def control(self, name: str, *args) -> Any:
        if self.caller.before_control(name, args):
            return None     # held: see caller.before_control
        ok, result = self._request(m.CONTROL_CALL, name, args)
        if not ok:
            raise result
        return result

    def get(self, refs: list, timeout: float | None) -> list:
        return self.caller.get(refs, timeout)

    def wait(self, ids: list[int], num_returns: int, timeout: float | None) -> set[int]:
        return self.caller.wait(ids, num_returns, timeout)

    def _alloc(self, size: int) -> tuple[int, int]:
        return values.allocate(lambda: self._request(m.ALLOC, size), size, self.store_size,
                               self.node)

    def put(self, value: Any) -> context.ObjectRef:
        if isinstance(value, context.ObjectRef):
            raise TypeError("put() of an ObjectRef is not allowed; pass the ref itself")
        rec, contained = values.to_record(value, self._alloc, self.arena,
                                          "value passed to put()")
        if contained and self.peer is not None:
            self.caller.promote(contained)
        oid = context.new_ids(1)
        self.emit((m.PUT, oid, rec, contained or None))
        if self.peer is not None:
            self.ready_ids.add(oid)
        return context.ObjectRef(oid)

    def put_serialized(self, s) -> context.ObjectRef:
        if s.contained and self.peer is not None:
            self.caller.promote(s.contained)
        rec = values.serialized_to_record(s, self._alloc, self.arena)
        oid = context.new_ids(1)
        self.emit((m.PUT, oid, rec, s.contained or None))
        if self.peer is not None:
            self.ready_ids.add(oid)
        return context.ObjectRef(oid)

    # --- executing --------------------------------------------------------------

    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == m.EXECUTE:
            _, spec = msg
            self.execute(spec)
        elif kind == m.REPLY:
            _, req_id, payload = msg
            self.transport.replies[req_id] = payload
        elif kind == m.CREATE_ACTOR:
            self.create_actor_here(*msg[1:])
        elif kind == m.RUN_FUNCTION:
            self.run_function(*msg[1:])
        elif kind == m.SHUTDOWN:
            # With a task on this process's stack (a nested wait read it), the
            # task's state is half-changed: it leaves without running user code.
            executor_exit.leave(self, clean=self.depth == 0)

    def run_function(self, blob: bytes) -> None:
        try:
            fn = loads(blob)
            fn({"worker_rank": self.rank, "pid": self.pid})
        except Exception:
            sys.stderr.write(f"### Worker {self.rank} of {self.world_size} on {self.host}: "
                             f"a function run on all workers failed:\n"
                             f"{traceback.format_exc()}")

    def _function(self, spec: list):
        fn_id = spec[m.T_FN]
        fn = self.fns.get(fn_id)
        if fn is None:
            blob = spec[m.T_BLOB]
            if blob is None:
                raise RayError(f"function {spec[m.T_NAME]} was never shipped to rank "
                               f"{self.rank}")
            fn = self.fns[fn_id] = loads_definition(blob, spec[m.T_NAME], self.rank)
        return fn

    def _read_dep(self, oid: int, rec: tuple) -> Any:
        if rec[0] != SHM:
            return values.from_record(rec, self.arena, None)
        # A view into the store outlives the task if the code keeps it (an actor
        # storing an argument): pin the object with a ref of this process's own.
        return values.from_record(rec, self.arena, context.ObjectRef(oid, _owned=False))

    def _set_gpus(self, held, task: bool = True) -> None:
        """Record what the task or actor holds: (GPU ids, resources) from the head.

        As in Ray, CUDA_VISIBLE_DEVICES lists exactly those ids: "" for a task
        that holds no GPU, the one shared id for a fraction of a GPU. It is set
        for every task; for an actor's calls (``task`` False), which all hold
        what the actor holds, only when that changed: a method that changes it
        keeps the change, as in Ray.
        """
        if held != self.held:
            gpu_ids, resources = held if held else ((), None)
            self.gpu_ids = list(gpu_ids)
            self.resources = dict(resources or {})
            self.visible_gpus = ",".join(str(g) for g in gpu_ids)
            self.held = held
        elif not task:
            return
        if os.environ.get("CUDA_VISIBLE_DEVICES") != self.visible_gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = self.visible_gpus   # (the user's code may set it)

    def execute(self, spec: list) -> None:
        t0 = time.time()
        tid = spec[m.T_ID]
        name = spec[m.T_NAME]
        transport = self.transport
        server = self.peer_server
        peer_call = server is not None and tid in server.calls
        if peer_call:
            Output.printed = False
        outer = self.current_task_name, self.current_task_id
        # (A task run in another's wait: what it changes in the process is undone.)
        outer_state = OuterState(self) if self.depth else None
        if outer[1] is None and self.peer is not None and self.actor_id is None:
            self.peer.new_task()
        self.current_task_name, self.current_task_id = name, tid
        self.depth += 1
        # (A plain task's: an actor call's refs are the caller's to keep.)
        pinning = spec[m.T_ACTOR] is None and spec[m.T_CONTAINED]
        if pinning:
            outer_pins = self.task_pins
            self.task_pins = frozenset(spec[m.T_CONTAINED])
        self._set_gpus(spec[m.T_RES], spec[m.T_ACTOR] is None)
        contained = None
        if peer_call:
            holds = self.holds_sent
        try:
            if peer_call and spec[m.T_DEPS]:
                self._fetch_deps(spec)
            if spec[m.T_ACTOR] is not None:
                result = self._call_method(spec)
            else:
                fn = self._function(spec)
                args, kwargs = taskspec.load_args(spec[m.T_PAYLOAD], spec[m.T_DEPS],
                                                  self._read_dep)
                result = fn(*args, **kwargs)
            if executor_exit.forked:
                executor_exit.forked_child_ends(None)
            recs, contained = self._results(spec, result, peer_call)
        except BaseException as exc:  # user code: everything is reported, nothing escapes
            if executor_exit.forked:
                executor_exit.forked_child_ends(exc)
            record, text = failure_record(exc, spec, self.where)
            if text is not None:
                print_error(text)
            msg = (m.TASK_FAILED, tid, record, t0, time.time(), self.pid)
            if isinstance(exc, SystemExit) and spec[m.T_ACTOR] is not None:
                self.exiting = True
                self.emit((m.ACTOR_DIED, self.actor_id, f"exit() called in {name}", False))
        else:
            msg = (m.TASK_DONE, tid, recs, contained or None, t0, time.time(), self.pid)
        finally:
            if self.peer is not None and self.peer.held:
                self.caller.pump()   # what may leave now; ``serve`` sends the rest
            self.depth -= 1
            if Output.lines_open:
                Output.end_lines()
            self.current_task_name, self.current_task_id = outer
            hooks.after_task()
            if outer_state is not None:
                outer_state.restore(self)
            if pinning:
                with transport.lock:
                    self.task_pins = outer_pins
        if not peer_call:
            self.emit(msg)
        else:
            if self.holds_sent != holds or Output.printed:
                # The caller lets go of the arguments once answered: the head must
                # have this process's holds first (its answer to a ping says so),
                # and the lines the call printed (they go through the rank).
                self.control("ping")
            elif contained or self.exiting:
                self.flush()   # what the call put or said goes ahead of its answer
            server.answer(tid, msg, contained)
        # (At the end of what is queued, the loop that called this flushes before
        # it waits: every wait for the next message does.)
        if len(transport.out) + (server.queued if peer_call else 0) >= FLUSH_EVERY or \
                time.monotonic() - self.last_flush > FLUSH_INTERVAL:
            self.flush()
        if self.exiting:
            self.flush()
            self.actor_terminated()

    def _fetch_deps(self, spec: list) -> None:
        """A direct call's argument refs, resolved as the head does on dispatch
        (those the caller sent with their values are: ``peer_calls.with_records``)."""
        deps = spec[m.T_DEPS]
        todo = [dep[1] for dep in deps if len(dep) == 2]
        if not todo:
            return
        recs = self.caller.host.get_records(todo, None)
        for rec in recs:
            if rec[0] == ERROR:
                raise DepFailed(rec)
        fetched = iter(recs)
        spec[m.T_DEPS] = [dep if len(dep) == 3 else (dep[0], dep[1], next(fetched))
                          for dep in deps]

    def actor_terminated(self) -> None:
        executor_exit.leave(self)   # (the rank was told: ACTOR_DIED)

    def _results(self, spec: list, result: Any, inline: bool = False) -> tuple[list, list]:
        returns = spec[m.T_RETURNS]
        n = len(returns)
        if n == 1:
            vals = (result,)
        else:
            if not isinstance(result, (tuple, list)) or len(result) != n:
                got = (f"a {type(result).__name__} of length {len(result)}"
                       if isinstance(result, (tuple, list)) else type(result).__name__)
                raise ValueError(f"{spec[m.T_NAME]} has num_returns={n} but returned {got}")
            vals = result
        if n == 1 and is_raw(result):
            return [(RAW, result)], []
        recs = []
        contained: list = []
        for v in vals:
            rec, c = values.to_record(v, self._alloc, self.arena,
                                      f"return value of {spec[m.T_NAME]}", inline)
            recs.append(rec)
            contained.extend(c)
        if contained and self.peer is not None:
            self.caller.promote(contained)
        return recs, contained

    # --- actors -----------------------------------------------------------------

    def create_actor_here(self, spec: list) -> None:
        self.actor_id = spec[m.T_ACTOR]
        if self.peer is not None:
            self.peer.own_actor = self.actor_id
        # An actor's waits for its next call spin as before, crowd or not: driver
        # threads calling actors ran slower with the actors blocking meanwhile.
        self.transport.spinner.look = False
        self._set_gpus(spec[m.T_RES])
        try:
            cls = self._function(spec)
            args, kwargs = taskspec.load_args(spec[m.T_PAYLOAD], spec[m.T_DEPS],
                                              self._read_dep)
            self.actor = cls(*args, **kwargs)
            saved = hooks.actor_created(self.actor, self.actor_id, self)
            if saved is not None:
                self.checkpoints[self.actor_id] = saved
        except BaseException as exc:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self._constructor_failed(exc, spec[m.T_NAME], tb)
            self.emit((m.ACTOR_DIED, self.actor_id,
                       f"its constructor raised on rank {self.rank}:\n{tb}", False))
            self.flush()
            self.actor_failed()
            return
        transport = self.transport
        if self.peer_session is not None and not spec[m.T_RETRIES]:
            # Creation specs carry the actor's max_task_retries there (actors.py):
            # calls the head must retry do not come direct.
            server = PeerServer.open(self.peer_session, self.actor_id, transport.readers,
                                     transport.channels, transport.channel_lock, self.rank)
            if server is not None:
                server.held = spec[m.T_RES]
            self.peer_server = transport.server = server
        self.emit((m.ACTOR_READY, self.actor_id, self.pid))
        self.flush()

    def _constructor_failed(self, exc: BaseException, name: str, tb: str) -> None:
        """An actor whose constructor raised prints the error (as a task does),
        sends its ErrorSignal (Ray 0.7 signals) and has ``errors()`` list it."""
        err = TaskError(f"{name}.__init__", tb, self.rank, self.host, exc)
        text = TaskError.__str__(err)
        print_error(text)
        try:
            from .signals import ErrorSignal
            from ..transport.serialization import dumps
            self.control("signal_send", self.actor_id, None, dumps(ErrorSignal(err)))
            self.control("push_error", "task", text, time.time())
        except Exception:  # best effort: the ACTOR_DIED that follows is what counts
            pass

    def actor_failed(self) -> None:
        executor_exit.leave(self)  # this process existed only for the actor

    def _call_method(self, spec: list) -> Any:
        method = spec[m.T_FN]
        args, kwargs = taskspec.load_args(spec[m.T_PAYLOAD], spec[m.T_DEPS], self._read_dep)
        if method == "__ray_terminate__":
            self.exiting = True
            self.emit((m.ACTOR_DIED, self.actor_id, "terminated by __ray_terminate__", False))
            return None
        saved = self.checkpoints.get(self.actor_id) if self.checkpoints else None
        try:
            result = self._method(method)(*args, **kwargs)
            if inspect.iscoroutine(result):   # an async def method
                from .asyncio_compat import run_method
                result = run_method(result)
        except Exception:
            if saved is not None:
                saved.after_call()   # (Ray 0.7 checkpoints after a call that raised too)
            raise
        if saved is not None:
            saved.after_call()
        return result

    def _method(self, name: str):
        """The class's method, as Ray calls it: an instance attribute of the same
        name does not hide it."""
        actor = self.actor
        if self.bound_actor is actor:
            bound = self.bound.get(name)
            if bound is not None:
                return bound
        else:
            self.bound_actor, self.bound = actor, {}
        key = (type(actor), name)
        raw = self.methods.get(key)
        if raw is None:
            raw = self.methods[key] = inspect.getattr_static(type(actor), name, False)
        if raw is False or not hasattr(raw, "__get__"):
            return getattr(actor, name)
        bound = raw.__get__(actor, type(actor))
        if type(raw) is types.FunctionType:
            self.bound[name] = bound   # (a plain method binds the same way every call)
        return bound

    # --- main loop --------------------------------------------------------------

    def serve(self) -> None:
        self.emit((m.EXEC_READY, self.pid))
        self.flush()
        inbox = self.transport.inbox
        while True:
            if not inbox:
                self.flush()
                peer = self.peer
                # An actor reports the direct calls it made by count and age
                # (flush): idle, it wakes once they are old enough to go.
                self.transport.recv(peer_calls.REPORT_AGE if peer is not None and
                                    peer.finished else None)
                if peer is not None and peer.held:
                    # Calls a finished task or method left held (their arguments'
                    # answers may come only once its result is out): an answer
                    # on a link ends this wait as a message does (recv_select).
                    self.caller.pump()
            while inbox:
                self.handle(inbox.pop(0))


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL us when the rank that started us dies."""
    try:
        import ctypes
        import signal
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main() -> None:
    _die_with_parent()
    interrupts.dump_stacks_on_sigusr2()
    # Printed lines go to the rank through a pipe (log_to_driver): one write per
    # line, not per 8 KiB block, so a line shows up while the task still runs.
    sys.stdout = noting_output(sys.stdout)
    sys.stderr = noting_output(sys.stderr)
    cfg = json.loads(os.environ.pop("HPC_RAY_EXECUTOR_CONFIG"))
    sys.path[:] = cfg["sys_path"]
    if cfg.get("cwd"):
        try:
            os.chdir(cfg["cwd"])
        except OSError:
            pass
    context.set_id_prefix(cfg["rank"], cfg["serial"])
    arena = Arena(cfg["arena_fd"], cfg["store_size"]) if cfg["store_size"] else Arena(-1, 0)
    transport = ExecutorTransport(Connection(cfg["fd"]))
    ctx = ExecutorContext(transport, arena, cfg["node"], cfg["rank"], cfg["size"],
                          cfg["store_size"], cfg.get("session_id"))
    context.set_current(ctx)
    executor_exit.flush_at_os_exit(ctx)
    ctx.serve()


if __name__ == "__main__":
    main()
