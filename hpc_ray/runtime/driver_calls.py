"""The driver's direct calls to actors on its host (``peer_calls``, caller side).

The driver calls an actor on its host as a task does: straight over the actor's
socket, the result owned by the driver, the head not involved. What the head
would otherwise do for the call, the driver does here in-process under the
head's lock: an escaping result is put into the head's tables, the holds of
refs nested in a result are applied before the actor's pins go, and the calls'
summaries go into the head's history (``tasks()``, the timeline).

User threads wait for results here, not in the head's wait loop. A thread reads
the sockets of the actors it waits on itself, when no other thread reads any of
them (``Link.reading``); otherwise it waits until that thread's turn ends
(``arrived``), by which time its answers may have come. So threads calling
different actors each read their own (n:n calls need no hand-off between
threads), and one socket is never read by two. A Ctrl-C lands between reads,
never inside one.
"""
from __future__ import annotations

import select
import threading
import time

from ..exceptions import GetTimeoutError
from ..transport import messages as m
from ..transport.spin import Spinner
from . import peer_calls, values
from .interrupts import deferred

#: Longest a waiting thread blocks on the sockets at a time (a Ctrl-C, a
#: deadline and the other threads' wake-ups are looked at in between).
POLL_SLICE = 0.05
#: wait() over direct results and head objects asks the head this long at a time.
WAIT_SLICE = 0.005


class DriverDirectCalls:
    """A mixin of ``DriverContext``: its actor calls, gets and waits on direct results."""

    head = None    # (DriverContext's)

    def init_direct_calls(self, session_id: str | None) -> None:
        self.peer_readers: dict = {}
        self.peer_channels: dict = {}
        self.peer_lock = threading.Lock()
        self.peer_route_lock = threading.Lock()
        #: ``arrived``'s lock, taken directly (Condition's ``with`` is Python code).
        self.arrived_lock = threading.Lock()
        self.arrived = threading.Condition(self.arrived_lock)
        #: Threads in ``arrived.wait`` (a turn that ends wakes them).
        self.waiting = 0
        self.spinners = threading.local()
        self.peer = (peer_calls.PeerCaller(session_id, self.peer_readers, self.peer_channels,
                                           self.peer_lock, self.control)
                     if session_id and peer_calls.ENABLED else None)

    # --- calls ------------------------------------------------------------------

    def submit_call(self, spec: list, lifetime) -> None:
        peer = self.peer
        if peer is None:
            self.submit(spec)
            return
        actor_id = spec[m.T_ACTOR]
        if peer.dead and actor_id in peer.dead:
            peer.settle(actor_id)
        deps = spec[m.T_DEPS]
        deps_ready = not deps or all(peer.owns(d[1]) or self._sealed(d[1]) for d in deps)
        if peer.head_calls.get(actor_id):
            self._prune_head_calls(actor_id)
        with self.peer_route_lock:
            how, link = peer.route(spec, deps_ready)
            if how == peer_calls.DIRECT:
                if deps:
                    peer.inline_args(spec, self._await_answer)
                    self._inline_head_args(spec)
                refs = peer.escaping(spec)
                if refs:
                    self._promote(refs)
                with deferred():      # a Ctrl-C between noting the call and sending it
                    sent = peer.send(link, spec, lifetime)   # would leave it in flight forever
                if sent:
                    if link.channel.outbuf:
                        # The actor's socket is full: wait for room (it is not read
                        # here otherwise until the next get or wait).
                        self.wait_direct(lambda: not link.channel.outbuf
                                         or peer.links.get(actor_id) is not link, None,
                                         lambda: [link])
                    elif len(link.inflight) > peer_calls.INFLIGHT_READ:
                        self._turn(0, lambda: [link])   # far ahead: take its answers
                    return
                how = peer_calls.HEAD   # the actor's process was gone: see send
                peer.settle(actor_id)
        if how == peer_calls.DRAIN:
            self.wait_direct(lambda: not link.inflight, None, lambda: [link])
        peer.note_head_call(actor_id, spec[m.T_RETURNS][:1])
        self.submit(spec)

    def _inline_head_args(self, spec: list) -> None:
        """Top-level ref arguments whose objects the head (in this process) holds
        inline, with no refs inside, go with the call as the caller's own
        results do (``peer_calls.with_records``): the actor need not ask the
        head for them."""
        with deferred(), self.head.lock:
            entries = self.head.objects.entries

            def record_of(oid):
                e = entries.get(oid)
                return None if e is None or e.contained else e.record
            peer_calls.with_records(spec, record_of)

    def _await_answer(self, oid: int) -> None:
        """Wait until the direct call that makes ``oid`` is answered."""
        peer = self.peer
        self.wait_direct(lambda: oid not in peer.pending, None,
                         lambda: peer.links_for((oid,)))

    def _sealed(self, oid: int) -> bool:
        """Whether the head knows the object's value (its holder keeps it there)."""
        e = self.head.objects.entries.get(oid)
        return e is not None and e.record is not None

    def _prune_head_calls(self, actor_id: int) -> None:
        """The driver's calls through the head that have finished (the head is here)."""
        from .headloop import drain_refs
        head = self.head
        calls = self.peer.head_calls_of(actor_id)
        with deferred(), head.lock:
            drain_refs(head)
            tasks = head.tasks
            done = [oid for oid in calls if oid - 1 not in tasks]   # task id = first return - 1
        self.peer.seen_finished(done)

    def _promote(self, oids) -> None:
        """Direct results about to leave the driver become objects at the head."""
        from .headloop import drain_refs
        peer = self.peer
        head = self.head
        for oid in oids:
            if not peer.owns(oid):
                continue
            if oid in peer.pending:
                self._await_answer(oid)
            res = peer.results.pop(oid, None)
            if res is None:
                continue
            with deferred(), head.lock:
                drain_refs(head)      # our holds of its nested refs first
                head.hold((oid,))
                head.put_object(oid, peer.record(res), res.contained or None)
            if res.pins is not None:
                peer.unpin(res)

    # --- waiting ----------------------------------------------------------------

    def _links_of(self, oids: list):
        """``need`` of a wait for ``oids``: their links, found once (a call's link is
        fixed when it is sent; a get of 100,000 refs must not scan them all every
        turn), those with calls still in flight at each turn."""
        links = self.peer.links_for(oids)
        return lambda: [link for link in links if link.inflight]

    def wait_direct(self, done, deadline: float | None, need) -> bool:
        """Read the direct sockets until ``done()``; False at the deadline.
        ``need()``: the links whose answers ``done`` waits for."""
        while not done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._turn(POLL_SLICE if left is None else min(left, POLL_SLICE), need)
        return True

    def _turn(self, span: float, need) -> None:
        """Read the sockets of ``need()`` once (up to ``span`` seconds), or wait for
        the thread reading one of them to end its turn.

        The whole turn is one critical section: ``Condition.wait`` is Python
        code, and a KeyboardInterrupt raised in it after it took the lock back
        would leave the lock held for good (and every later get() of the driver blocked
        on it); one raised between claiming the links and the ``try`` would leave
        them claimed, with no thread reading them. A Ctrl-C waits at most ``span``
        (callers pass at most ``POLL_SLICE``).
        """
        arrived = self.arrived
        with deferred():
            links = need()
            if not links:
                return      # nothing of ours in flight there any more
            with self.arrived_lock:
                for link in links:
                    if link.reading:
                        self.waiting += 1
                        try:
                            arrived.wait(span)
                        finally:
                            self.waiting -= 1
                        return
                for link in links:
                    link.reading = True
            try:
                self._read_links(links, span)
            finally:
                with self.arrived_lock:
                    for link in links:
                        link.reading = False
                    if self.waiting:
                        arrived.notify_all()

    def _read_links(self, links: list, timeout: float) -> None:
        # One link with nothing to write (a sync call's wait): its kept poll object.
        one = len(links) == 1 and not links[0].channel.outbuf
        poller = links[0].poller if one else select.poll()
        mine = {}
        for link in links:
            ch = link.channel
            mine[ch.fd] = ch
            if not one:
                poller.register(ch.fd, select.POLLIN | select.POLLOUT if ch.outbuf
                                else select.POLLIN)
        spinner = getattr(self.spinners, "spinner", None)
        if spinner is None:
            spinner = self.spinners.spinner = Spinner()
        events = spinner.poll(poller, timeout * 1000.0)
        channels = self.peer_channels
        with deferred():
            for fd, ev in events:
                # (A link another thread closed meanwhile: its fd may be a new socket's.)
                if channels.get(fd) is mine[fd]:
                    peer_calls.serve(fd, ev, self.peer_readers, channels, self.peer_lock)
        if self.peer.finished:
            self._report_direct(False)

    def _report_direct(self, now: bool) -> None:
        done = self.peer.report_due(now)
        if done:
            with deferred(), self.head.lock:
                self.head.direct_calls_done(done)

    def get_one_direct(self, ref, link) -> list:
        """get() of one direct result still in flight on ``link``, with no
        timeout: a sync call's get, made without ``get_with_direct``'s lists."""
        peer = self.peer
        oid = ref.id
        pending = peer.pending
        need = lambda: [link]   # noqa: E731 (in flight there while oid is pending)
        while oid in pending:
            self._turn(POLL_SLICE, need)
        res = peer.results.get(oid)
        if res is None or res.pins is not None:
            return self.get_with_direct([ref], None)   # promoted meanwhile, or pinned refs
        return [values.from_record(peer.record(res), self.arena, ref)]

    def get_with_direct(self, refs: list, timeout: float | None) -> list:
        """get() of refs some of which are direct results."""
        peer = self.peer
        results = peer.results
        ids = [r.id for r in refs]
        mine = [i for i in ids if peer.owns(i)]
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.wait_direct(lambda: all(map(peer.answered, mine)), deadline,
                                self._links_of(mine)):
            raise GetTimeoutError(f"get timed out after {timeout} s: direct calls to "
                                  f"actors not answered")
        got = {i: results.get(i) for i in mine}
        others = [r for r in refs if got.get(r.id) is None]   # (promoted meanwhile: at the head)
        if others:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            for ref, value in zip(others, self.get_from_head(others, left)):
                got[ref.id] = (value,)
        pinned = [res for res in got.values() if type(res) is peer_calls.Result
                  and res.pins is not None]
        if pinned:
            from .headloop import drain_refs
            with deferred(), self.head.lock:
                drain_refs(self.head)     # our holds of their nested refs
            for res in pinned:
                peer.unpin(res)
        out = []
        for ref in refs:
            res = got[ref.id]
            if type(res) is tuple:
                out.append(res[0])
            else:
                out.append(values.from_record(peer.record(res), self.arena, ref))
        return out

    def wait_with_direct(self, ids: list[int], num_returns: int,
                         timeout: float | None) -> set[int]:
        """wait() over direct results and head objects."""
        peer = self.peer
        mine = [i for i in ids if peer.owns(i)]
        mine_set = set(mine)
        others = [i for i in ids if i not in mine_set]
        deadline = None if timeout is None else time.monotonic() + timeout

        def answered():
            return sum(map(peer.answered, mine))

        ready_others: set = set()
        links_needed = self._links_of(mine)
        while True:
            n_mine = answered()
            need = num_returns - n_mine - len(ready_others)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if need <= 0 or left == 0:
                break
            if others:
                waiting = [i for i in others if i not in ready_others]
                pending = n_mine < len(mine)
                span = left if not pending else (WAIT_SLICE if left is None
                                                 else min(left, WAIT_SLICE))
                asked = min(need, len(waiting))
                got = self.wait_on_head(waiting, asked, span)
                ready_others.update(got)
                if pending:
                    self._turn(0, links_needed)
                elif len(got) < asked:
                    break
            else:
                goal = num_returns
                self.wait_direct(lambda: answered() >= goal, deadline, links_needed)
        ready = {i for i in mine if peer.answered(i)} | ready_others
        return set([i for i in ids if i in ready][:num_returns])

