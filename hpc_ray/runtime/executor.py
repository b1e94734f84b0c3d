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
over it sends UNBLOCK and runs the nested tasks the rank sent before hearing it:
they arrive ahead of the rank's answer.

Threads of the user's code may call the API at once. Every send goes out under
one lock; a thread waiting for its reply reads the socket itself unless another
thread already does, and whoever reads files replies by request id and leaves
the rest (EXECUTE, ...) for the main thread, the only one that runs tasks. A
thread other than the main one never runs nested work; its long wait in a task
lends the task's CPU with LEND instead of BLOCKED, and the rank runs what it gets
for that CPU in a spare executor.

stdout and stderr are pipes to the rank (log_to_driver), line-buffered.

An actor on the driver's host also opens a direct channel to the driver
(``transport/direct.py``): the driver's calls arrive there, and their results go
back there when a flush holds nothing but such results, with inline values and
no nested refs; anything else goes through the rank, which keeps the books of
what this process holds and of the store blocks it fills.
"""
from __future__ import annotations

import collections
import inspect
import io
import itertools
import json
import os
import pickle
import select
import socket
import sys
import threading
import time
import traceback
import types
from multiprocessing.connection import Connection
from typing import Any

from ..exceptions import (ActorDiedError, GetTimeoutError, RayError, TaskError,
                          WorkerCrashedError)
from ..transport import direct
from ..transport import messages as m
from ..transport.serialization import ERROR, RAW, SHM, is_raw, loads
from ..transport.spin import Spinner
from . import context, hooks, interrupts, peer_calls, taskspec, values
from .store import Arena

#: Flush buffered messages to the rank after this many (or at any blocking point).
FLUSH_EVERY = 64
#: While executing a batch, send results at least this often (seconds).
FLUSH_INTERVAL = 0.002
#: A get of one direct result reads its answer in turns of this many seconds
#: before it waits as any get does (and lends its CPU after 50 ms more).
QUICK_WAIT = 0.01
#: wait() over direct results and head objects asks the head this long at a time.
DIRECT_WAIT_SLICE = 0.005


_NOT_YET = object()


class ExecutorContext(context.ContextBase):
    """The API inside an executor: every call is a message to the rank."""

    is_driver = False

    def __init__(self, conn: Connection, arena: Arena, node: int, rank: int,
                 size: int, store_size: int, direct_addr: str | None = None,
                 session_id: str | None = None) -> None:
        self.conn = conn
        self.conn_fd = conn.fileno() if conn is not None else -1   # (None: RankContext)
        #: The driver's direct channel (actors on its host): address, connection,
        #: and the ids of the calls that came over it and are not answered yet.
        self.direct_addr = direct_addr
        self.dconn: Connection | None = None
        self.dconn_fd = -1
        self.direct_tids: set = set()
        #: Batches sent to the rank so far (see ``execute``).
        self.rank_sends = 0
        self.arena = arena
        self.node = node
        self.rank = rank
        self.world_size = size
        self.store_size = store_size
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.out: list = []
        self.inbox: list = []
        self.replies: dict[int, Any] = {}
        self.req_ids = itertools.count(1)
        self.fns: dict[Any, Any] = {}
        self.actor = None
        self.actor_id = None
        self.gpu_ids: list[int] = []
        self.resources: dict = {}
        #: What ``_set_gpus`` last recorded, and the CUDA_VISIBLE_DEVICES it makes.
        self.held: Any = _NOT_YET
        self.visible_gpus = ""
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
        # Threads of the user's code may call the API at once (issue 11): sends are
        # serialized by ``lock``; any waiting thread may read the socket, one at a
        # time (``reading``), and files what it reads: replies by request id into
        # ``replies``, everything else into ``inbox`` for the main thread.
        #: Held while ``out`` is appended to or swapped and sent: frames stay whole and in order.
        self.lock = threading.Lock()
        #: Guards ``reading`` and ``batches``; notified after each batch read.
        #: ``arrived``'s lock, taken directly (Condition's ``with`` is Python code),
        #: and how many threads wait on ``arrived``.
        self.arrived_lock = threading.Lock()
        self.arrived = threading.Condition(self.arrived_lock)
        self.waiting = 0
        #: True while some thread reads the socket.
        self.reading = False
        #: Batches read so far (a waiter's "did anything arrive?").
        self.batches = 0
        #: Written by a waiter to wake the reader's poll (``_recv``).
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        #: The thread that runs serve(): the only one that executes tasks.
        self.main_thread = threading.get_ident()
        # Direct calls between executors (``peer_calls``): the sockets the wait
        # loop watches besides the rank's, fd -> reader (returns messages for the
        # inbox), and those of them written through a buffer, fd -> Channel,
        # whose buffers ``peer_lock`` guards.
        self.peer_readers: dict = {}
        self.peer_channels: dict = {}
        self.peer_lock = threading.Lock()
        #: Threads of a task calling actors at once: one route decision at a time.
        self.peer_route_lock = threading.Lock()
        self.peer_session = session_id if peer_calls.ENABLED else None
        self.peer = (peer_calls.PeerCaller(session_id, self.peer_readers, self.peer_channels,
                                           self.peer_lock, self.control)
                     if self.peer_session else None)
        self.peer_server: peer_calls.PeerServer | None = None
        #: Busy-polls a little before blocking while that pays and (a task's
        #: process) no crowd of ready threads takes the cores (``transport/spin.py``).
        self.spinner = Spinner(look=True)
        #: ``_recv_select``'s poll object, and what it was built to watch.
        self.poller = None
        self.poller_key = None
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

    # --- pipe -------------------------------------------------------------------

    def emit(self, msg: tuple) -> None:
        with self.lock:
            self.out.append(msg)

    def flush(self) -> None:
        context.collect()
        released = context.released
        peer = self.peer
        if released or self.out or self.freed_blocks or self.profile_events \
                or peer is not None and peer.finished:
            self._flush_out(released, peer)
        # (Else nothing for the rank: an actor answering direct calls, mostly.)
        server = self.peer_server
        if server is not None and server.queued:
            server.send_answers()
        self.last_flush = time.monotonic()

    def _flush_out(self, released, peer) -> None:
        with self.lock:
            out = self.out
            deferred = self.deferred_holds
            if released:
                ids = []
                while released:
                    oid = released.popleft()
                    if deferred and oid in deferred:
                        deferred.remove(oid)   # held and let go of: the head never knew
                        self.ready_ids.discard(oid)
                        continue
                    if peer is None or not peer.forget(oid):   # (a direct result: the
                        ids.append(oid)                        # head never knew it)
                        self.ready_ids.discard(oid)
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
                self.out = []
                if self.direct_tids and self._direct_only(out):
                    self._send_direct(out)
                else:
                    self._send(out)

    def _send(self, msgs: list) -> None:
        if self.direct_tids:
            # Results of direct calls going through the rank: the head takes them
            # from there the same way.
            for msg in msgs:
                if msg[0] == m.TASK_DONE or msg[0] == m.TASK_FAILED:
                    self.direct_tids.discard(msg[1])
        if not all(msg[0] == m.COLLECTIVE_OP for msg in msgs):
            # (A collective is answered by the rank itself: nothing of it reaches
            # the head, so a direct call's result need not follow it there.)
            self.rank_sends += 1
        self.conn.send_bytes(pickle.dumps(msgs, protocol=5))

    def _direct_only(self, msgs: list) -> bool:
        """Whether ``msgs`` are all results of direct calls that need no rank's books:
        inline values (no store block the rank must see sealed), no nested refs."""
        tids = self.direct_tids
        for msg in msgs:
            kind = msg[0]
            if kind == m.TASK_DONE:
                if msg[1] not in tids or msg[3] is not None or \
                        any(rec[0] == SHM for rec in msg[2]):
                    return False
            elif kind != m.TASK_FAILED or msg[1] not in tids:
                return False
        return True

    def _send_direct(self, msgs: list) -> None:
        for msg in msgs:
            self.direct_tids.discard(msg[1])
        try:
            self.dconn.send_bytes(pickle.dumps(msgs, protocol=5))
        except OSError:
            os._exit(0)  # the driver is gone: nothing left to serve

    def _open_direct(self) -> None:
        """Connect this actor's process to the driver, if the driver is on this host."""
        if self.direct_addr is None or self.dconn is not None:
            return
        sock = direct.connect(self.direct_addr)
        if sock is None:
            return
        self.dconn = Connection(sock.detach())
        self.dconn_fd = self.dconn.fileno()
        self.dconn.send_bytes(pickle.dumps(
            [(m.DIRECT_HELLO, self.actor_id, self.pid, self.rank)], protocol=5))

    def _poll(self, timeout: float) -> bool:
        return self._recv(timeout)

    def _recv(self, timeout: float | None) -> bool:
        """Wait for the next batch from the rank; False on timeout.

        The batch is read by this thread, or by another one already reading (a
        thread of the user's code waiting for its own reply): either way replies
        land in ``replies`` and the rest in ``inbox``.
        """
        lock = self.arrived_lock
        with lock:
            if self.reading:
                seen = self.batches
                deadline = None if timeout is None else time.monotonic() + timeout
                self.waiting += 1
                key = self.poller_key
                if key is None or key[2] != tuple(self.peer_readers):
                    # The reader's poll may not watch a socket this thread waits on
                    # (a link it opened since: a thread of a task that returned,
                    # calling an actor while the main thread waits for work).
                    try:
                        os.write(self.wake_w, b"\1")
                    except BlockingIOError:
                        pass   # (woken already)
                try:
                    while self.reading and self.batches == seen:
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            return False
                        self.arrived.wait(left)
                finally:
                    self.waiting -= 1
                if self.batches != seen:
                    return True
            self.reading = True
        msgs = None
        try:
            if self.dconn is not None or self.peer_readers or timeout is None:
                msgs = self._recv_select(timeout)
            elif self.conn.poll(timeout):
                msgs = loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            os._exit(0)  # the rank (or the driver) is gone: nothing left to serve
        finally:
            self._end_reading(msgs)
        return msgs is not None

    def _end_reading(self, msgs: list | None) -> None:
        """The end of a thread's turn reading: file what it read (None: nothing
        came) and wake the threads waiting for a turn or a reply."""
        with self.arrived_lock:
            self.reading = False
            if msgs is not None:
                if msgs:
                    self._file(msgs)
                self.batches += 1
            if self.waiting:
                self.arrived.notify_all()

    def _recv_answer(self, link, timeout: float) -> bool:
        """``_recv`` for a task waiting for one direct call's answer: wait on that
        call's socket and the rank's pipe only, and read the answer straight off
        the socket. False on timeout, or when this cannot be done now: another
        thread reads, or waits for what a read files (``_recv`` reads every
        socket for it), or bytes wait to go out on some socket (``_recv``
        writes them as it waits). Answers on the task's other links wait in
        their sockets meanwhile."""
        channel = link.channel
        with self.arrived_lock:
            if self.reading or self.waiting or self.peer.links.get(link.actor_id) is not link:
                return False
            for ch in self.peer_channels.values():
                if ch.outbuf:
                    return False
            self.reading = True
        poller = link.rank_poller
        if poller is None:
            poller = link.rank_poller = select.poll()
            poller.register(channel.fd, select.POLLIN)
            poller.register(self.conn_fd, select.POLLIN)
        msgs = None
        try:
            for fd, _ in self.spinner.poll(poller, timeout * 1000.0):
                if msgs is None:
                    msgs = []
                if fd == channel.fd:
                    self.peer._read(link)   # files the answer in ``peer.results``
                else:
                    msgs = loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            os._exit(0)  # the rank is gone: nothing left to serve
        finally:
            self._end_reading(msgs)
        return msgs is not None

    def _recv_select(self, timeout: float | None) -> list | None:
        """The next batch from the rank or the driver's direct channel (direct calls
        are noted in ``direct_tids``), after whatever the peer sockets brought:
        calls for this actor (in the batch), results for this caller (filed by
        ``peer_calls``). None on timeout."""
        conn_fd = self.conn_fd
        dfd = self.dconn_fd
        server = self.peer_server
        # Calls enough queued: callers' sockets wait (they hold the flood back).
        full = server is not None and len(self.inbox) > peer_calls.INBOX_HIGH
        channels = self.peer_channels
        # The poll object is built again only when what it watches changes.
        key = (dfd, full, tuple(self.peer_readers),
               [fd for fd, ch in channels.items() if ch.outbuf] if channels else None)
        poller = self.poller
        if key != self.poller_key:
            poller = self.poller = select.poll()
            self.poller_key = key
            poller.register(conn_fd, select.POLLIN)
            poller.register(self.wake_r, select.POLLIN)
            if dfd != -1:
                poller.register(dfd, select.POLLIN)
            peer_calls.watch(poller, self.peer_readers, channels,
                             server.callers if full else ())
        events = self.spinner.poll(poller, None if timeout is None else timeout * 1000.0)
        if not events:
            return None
        msgs = []
        calls = []
        for fd, ev in events:
            if fd == conn_fd:
                msgs = loads(self.conn.recv_bytes())
            elif fd == self.wake_r:
                os.read(self.wake_r, 64)   # a waiter's: the poll is built again
            elif fd == dfd:
                driver_calls = loads(self.dconn.recv_bytes())
                for msg in driver_calls:
                    self.direct_tids.add(msg[1][m.T_ID])
                calls = calls + driver_calls
            else:
                read = peer_calls.serve(fd, ev, self.peer_readers, self.peer_channels,
                                        self.peer_lock)
                if read:
                    calls = calls + read
        return msgs + calls if calls else msgs

    def _file(self, msgs: list) -> None:
        replies, inbox = self.replies, self.inbox
        for msg in msgs:
            if msg[0] == m.REPLY:
                replies[msg[1]] = msg[2]
            else:
                inbox.append(msg)

    def _request(self, msg_kind: int, *fields, timeout: float | None = None,
                 on_timeout: tuple | None = None, blocking: bool = False) -> Any:
        """Send a request to the head and wait for its reply.

        ``blocking`` requests (get, wait) may wait for other tasks: the executor
        tells the scheduler its CPU is free meanwhile and, unless it hosts an
        actor, runs the tasks it is sent in the meantime (nested), so that a pool
        of a few workers cannot deadlock on tasks waiting for subtasks. Anything
        else that arrives waits in the inbox: an actor runs one call at a time, in
        order, and a collective or an allocation must not have other user code
        run in the middle of it.

        Only the main thread does either; another thread of the user's code just
        waits for its reply (reading the socket itself when no one else does).
        """
        req = next(self.req_ids)
        self.emit((msg_kind, req) + fields)
        replies = self.replies
        self._await(lambda: req in replies, timeout, blocking,
                    None if on_timeout is None else lambda: self.emit(on_timeout + (req,)))
        return replies.pop(req)

    def _await(self, done, timeout: float | None = None, blocking: bool = False,
               on_timeout=None) -> None:
        """Read and handle what arrives until ``done()``: a request's reply, or the
        results of direct calls (``peer_calls``). See ``_request`` for ``blocking``;
        at the timeout, ``on_timeout()`` is called once, or GetTimeoutError raised."""
        main = threading.get_ident() == self.main_thread
        deadline = None if timeout is None else time.monotonic() + timeout
        nested = blocking and main and self.actor_id is None
        blocked = False
        try:
            while not done():
                i = self._handleable(nested) if main else None
                if i is not None:
                    msg = self.inbox.pop(i)
                    if msg[0] == m.EXECUTE and not blocked:
                        # Running other work here: let the scheduler count our CPU as free.
                        blocked = True
                        self.emit((m.BLOCKED, 1))
                    self.handle(msg)
                    continue
                self.flush()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if on_timeout is None:
                        raise GetTimeoutError(f"timed out after {timeout} s")
                    on_timeout()
                    deadline = None
                    continue
                if blocking and not blocked and (main or self.actor_id is None):
                    # Still waiting after 50 ms, with or without a timeout: let the
                    # scheduler count our CPU as free, as Ray does for a blocked get.
                    # The main thread runs what the rank sends meanwhile (BLOCKED);
                    # another thread's wait lends it to another executor (LEND).
                    if self._poll(0.05 if left is None else min(left, 0.05)) or done():
                        continue
                    if deadline is not None and time.monotonic() >= deadline:
                        continue
                    blocked = True
                    self.emit((m.BLOCKED, 1) if main else (m.LEND, 1))
                    self.flush()
                    continue
                self._recv(None if left is None else min(left, 0.05))
        finally:
            if blocked:
                if not main:
                    self.emit((m.LEND, -1))
                    self.flush()
                elif self.actor_id is None:
                    self._stop_lending()
                else:
                    self.emit((m.BLOCKED, -1))   # an actor is sent no nested work

    def _stop_lending(self) -> None:
        """The main thread's wait that lent its CPU is over: tell the rank, and
        run the nested tasks it sent before it heard. They arrive ahead of its
        answer; left in the inbox they would wait until this task ends, and a
        thread of this task waiting for one of them would never see it."""
        req = next(self.req_ids)
        self.emit((m.UNBLOCK, req))
        replies = self.replies
        while req not in replies:
            if self.inbox:
                self.handle(self.inbox.pop(0))
                continue
            self.flush()
            self._recv(None)
        replies.pop(req)

    def _handleable(self, nested: bool) -> int | None:
        """Where in the inbox the next message a waiting request handles is, or None.

        Nested: anything, in order. Otherwise only replies; the rest stay queued,
        in order, for the serve loop (or the request this one is nested in).
        """
        inbox = self.inbox
        if not inbox:
            return None
        if nested:
            return 0
        return next((i for i, msg in enumerate(inbox) if msg[0] == m.REPLY), None)

    # --- API --------------------------------------------------------------------

    def record_profile(self, event: dict) -> None:
        self.profile_events.append(event)   # sent with the next flush

    def hold_refs(self, ids) -> None:
        self.holds_sent += 1
        with self.lock:
            pins = self.task_pins
            if pins and all(i in pins for i in ids):
                # The head holds these until the task's result, which this hold
                # will go ahead of: a message of its own would only wake the rank
                # and the head (a task given an actor handle: one per task). A ref
                # let go of before then costs neither a hold nor a release
                # (``_flush_out``). (Under the lock: the task's end resets the pins
                # under it, before its result is queued.)
                self.deferred_holds.extend(ids)
                return
        self.emit((m.HOLD, list(ids)))

    def submit(self, spec: list) -> None:
        peer = self.peer
        if peer is not None:
            refs = peer.escaping(spec)
            if refs:
                self._promote(refs)
        self.emit((m.SUBMIT, spec))
        self.flush()

    def submit_call(self, spec: list, lifetime) -> None:
        """An actor call: straight to the actor when ``peer_calls`` allows it."""
        peer = self.peer
        if peer is None:
            self.submit(spec)
            return
        if peer.dead and spec[m.T_ACTOR] in peer.dead:
            peer.settle(spec[m.T_ACTOR])
        deps = spec[m.T_DEPS]
        if deps:
            ready = self.ready_ids
            deps_ready = all(d[1] in ready or peer.owns(d[1]) for d in deps)
        else:
            deps_ready = True
        with self.peer_route_lock:
            how, link = peer.route(spec, deps_ready)
            if how == peer_calls.DIRECT:
                if deps or spec[m.T_CONTAINED]:   # (no refs among the arguments: neither)
                    if deps:
                        peer.inline_args(spec, self._await_answer)
                    refs = peer.escaping(spec)
                    if refs:   # the actor fetches the arguments' objects from the head
                        self._promote(refs)
                if not peer.send(link, spec, lifetime):
                    how = peer_calls.HEAD   # the actor's process was gone: see send
                    peer.settle(spec[m.T_ACTOR])
        if how == peer_calls.DIRECT:
            if len(link.inflight) > peer_calls.INFLIGHT_READ or \
                    len(link.channel.outbuf) > peer_calls.OUTBUF_HIGH:
                self._catch_up(link)
            return
        if how == peer_calls.DRAIN:
            self._await(lambda: not link.inflight, None, blocking=True)
        peer.note_head_call(spec[m.T_ACTOR], spec[m.T_RETURNS][:1])
        self.submit(spec)

    def _catch_up(self, link) -> None:
        """A caller far ahead of its actor: take the answers that came and let go of
        dropped results, and wait while the actor's socket takes no more."""
        self.flush()
        self._recv(0)
        peer = self.peer
        if len(link.channel.outbuf) > peer_calls.OUTBUF_HIGH:
            self._await(lambda: len(link.channel.outbuf) <= peer_calls.OUTBUF_HIGH // 2
                        or peer.links.get(link.actor_id) is not link, None, blocking=True)

    def _await_answer(self, oid: int) -> None:
        """Wait until the direct call that makes ``oid`` is answered."""
        peer = self.peer
        self._await(lambda: oid not in peer.pending, None, blocking=True)

    def _promote(self, oids) -> None:
        """Direct results about to leave this process become objects at the head."""
        peer = self.peer
        for oid in oids:
            if not peer.owns(oid):
                continue
            if oid in peer.pending:
                self._await_answer(oid)
            res = peer.results.pop(oid, None)
            if res is None:
                continue
            self.emit((m.PUT, oid, peer.record(res), res.contained or None))
            self.ready_ids.add(oid)
            if res.pins is not None:
                # The head holds the nested refs through the object once it has the
                # PUT: an answered request sent after it says so.
                self.control("ping")
                peer.unpin(res)

    def control(self, name: str, *args) -> Any:
        if self.peer is not None and name in peer_calls.FENCING:
            self.peer.fence(name, args)
        ok, result = self._request(m.CONTROL_CALL, name, args)
        if not ok:
            raise result
        return result

    def get(self, refs: list, timeout: float | None) -> list:
        peer = self.peer
        if peer is not None and timeout is None and len(refs) == 1 \
                and refs[0].id in peer.pending:
            rec = self._get_one_direct(refs[0].id)
            if rec is not None:
                return [values.from_record(rec, self.arena, refs[0])]
        ids = [r.id for r in refs]
        if peer is not None and (peer.pending or peer.results):
            recs = self._get_records(ids, timeout)
        else:
            recs = self._get_from_head(ids, timeout)
            if peer is not None:
                self.ready_ids.update(ids)
                if peer.head_calls:
                    peer.seen_finished(ids)
        return [values.from_record(rec, self.arena, ref) for ref, rec in zip(refs, recs)]

    def _get_from_head(self, ids: list, timeout: float | None) -> list:
        try:
            return self._request(m.GET, ids, timeout=timeout, blocking=True)
        except GetTimeoutError:
            raise GetTimeoutError(f"get timed out after {timeout} s waiting for "
                                  f"{len(ids)} object(s)") from None

    def _get_one_direct(self, oid: int) -> tuple | None:
        """The record of one direct result still in flight, for a get with no
        timeout (a sync call's): read until it comes, without ``_await``'s
        turns while nothing else arrives for ``QUICK_WAIT``; then, or when
        something else arrives, ``_await`` waits as for any get. None if the
        result became an object at the head meanwhile, or holds refs."""
        peer = self.peer
        pending = peer.pending
        if not self.inbox:
            self.flush()
            sent = pending.get(oid)   # (another thread may have read the answer)
            if sent is not None and self.peer_server is None and self.dconn is None:
                link, recv = sent[0], self._recv_answer   # a task's call: its link, the rank
                while oid in pending and not self.inbox and recv(link, QUICK_WAIT):
                    pass
            while oid in pending and not self.inbox and self._recv(QUICK_WAIT):
                pass
        if oid in pending:
            self._await(lambda: oid not in pending, None, blocking=True)
        res = peer.results.get(oid)
        if res is None or res.pins is not None:
            return None
        return peer.record(res)

    def _get_records(self, ids: list, timeout: float | None) -> list:
        """Records of ``ids``, some of them direct results (``peer_calls``)."""
        peer = self.peer
        results = peer.results
        mine = [i for i in ids if peer.owns(i)]
        deadline = None if timeout is None else time.monotonic() + timeout
        if any(i not in results for i in mine):
            try:
                self._await(lambda: all(map(peer.answered, mine)), timeout, blocking=True)
            except GetTimeoutError:
                raise GetTimeoutError(f"get timed out after {timeout} s waiting for "
                                      f"{len(ids)} object(s)") from None
        got = {i: results.get(i) for i in mine}
        others = [i for i in ids if got.get(i) is None]   # (promoted meanwhile: at the head)
        if others:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            got.update(zip(others, self._get_from_head(others, left)))
            self.ready_ids.update(others)
            if peer.head_calls:
                peer.seen_finished(others)
        pinned = [res for res in got.values() if type(res) is peer_calls.Result
                  and res.pins is not None]
        if pinned:
            # Our holds of their nested refs are at the head once it answers this.
            self.control("ping")
            for res in pinned:
                peer.unpin(res)
        return [peer.record(rec) if type(rec) is peer_calls.Result else rec
                for rec in (got[i] for i in ids)]

    def wait(self, ids: list[int], num_returns: int, timeout: float | None) -> set[int]:
        peer = self.peer
        if peer is not None and (peer.pending or peer.results) and any(map(peer.owns, ids)):
            return self._wait_direct(ids, num_returns, timeout)
        ready = self._request(m.WAIT, ids, num_returns, timeout=timeout,
                              on_timeout=(m.WAIT_NOW,), blocking=True)
        if peer is not None:
            self.ready_ids.update(ready)
            if peer.head_calls:
                peer.seen_finished(ready)
        return set(ready[:num_returns])

    def _wait_direct(self, ids: list[int], num_returns: int,
                     timeout: float | None) -> set[int]:
        """wait() over direct results and head objects: the head is asked in slices
        of ``DIRECT_WAIT_SLICE`` while direct results may still come."""
        peer = self.peer
        mine = [i for i in ids if peer.owns(i)]
        mine_set = set(mine)
        others = [i for i in ids if i not in mine_set]
        deadline = None if timeout is None else time.monotonic() + timeout
        ready_others: set = set()
        while True:
            ready = {i for i in mine if peer.answered(i)}
            need = num_returns - len(ready) - len(ready_others)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if need <= 0 or left == 0:
                break
            if others:
                waiting = [i for i in others if i not in ready_others]
                pending = len(ready) < len(mine)
                span = left if not pending else (DIRECT_WAIT_SLICE if left is None
                                                 else min(left, DIRECT_WAIT_SLICE))
                got = self._request(m.WAIT, waiting, min(need, len(waiting)), timeout=span,
                                    on_timeout=(m.WAIT_NOW,), blocking=True)
                ready_others.update(got)
                self.ready_ids.update(got)
                if peer.head_calls:
                    peer.seen_finished(got)
                if not pending and len(got) < min(need, len(waiting)):
                    break   # timed out with nothing direct left to wait for
            else:
                try:
                    self._await(lambda: sum(map(peer.answered, mine)) >= num_returns, left,
                                blocking=True)
                except GetTimeoutError:
                    pass
        ready |= ready_others
        return set([i for i in ids if i in ready][:num_returns])

    def _alloc(self, size: int) -> tuple[int, int]:
        if size > self.store_size:
            raise values.store_full(size, self.store_size, self.node)
        node, off, cap = self._request(m.ALLOC, size)
        if off is None:
            raise values.store_full(size, cap, node)
        return node, off

    def put(self, value: Any) -> context.ObjectRef:
        if isinstance(value, context.ObjectRef):
            raise TypeError("put() of an ObjectRef is not allowed; pass the ref itself")
        rec, contained = values.to_record(value, self._alloc, self.arena,
                                          "value passed to put()")
        if contained and self.peer is not None:
            self._promote(contained)
        oid = context.new_ids(1)
        self.emit((m.PUT, oid, rec, contained or None))
        if self.peer is not None:
            self.ready_ids.add(oid)
        return context.ObjectRef(oid)

    def put_serialized(self, s) -> context.ObjectRef:
        if s.contained and self.peer is not None:
            self._promote(s.contained)
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
            self.execute(msg[1])
        elif kind == m.REPLY:
            self.replies[msg[1]] = msg[2]
        elif kind == m.CREATE_ACTOR:
            self.create_actor_here(msg[1])
        elif kind == m.RUN_FUNCTION:
            self.run_function(msg[1])
        elif kind == m.SHUTDOWN:
            self.flush()
            os._exit(0)

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
            fn = self.fns[fn_id] = loads(blob)
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
        direct = tid in self.direct_tids
        if direct:
            sends = self.rank_sends
        server = self.peer_server
        peer_call = server is not None and tid in server.calls
        if direct or peer_call:
            _Output.printed = False
        outer = self.current_task_name, self.current_task_id
        if outer[1] is None and self.peer is not None and self.actor_id is None:
            self.peer.new_task()
        self.current_task_name, self.current_task_id = name, tid
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
            recs, contained = self._results(spec, result, peer_call)
        except BaseException as exc:  # user code: everything is reported, nothing escapes
            msg = (m.TASK_FAILED, tid, self._failure_record(exc, spec), t0, time.time(),
                   self.pid)
            if isinstance(exc, SystemExit) and spec[m.T_ACTOR] is not None:
                self.exiting = True
                self.emit((m.ACTOR_DIED, self.actor_id, f"exit() called in {name}", False))
        else:
            msg = (m.TASK_DONE, tid, recs, contained or None, t0, time.time(), self.pid)
        finally:
            self.current_task_name, self.current_task_id = outer
            if pinning:
                with self.lock:
                    self.task_pins = outer_pins
            hooks.after_task()
        if not peer_call:
            self.emit(msg)
        else:
            if self.holds_sent != holds or _Output.printed:
                # The caller lets go of the arguments once answered: the head must
                # have this process's holds first (its answer to a ping says so),
                # and the lines the call printed (they go through the rank).
                self.control("ping")
            elif contained or self.exiting:
                self.flush()   # what the call put or said goes ahead of its answer
            server.answer(tid, msg, contained)
        if direct and (self.rank_sends != sends or _Output.printed):
            # What the call sent through the rank (a hold, a put, a printed line)
            # must reach the head before its result: the result follows that path.
            self.direct_tids.discard(tid)
        # (At the end of what is queued, the loop that called this flushes before
        # it waits: every wait for the next message does.)
        if len(self.out) + (server.queued if peer_call else 0) >= FLUSH_EVERY or \
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
        recs = self._get_from_head(todo, None)
        for rec in recs:
            if rec[0] == ERROR:
                raise _DepFailed(rec)
        fetched = iter(recs)
        spec[m.T_DEPS] = [dep if len(dep) == 3 else (dep[0], dep[1], next(fetched))
                          for dep in deps]

    def actor_terminated(self) -> None:
        os._exit(0)

    def _failure_record(self, exc: BaseException, spec: list) -> tuple:
        if isinstance(exc, _DepFailed):
            return exc.record   # as the head fails a call whose argument failed
        name = spec[m.T_NAME]
        if isinstance(exc, SystemExit):
            # exit() ends a worker in Ray 0.7: a task's caller sees RayWorkerError,
            # an actor's RayActorError, and the actor is gone (not restarted).
            where = f"rank {self.rank} ({self.host}), pid {self.pid}"
            if spec[m.T_ACTOR] is not None:
                return values.error_record(ActorDiedError(
                    f"actor method {name} called exit() on {where}: the actor has exited"))
            return values.error_record(WorkerCrashedError(
                f"task {name} called exit() on {where}: its worker exited"))
        if isinstance(exc, KeyboardInterrupt) and spec[m.T_ACTOR] is None:
            exc = RuntimeError(f"KeyboardInterrupt raised inside task {name}")
        return self._error_record(exc, name)

    def _error_record(self, exc: BaseException, name: str) -> tuple:
        if isinstance(exc, (TaskError, ActorDiedError)) and getattr(exc, "_from_get", False):
            return values.error_record(exc)
        tb = (f"### Worker {self.rank} of {self.world_size} on {self.host}, pid {self.pid}\n"
              + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return values.error_record(TaskError(name, tb, self.rank, self.host, exc))

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
            self._promote(contained)
        return recs, contained

    # --- actors -----------------------------------------------------------------

    def create_actor_here(self, spec: list) -> None:
        self.actor_id = spec[m.T_ACTOR]
        # An actor's waits for its next call spin as before, crowd or not: driver
        # threads calling actors ran slower with the actors blocking meanwhile.
        self.spinner.look = False
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
            self._error_signal(exc, spec[m.T_NAME], tb)
            self.emit((m.ACTOR_DIED, self.actor_id,
                       f"its constructor raised on rank {self.rank}:\n{tb}", False))
            self.flush()
            self.actor_failed()
            return
        self._open_direct()
        if self.peer_session is not None and not spec[m.T_RETRIES]:
            # Creation specs carry the actor's max_task_retries there (actors.py):
            # calls the head must retry do not come direct.
            self.peer_server = peer_calls.PeerServer.open(
                self.peer_session, self.actor_id, self.peer_readers, self.peer_channels,
                self.peer_lock, self.rank)
            if self.peer_server is not None:
                self.peer_server.held = spec[m.T_RES]
        self.emit((m.ACTOR_READY, self.actor_id, self.pid))
        self.flush()

    def _error_signal(self, exc: BaseException, name: str, tb: str) -> None:
        """An actor whose constructor raised sends its ErrorSignal (Ray 0.7 signals)."""
        try:
            from .signals import ErrorSignal
            from ..transport.serialization import dumps
            err = TaskError(f"{name}.__init__", tb, self.rank, self.host, exc)
            self.control("signal_send", self.actor_id, None, dumps(ErrorSignal(err)))
        except Exception:  # best effort: the ACTOR_DIED that follows is what counts
            pass

    def actor_failed(self) -> None:
        os._exit(0)  # this process existed only for the actor

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
        while True:
            if not self.inbox:
                self.flush()
                self._recv(None)
            while self.inbox:
                msg = self.inbox.pop(0)
                if msg[0] == m.EXECUTE:
                    self.execute(msg[1])
                else:
                    self.handle(msg)


class _DepFailed(Exception):
    """An argument of a direct call is an error: the call fails with it."""

    def __init__(self, record: tuple) -> None:
        super().__init__()
        self.record = record


class _Output(io.TextIOWrapper):
    """An executor's sys.stdout/sys.stderr: notes that a call printed something."""

    printed = False

    def write(self, s: str) -> int:
        _Output.printed = True
        return super().write(s)


def _noting_output(f):
    """A line-buffered _Output on ``f``'s file descriptor (``f``, still ``sys.__stdout__``
    or ``sys.__stderr__``, stays usable)."""
    if f is None:
        return f
    try:
        buffer = open(f.fileno(), "wb", closefd=False)
    except (OSError, ValueError, io.UnsupportedOperation):
        return f
    return _Output(buffer, encoding=f.encoding, errors=f.errors, line_buffering=True)


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
    sys.stdout = _noting_output(sys.stdout)
    sys.stderr = _noting_output(sys.stderr)
    cfg = json.loads(os.environ.pop("HPC_RAY_EXECUTOR_CONFIG"))
    sys.path[:] = cfg["sys_path"]
    if cfg.get("cwd"):
        try:
            os.chdir(cfg["cwd"])
        except OSError:
            pass
    context.set_id_prefix(cfg["rank"], cfg["serial"])
    arena = Arena(cfg["arena_fd"], cfg["store_size"]) if cfg["store_size"] else Arena(-1, 0)
    conn = Connection(cfg["fd"])
    ctx = ExecutorContext(conn, arena, cfg["node"], cfg["rank"], cfg["size"],
                          cfg["store_size"], cfg.get("direct_addr"), cfg.get("session_id"))
    context.set_current(ctx)
    ctx.serve()


if __name__ == "__main__":
    main()
