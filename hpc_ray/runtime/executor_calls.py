"""The executor as its caller's host (``caller.CallerHost``): requests to the head
go through the rank, and waits read the rank's pipe and the actors' sockets
(``executor_transport``), running nested tasks meanwhile as any get does. Also
the books of the refs this process holds at the head: which objects it knows
exist (``ExecutorContext.ready_ids``), its HOLDs, and which releases the head
must hear of.
"""
from __future__ import annotations

import time

from ..exceptions import GetTimeoutError
from ..transport import messages as m
from . import peer_calls, values

#: A get of one direct result reads its answer in turns of this many seconds
#: before it waits as any get does (and lends its CPU after 50 ms more).
QUICK_WAIT = 0.01


class ExecutorCallerHost:
    """``caller.CallerHost`` for ``ctx``, an ``executor.ExecutorContext``."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    @property
    def arena(self):
        return self.ctx.arena

    def send_to_head(self, spec: list) -> None:
        self.ctx.emit((m.SUBMIT, spec))
        self.ctx.flush()

    def known_at_head(self, oid: int) -> bool:
        return oid in self.ctx.ready_ids

    def put_at_head(self, oid: int, record: tuple, contained) -> None:
        self.ctx.emit((m.PUT, oid, record, contained))
        self.ctx.ready_ids.add(oid)

    def confirm_holds(self) -> None:
        self.ctx.control("ping")     # answered after the head has this process's holds

    def _seen_at_head(self, ids) -> None:
        """A get or wait saw these head objects ready."""
        peer = self.ctx.peer
        if peer is not None:
            self.ctx.ready_ids.update(ids)
            if peer.head_calls:
                peer.seen_finished(ids)

    def get_from_head(self, refs: list, timeout: float | None) -> list:
        ids = [r.id for r in refs]
        recs = self.get_records(ids, timeout)
        self._seen_at_head(ids)
        arena = self.ctx.arena
        return [values.from_record(rec, arena, ref) for ref, rec in zip(refs, recs)]

    def get_records(self, ids: list, timeout: float | None) -> list:
        try:
            return self.ctx._request(m.GET, ids, timeout=timeout, blocking=True)
        except GetTimeoutError:
            raise GetTimeoutError(f"get timed out after {timeout} s waiting for "
                                  f"{len(ids)} object(s)") from None

    def wait_on_head(self, ids: list, num_returns: int, timeout: float | None) -> set:
        ready = self.ctx._request(m.WAIT, ids, num_returns, timeout=timeout,
                                  on_timeout=(m.WAIT_NOW,), blocking=True)
        self._seen_at_head(ready)
        return set(ready[:num_returns])

    def wait_until(self, done, deadline: float | None, need) -> bool:
        timeout = None if deadline is None else deadline - time.monotonic()
        try:
            self.ctx.transport.await_(done, timeout, blocking=True)
        except GetTimeoutError:
            return False
        return True

    def wait_answer(self, oid: int, link) -> None:
        """Read until the call is answered, without ``await_``'s turns while
        nothing else arrives for ``QUICK_WAIT``; then, or when something else
        arrives, wait as any get does."""
        pending = self.ctx.peer.pending
        transport = self.ctx.transport
        inbox = transport.inbox
        if not inbox:
            self.ctx.flush()
            if oid in pending and self.ctx.peer_server is None:
                recv = transport.recv_answer   # a task's call: its link, the rank
                while oid in pending and not inbox and recv(link, QUICK_WAIT):
                    pass
            while oid in pending and not inbox and transport.recv(QUICK_WAIT):
                pass
        if oid in pending:
            transport.await_(lambda: oid not in pending, None, blocking=True)

    def keep_up(self, link) -> None:
        """A caller far ahead of its actor: take the answers that came and let go of
        dropped results, and wait while the actor's socket takes no more."""
        if len(link.inflight) <= peer_calls.INFLIGHT_READ and not link.channel.backed_up():
            return
        self.ctx.flush()
        transport = self.ctx.transport
        transport.recv(0)
        links = self.ctx.peer.links
        if link.channel.backed_up():
            transport.await_(lambda: link.channel.drained()
                             or links.get(link.actor_id) is not link, None, blocking=True)

    def poll_links(self, need) -> None:
        """(The waits on the head read the direct sockets too.)"""

    def before_route(self, spec: list) -> None:
        """(Calls through the head are seen finished by gets and waits.)"""

    def with_head_args(self, spec: list) -> None:
        """(The head is in another process: the actor fetches them.)"""

    # --- refs held at the head ------------------------------------------------------

    def hold_refs(self, ids) -> None:
        self.ctx.holds_sent += 1
        with self.ctx.transport.lock:
            pins = self.ctx.task_pins
            if pins and all(i in pins for i in ids):
                # The head holds these until the task's result, which this hold
                # will go ahead of: a message of its own would only wake the rank
                # and the head (a task given an actor handle: one per task). A ref
                # let go of before then costs neither a hold nor a release
                # (``released``). (Under the lock: the task's end resets the pins
                # under it, before its result is queued.)
                self.ctx.deferred_holds.extend(ids)
                return
        self.ctx.emit((m.HOLD, list(ids)))

    def released(self, released, deferred: list) -> list:
        """The ids among ``released`` (popped) to RELEASE at the head (``lock`` held)."""
        ids = []
        peer = self.ctx.peer
        ready_ids = self.ctx.ready_ids
        while released:
            oid = released.popleft()
            if deferred and oid in deferred:
                deferred.remove(oid)   # held and let go of: the head never knew
                ready_ids.discard(oid)
                continue
            if peer is None or not peer.forget(oid):   # (a direct result: the
                ids.append(oid)                        # head never knew it)
                ready_ids.discard(oid)
        return ids
