"""Actors that live inside their worker rank, and the API context they use.

An actor created with ``@remote(in_rank=True)`` is not isolated in an executor:
its methods run in the rank's own process, in the rank's loop, so they can use
MPI directly (``hpc_ray.collective.get_communicator``): existing mpi4py code, a
solver or parallel HDF5, runs across a group of such actors on a real
communicator. The price: a crash in a method ends the rank (and the MPI job),
and the rank serves nothing else while a method runs.

Calls such an actor makes into the hpc_ray API (get, put, remote, ...) go to the
head as MPI messages from the rank; messages that arrive meanwhile for the
rank's loop are kept for it (``WorkerLoop.deferred``).
"""
from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

from ..transport import messages as m
from ..transport.comm import recv_control
from ..transport.wait import Backoff
from .executor import ExecutorContext
from .executor_transport import ExecutorTransport

if TYPE_CHECKING:
    from .worker import WorkerLoop

#: Request ids of in-rank actors; executors' requests are numbered below this.
REQ_BASE = 1 << 40
#: Seconds between looks at the driver's pid while an in-rank actor waits.
DRIVER_CHECK = 1.0


class DriverGone(BaseException):
    """The driver died while an in-rank actor waited for the head: the rank's loop
    ends (``WorkerLoop.run``), as it does when it is idle. A BaseException, so
    that the actor's method does not take it for its own error."""


class RankTransport(ExecutorTransport):
    """In-rank actors' messages: over the rank's MPI endpoint, straight to the head."""

    def __init__(self, loop: "WorkerLoop") -> None:
        super().__init__(None)
        self.loop = loop
        self.req_ids = itertools.count(REQ_BASE)

    def emit(self, msg: tuple) -> None:
        # The rank's own loop waits with the actor: its CPU is not free for tasks.
        if msg[0] != m.BLOCKED:
            self.out.append(msg)

    def send(self, msgs: list) -> None:
        self.loop.sender.send(0, msgs)

    def recv(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        # The rank's own back-off: sleeps from 20 us doubling to 1 ms. (A fixed
        # 20 us sleep woke an in-rank actor waiting in get() 50,000 times a second.)
        backoff = Backoff()
        checked = time.monotonic()
        while True:
            got = False
            for src, msgs in recv_control(self.loop.comm):
                for msg in msgs:
                    if msg[0] == m.FETCH:
                        self.loop.fetcher.serve(src, *msg[1:])
                        continue
                    if msg[0] == m.REPLY:
                        _, req_id, _ = msg
                        if req_id >= REQ_BASE:
                            self.inbox.append(msg)
                            got = True
                            continue
                    self.loop.deferred.append((src, [msg]))
            self.loop.sender.progress()
            self.loop.fetcher.progress()
            if got:
                return True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if now - checked > DRIVER_CHECK:
                checked = now
                self._check_driver()
            pause = backoff.next_timeout()
            time.sleep(pause if deadline is None else min(pause, deadline - now))

    def _check_driver(self) -> None:
        from .worker import _alive
        pid = self.loop.driver_pid
        if pid and not _alive(pid):
            raise DriverGone(pid)


class RankContext(ExecutorContext):
    """The API context of in-rank actors: requests go straight to the head."""

    in_rank = True

    def __init__(self, loop: "WorkerLoop") -> None:
        super().__init__(RankTransport(loop), loop.arena, loop.node, loop.rank,
                         loop.comm.Get_size(), loop.arena.size)
        self.loop = loop
        self.actors: dict[int, object] = {}

    def flush(self) -> None:
        super().flush()
        self.loop.sender.progress()

    # --- actors -------------------------------------------------------------------

    def create(self, spec: list) -> None:
        self.actor = None
        self.create_actor_here(spec)
        if self.actor is not None:
            self.actors[spec[m.T_ACTOR]] = self.actor

    def call(self, spec: list) -> None:
        actor_id = spec[m.T_ACTOR]
        self.actor_id = actor_id
        self.actor = self.actors.get(actor_id)
        self.exiting = False
        self.execute(spec)
        if self.peer is not None and self.peer.held:
            self.caller.flush_held()   # (the rank's loop has no wait to send them in)
        self.flush()

    def actor_failed(self) -> None:
        pass  # the rank lives on; the head was told the actor died

    def actor_terminated(self) -> None:
        self.actors.pop(self.actor_id, None)
        self.exiting = False

    def drop(self, actor_id: int) -> bool:
        return self.actors.pop(actor_id, None) is not None
