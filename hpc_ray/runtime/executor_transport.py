"""The executor's transport: its pipe to the rank, the sockets of direct calls,
and the waits on them (``executor.py`` executes).

    ExecutorContext ─ emit / send / request ─▶ ExecutorTransport ─▶ rank (socketpair)
                    ◀─ inbox (EXECUTE, ...), replies by request id ─┘  callers', actors' sockets

Threads of the user's code may call the API at once (issue 11). Every send goes
out under one lock; a thread waiting for its reply reads the pipe itself unless
another thread already does, and whoever reads files replies by request id and
leaves the rest (EXECUTE, ...) for the main thread, the only one that runs
tasks. A thread other than the main one never runs nested work; its long wait
in a task lends the task's CPU with LEND instead of BLOCKED, and the rank runs
what it gets for that CPU in a spare executor. So does the main thread's wait
with ``MAX_NESTED`` tasks on its stack (DEEP): each nested task takes about a
dozen frames, and a recursive program (a task that gets the tasks it submits,
``fib``) would otherwise pile its tasks onto one stack until Python's recursion
limit failed one.
"""
from __future__ import annotations

import io
import itertools
import os
import pickle
import select
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from ..exceptions import GetTimeoutError
from ..transport import messages as m
from ..transport.serialization import loads
from ..transport.wait import Spinner
from . import executor_exit, peer_calls

#: Tasks on an executor's stack (``ExecutorContext.depth``) beyond which its
#: main thread's waits run no more nested tasks (DEEP): about a dozen frames
#: each, well inside Python's recursion limit of 1000 with the user's own frames.
MAX_NESTED = 24


class ExecutorTransport:
    """An executor's messages to and from the rank, and its waits for them.

    ``owner`` (the executor's context) runs what arrives: ``owner.handle(msg)``,
    ``owner.flush()`` (send what is owed) and ``owner.actor_id``.
    """

    def __init__(self, conn: Connection | None) -> None:
        self.owner = None
        self.conn = conn
        self.conn_fd = conn.fileno() if conn is not None else -1   # (None: RankTransport)
        self.out: list = []
        self.inbox: list = []
        self.replies: dict[int, Any] = {}
        self.req_ids = itertools.count(1)
        # Sends are serialized by ``lock``; any waiting thread may read the
        # socket, one at a time (``reading``), and files what it reads: replies
        # by request id into ``replies``, everything else into ``inbox`` for the
        # main thread.
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
        #: Written by a waiter to wake the reader's poll (``recv``).
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        #: The thread that runs serve(): the only one that executes tasks.
        self.main_thread = threading.get_ident()
        # Direct calls between executors (``peer_calls``): the sockets the wait
        # loop watches besides the rank's, fd -> reader (returns messages for the
        # inbox), and those of them written through a buffer, fd -> Channel,
        # whose buffers ``channel_lock`` guards.
        self.readers: dict = {}
        self.channels: dict = {}
        self.channel_lock = threading.Lock()
        #: The caller's and the actor's sides of direct calls, once there are.
        self.peer: peer_calls.PeerCaller | None = None
        self.server = None
        #: Busy-polls a little before blocking while that pays and (a task's
        #: process) no crowd of ready threads takes the cores (``transport/wait.py``).
        self.spinner = Spinner(look=True)
        #: ``recv_select``'s poll object, and what it was built to watch.
        self.poller = None
        self.poller_key = None

    def emit(self, msg: tuple) -> None:
        with self.lock:
            self.out.append(msg)

    def send(self, msgs: list) -> None:
        self.conn.send_bytes(pickle.dumps(msgs, protocol=5))

    def recv(self, timeout: float | None) -> bool:
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
                if key is None or key[1] != tuple(self.readers):
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
            if self.readers or timeout is None:
                msgs = self.recv_select(timeout)
            elif self.conn.poll(timeout):
                msgs = loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            executor_exit.os_exit(0)  # the rank is gone: nothing to tell it
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

    def recv_answer(self, link, timeout: float) -> bool:
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
            for ch in self.channels.values():
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
            executor_exit.os_exit(0)  # the rank is gone: nothing to tell it
        finally:
            self._end_reading(msgs)
        return msgs is not None

    def recv_select(self, timeout: float | None) -> list | None:
        """The next batch from the rank, after whatever the peer sockets brought:
        calls for this actor (in the batch), results for this caller (filed by
        ``peer_calls``). None on timeout."""
        conn_fd = self.conn_fd
        server = self.server
        # Calls enough queued: callers' sockets wait (they hold the flood back).
        full = server is not None and len(self.inbox) > peer_calls.INBOX_HIGH
        channels = self.channels
        # The poll object is built again only when what it watches changes.
        key = (full, tuple(self.readers),
               [fd for fd, ch in channels.items() if ch.outbuf] if channels else None)
        poller = self.poller
        if key != self.poller_key:
            poller = self.poller = select.poll()
            self.poller_key = key
            poller.register(conn_fd, select.POLLIN)
            poller.register(self.wake_r, select.POLLIN)
            peer_calls.watch(poller, self.readers, channels,
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
            else:
                read = peer_calls.serve(fd, ev, self.readers, self.channels,
                                        self.channel_lock)
                if read:
                    calls = calls + read
        return msgs + calls if calls else msgs

    def _file(self, msgs: list) -> None:
        if m.CHECKING:
            m.check_all(msgs, f"executor {os.getpid()} from its rank or its callers")
        replies, inbox = self.replies, self.inbox
        for msg in msgs:
            if msg[0] == m.REPLY:
                _, req_id, payload = msg
                replies[req_id] = payload
            else:
                inbox.append(msg)

    def request(self, msg_kind: int, *fields, timeout: float | None = None,
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
        self.await_(lambda: req in replies, timeout, blocking,
                    None if on_timeout is None else lambda: self.emit(on_timeout + (req,)))
        return replies.pop(req)

    def await_(self, done, timeout: float | None = None, blocking: bool = False,
               on_timeout=None) -> None:
        """Read and handle what arrives until ``done()``: a request's reply, or the
        results of direct calls (``peer_calls``). See ``request`` for ``blocking``;
        at the timeout, ``on_timeout()`` is called once, or GetTimeoutError raised."""
        main = threading.get_ident() == self.main_thread
        deadline = None if timeout is None else time.monotonic() + timeout
        task = main and self.owner.actor_id is None
        # At the nesting limit no task runs here: those sent before the rank
        # heard DEEP go back to it (RETURNED), and it runs them in another executor.
        deep = task and self.owner.depth >= MAX_NESTED
        lends = (m.DEEP, 1) if deep else (m.BLOCKED, 1)
        nested = blocking and task
        blocked = False
        read = False     # at the timeout, one read first: a timeout of 0 sees what came
        try:
            while not done():
                i = self._handleable(nested) if main else None
                if i is not None:
                    msg = self.inbox.pop(i)
                    if msg[0] == m.EXECUTE:
                        if not deep and self.args_pending(msg[1]):
                            # Run here it could wait for a task below it: from now
                            # on this wait lends its CPU as a deep one does.
                            if blocked:
                                self.emit((m.BLOCKED, -1))
                            deep, lends, blocked = True, (m.DEEP, 1), False
                        if not blocked:
                            # Running other work here: let the scheduler count our CPU as free.
                            blocked = True
                            self.emit(lends)
                        if deep:
                            # Back to the rank, for another executor (past the
                            # nesting limit each would be one more level, past what
                            # Python's recursion limit allows when many come at once).
                            self.give_back(msg[1])
                            continue
                    self.owner.handle(msg)
                    continue
                self.owner.flush()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if not read:
                        read = True
                        self.recv(0)
                        continue
                    if on_timeout is None:
                        raise GetTimeoutError(f"timed out after {timeout} s")
                    on_timeout()
                    deadline = None
                    continue
                if blocking and not blocked and (main or self.owner.actor_id is None):
                    # Still waiting after 50 ms, with or without a timeout: let the
                    # scheduler count our CPU as free, as Ray does for a blocked get.
                    # The main thread runs what the rank sends meanwhile (BLOCKED);
                    # another thread's wait lends it to another executor (LEND).
                    if self.recv(0.05 if left is None else min(left, 0.05)) or done():
                        continue
                    if deadline is not None and time.monotonic() >= deadline:
                        continue
                    blocked = True
                    self.emit(lends if main else (m.LEND, 1))
                    self.owner.flush()
                    continue
                self.recv(None if left is None else min(left, 0.05))
        finally:
            if blocked:
                if not main or deep:
                    self.emit((m.LEND, -1) if not main else (m.DEEP, -1))
                    self.owner.flush()
                elif self.owner.actor_id is None:
                    self.stop_lending()
                else:
                    self.emit((m.BLOCKED, -1))   # an actor is sent no nested work

    def give_back(self, spec: list) -> None:
        """Send a task sent here back to the rank, for another executor (RETURNED).
        A function blob that came with it is read first: the rank sent this
        process later tasks of that function without it."""
        if spec[m.T_BLOB] is not None:
            try:
                self.owner._function(spec)
            except Exception:  # noqa: BLE001 - the task's run elsewhere reports it
                pass
        self.emit((m.RETURNED, [spec[m.T_ID]]))

    def args_pending(self, spec: list) -> bool:
        """Whether a task sent to run nested in a wait here names, nested in its
        arguments, refs whose objects do not exist yet (one round trip to the
        head). Run on this stack it could wait for a task that waits, directly
        or through others, for one below it, which cannot return before it
        does: such a task runs in another executor (RETURNED)."""
        refs = spec[m.T_CONTAINED]
        if not refs:
            return False
        wanted = list(set(refs))
        ready = self.request(m.WAIT, wanted, len(wanted), timeout=0, on_timeout=(m.WAIT_NOW,))
        return len(ready) < len(wanted)

    def stop_lending(self) -> None:
        """The main thread's wait that lent its CPU is over: tell the rank
        (UNBLOCK), run the nested tasks it sent before it heard, then take the
        CPU back (BLOCKED -1). They arrive ahead of its answer; left in the
        inbox they would wait until this task ends, and a thread of this task
        waiting for one of them would never see it. The CPU stays lent while
        they run: this task cannot go on meanwhile. Taken back first, the head
        counted this task on a CPU it could not use; one of them that waited
        for subtasks lent one CPU for two tasks, and with two such levels on a
        rank the head had no room left for the subtasks (the likely cause of a
        nested task tree's hang in CI)."""
        req = next(self.req_ids)
        self.emit((m.UNBLOCK, req))
        replies = self.replies
        while req not in replies:
            if self.inbox:
                msg = self.inbox.pop(0)
                if msg[0] == m.EXECUTE and self.args_pending(msg[1]):
                    self.give_back(msg[1])   # (as in await_)
                else:
                    self.owner.handle(msg)
                continue
            self.owner.flush()
            self.recv(None)
        replies.pop(req)
        self.emit((m.BLOCKED, -1))
        self.owner.flush()

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


class Output(io.TextIOWrapper):
    """An executor's sys.stdout/sys.stderr: notes that a call printed something,
    and whether it left a line open (``end_lines``)."""

    printed = False
    #: Some Output's last write left its line open (one test per task, not two).
    lines_open = False
    open_line = False

    def write(self, s: str) -> int:
        Output.printed = True
        if s:
            self.open_line = s[-1] != "\n"
            if self.open_line:
                Output.lines_open = True
        return super().write(s)

    @staticmethod
    def end_lines() -> None:
        """A task ended with a line open: end it, so that the rank, which passes
        on whole lines, passes it on before the task's result."""
        Output.lines_open = False
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, Output) and stream.open_line:
                stream.write("\n")


def noting_output(f):
    """A line-buffered Output on ``f``'s file descriptor (``f``, still ``sys.__stdout__``
    or ``sys.__stderr__``, stays usable)."""
    if f is None:
        return f
    try:
        buffer = open(f.fileno(), "wb", closefd=False)
    except (OSError, ValueError, io.UnsupportedOperation):
        return f
    return Output(buffer, encoding=f.encoding, errors=f.errors, line_buffering=True)
