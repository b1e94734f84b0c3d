"""The caller: a process's actor calls, gets and waits, with direct results.

    user code ─ submit / submit_call / get / wait ─▶ Caller ─▶ actor's socket (direct)
                                                        └────▶ CallerHost ─▶ the head

One caller serves the driver (``driver.DriverContext``), an executor
(``executor.ExecutorContext``) and in-rank actors (``rank_actors.RankContext``).
It decides, with ``peer_calls.PeerCaller``, whether an actor call goes straight
to the actor on this host or through the head; it owns the direct results, and
it turns one into an object at the head (``promote``) before its ref leaves the
process. A call that takes a direct result still in flight is held here until
the answer comes (``held_calls``): ``.remote()`` does not wait for it. What
differs between the processes is behind ``CallerHost``: how a request reaches
the head, whether the head already has an object, how a wait reads the actors'
sockets and the process's inbox.
"""
from __future__ import annotations

import threading
import time
from typing import Protocol

from ..exceptions import GetTimeoutError
from ..transport import messages as m
from . import context, peer_calls, values
from .held_calls import Held
from .interrupts import deferred

#: wait() over direct results and head objects asks the head this long at a time.
WAIT_SLICE = 0.005


class CallerHost(Protocol):
    """What a process gives its caller: the way to the head and the way to wait."""

    arena: object

    def send_to_head(self, spec: list) -> None:
        """Submit a task (or an actor call going through the head)."""

    def known_at_head(self, oid: int) -> bool:
        """Whether the head is known to have the object (a direct call may take it
        as an argument)."""

    def put_at_head(self, oid: int, record: tuple, contained) -> None:
        """Make a direct result an object at the head, held by this process."""

    def confirm_holds(self) -> None:
        """Return once the head has every hold this process sent so far."""

    def get_from_head(self, refs: list, timeout: float | None) -> list:
        """The values of ``refs``, all objects at the head."""

    def wait_on_head(self, ids: list, num_returns: int, timeout: float | None) -> set:
        """wait() over objects at the head."""

    def wait_until(self, done, deadline: float | None, need) -> bool:
        """Read what arrives until ``done()``; False at the deadline. ``need()``:
        the links whose answers ``done`` waits for."""

    def wait_answer(self, oid: int, link) -> None:
        """Wait for one direct call's answer, with no timeout (a sync call's get)."""

    def keep_up(self, link) -> None:
        """After a call sent on ``link``: read its answers, or wait for room in its
        socket, if the caller is far ahead of the actor."""

    def poll_links(self, need) -> None:
        """Read what ``need()``'s links have brought, without waiting."""

    def before_route(self, spec: list) -> None:
        """Before a call is routed: bring the caller's view of its calls through
        the head up to date (the driver sees the head's tables)."""

    def with_head_args(self, spec: list) -> None:
        """A direct call: add the records of its small ref arguments the head
        holds here (``peer_calls.with_records``), where the head is in-process."""


class Caller:
    """A process's calls and their results (``peer`` None: everything goes
    through the head)."""

    def __init__(self, host: CallerHost, peer: peer_calls.PeerCaller | None,
                 route_lock) -> None:
        self.host = host
        self.peer = peer
        #: Threads calling actors at once: one route decision at a time.
        self.route_lock = route_lock
        #: Held calls (``held_calls``) are added and sent under this lock, by
        #: the thread ``releasing`` names while it sends them.
        self.held_lock = threading.RLock()
        self.releasing: int | None = None

    # --- calls ------------------------------------------------------------------

    def submit(self, spec: list) -> bool:
        """Send a task to the head; False if it is held (``held_calls``) and
        leaves later: a function blob it carries has not left either."""
        peer = self.peer
        # (Tested inline: the common call takes no refs and nothing is held.)
        if peer is not None and (peer.held or self.releasing or peer.pending and (
                spec[m.T_DEPS] or spec[m.T_CONTAINED])) and \
                self._held_back(spec, None, self._submit, (spec,)):
            return False
        self._submit(spec)
        return True

    def _submit(self, spec: list) -> None:
        peer = self.peer
        if peer is not None:
            refs = peer.escaping(spec)
            if refs:
                self.promote(refs)
        self.host.send_to_head(spec)

    def submit_call(self, spec: list, lifetime) -> None:
        """An actor call: straight to the actor when ``peer_calls`` allows it."""
        peer = self.peer
        if peer is not None and (peer.held or self.releasing or peer.pending and (
                spec[m.T_DEPS] or spec[m.T_CONTAINED])) and \
                self._held_back(spec, spec[m.T_ACTOR], self._submit_call, (spec, lifetime)):
            return
        self._submit_call(spec, lifetime)

    def _submit_call(self, spec: list, lifetime) -> None:
        peer = self.peer
        if peer is None:
            self._submit(spec)
            return
        host = self.host
        actor_id = spec[m.T_ACTOR]
        if peer.dead and actor_id in peer.dead:
            peer.settle(actor_id)
        deps = spec[m.T_DEPS]
        deps_ready = not deps or all(peer.owns(d[1]) or host.known_at_head(d[1]) for d in deps)
        if peer.head_calls.get(actor_id):
            host.before_route(spec)
        with self.route_lock:
            how, link = peer.route(spec, deps_ready)
            if how == peer_calls.DIRECT:
                if deps:
                    peer.inline_args(spec, self.await_answer)
                    host.with_head_args(spec)
                refs = peer.escaping(spec)
                if refs:   # the actor fetches the arguments' objects from the head
                    self.promote(refs)
                with deferred():      # a Ctrl-C between noting the call and sending it
                    sent = peer.send(link, spec, lifetime)   # would leave it in flight forever
                if not sent:
                    how = peer_calls.HEAD   # the actor's process was gone: see send
                    peer.settle(actor_id)
        if how == peer_calls.DIRECT:
            host.keep_up(link)
            return
        if how == peer_calls.DRAIN:
            host.wait_until(lambda: not link.inflight, None, lambda: [link])
        peer.note_head_call(actor_id, spec[m.T_RETURNS][:1])
        self._submit(spec)

    # --- held calls (held_calls) ----------------------------------------------------

    def _held_back(self, spec: list, target: int | None, send, args: tuple,
                   creates: bool = False) -> bool:
        """Hold a call that takes a direct result still in flight, or must stay
        behind a held call (``held_calls``); True if held. ``send(*args)`` sends it."""
        peer = self.peer
        releasing = self.releasing
        if releasing is not None and releasing == threading.get_ident():
            return False
        refs = peer_calls.refs_of(spec) if spec[m.T_DEPS] or spec[m.T_CONTAINED] else []
        if not peer.held and releasing is None and not any(r in peer.pending for r in refs):
            return False     # (the common case: no lock)
        self.pump()
        with self.held_lock:
            if not peer.held.must_hold(refs, target, peer.pending):
                return False
            returns = spec[m.T_RETURNS]
            if creates and args[-1] is not None:
                # The actor's lifetime token (``control._create_actor``): its
                # handle carries a ref to it, so a call or put that takes the
                # handle stays behind the creation, and a handle dropped
                # meanwhile lets go of it only once the head knows the actor.
                returns = [*returns, args[-1]]
            peer.held.add(Held(lambda: send(*args), refs, target, returns,
                               [context.ObjectRef(r) for r in refs], creates))
        return True

    def pump(self) -> None:
        """Read the answers held calls wait for that have come, and send the
        calls that may leave now."""
        peer = self.peer
        held = peer.held
        if not held:
            return
        waiting = held.waiting_on(peer.pending)
        if waiting:
            self.host.poll_links(lambda: peer.links_for(waiting))
        with self.held_lock:
            self._release()

    def _release(self) -> None:
        """Send the held calls that may leave now, in order (``held_lock`` held)."""
        peer = self.peer
        held = peer.held
        ready = held.ready(peer.pending)
        if not ready:
            return
        self.releasing = threading.get_ident()
        try:
            for call in ready:
                try:
                    call.send()     # (an error, as of a broken head, is raised here)
                finally:
                    gone = held.sent(call)
                    if gone:   # refs that died while held: released now that it is out
                        context.released.extend(gone)
        finally:
            self.releasing = None

    def flush_held(self, until=None, deadline: float | None = None) -> bool:
        """Send the held calls as the answers they wait for come, until none is
        held (or ``until()``); False at the deadline."""
        peer = self.peer
        if peer is None:
            return True
        while True:
            with self.held_lock:
                self._release()
                held = peer.held
                if not held or (until is not None and until()):
                    return True
                waiting = held.waiting_on(peer.pending)
            if not self.host.wait_until(lambda: not all(r in peer.pending for r in waiting),
                                        deadline, lambda: peer.links_for(waiting)):
                return False

    def await_answer(self, oid: int) -> None:
        """Wait until the direct call that makes ``oid`` is answered."""
        peer = self.peer
        self.host.wait_until(lambda: oid not in peer.pending, None,
                             lambda: peer.links_for((oid,)))

    def promote(self, oids) -> None:
        """Direct results about to leave this process become objects at the head."""
        peer = self.peer
        host = self.host
        held = peer.held
        if held and any(o in held.returns for o in oids):
            self.flush_held(lambda: not any(o in held.returns for o in oids))
        for oid in oids:
            if not peer.owns(oid):
                continue
            if oid in peer.pending:
                self.await_answer(oid)
            res = peer.results.pop(oid, None)
            if res is None:
                continue
            host.put_at_head(oid, peer.record(res), res.contained or None)
            if res.pins is not None:
                # The head holds the nested refs through the object once it has
                # it: the actor's pins may go after that.
                host.confirm_holds()
                peer.unpin(res)

    def before_control(self, name: str, args: tuple) -> bool:
        """Before a control call: later calls must not overtake what it starts.
        It waits for no held call (the answers they wait for may come only after
        it: a kill() of the actor computing one, a get_actor() of the one that
        lets it finish), so a held call it concerns leaves after it, except an
        actor's creation, which the head must know first: a kill() of that actor
        is held behind it, a collective group of it waits for it. True: the call
        is held itself (an actor's creation whose arguments take results in
        flight, or such a kill); ``peer.control`` makes it once it may leave."""
        peer = self.peer
        if peer is None:
            return False
        if name == "create_actor":
            spec = args[0]
            # (A named one is not held: a taken name is an error of this call.)
            if args[3] is None and self._held_back(spec, spec[m.T_ACTOR], peer.control,
                                                   (name,) + tuple(args), True):
                return True
            refs = peer.escaping(spec)   # the constructor's arguments
            if refs:
                self.promote(refs)
            return False
        held = peer.held
        if held and self.releasing != threading.get_ident():
            if name == "kill" and self._hold_kill(args):
                return True
            if name == "collective_create":
                self.flush_held(lambda: not any(map(held.creating, args[1])))
            else:
                self.pump()    # (a driver polling resources() sends what may leave)
        if name in peer_calls.FENCING:
            peer.fence(name, args)
        return False

    def _hold_kill(self, args: tuple) -> bool:
        """Hold a kill() of an actor whose creation is held, behind it; True if held."""
        peer = self.peer
        self.pump()
        with self.held_lock:
            if not peer.held.creating(args[0]):
                return False
            peer.held.add(Held(lambda: peer.control("kill", *args), [], args[0], [], []))
        return True

    # --- get and wait -------------------------------------------------------------

    def has_direct(self) -> bool:
        peer = self.peer
        return peer is not None and bool(peer.pending or peer.results)

    def get(self, refs: list, timeout: float | None) -> list:
        peer = self.peer
        if peer is not None and peer.held:
            ids = list(dict.fromkeys(r.id for r in refs))
            t0 = time.monotonic()
            ready = self._wait_while_held(ids, len(ids), timeout)
            if len(ready) < len(ids):
                raise GetTimeoutError(f"get timed out after {timeout} s: "
                                      f"{len(ids) - len(ready)} of {len(ids)} objects not "
                                      f"ready (calls held for results in flight)")
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - t0))
        if not self.has_direct():
            return self.host.get_from_head(refs, timeout)
        peer = self.peer
        if timeout is None and len(refs) == 1:
            ref = refs[0]
            sent = peer.pending.get(ref.id)
            if sent is not None:
                self.host.wait_answer(ref.id, sent[0])
                res = peer.results.get(ref.id)
                if res is not None and res.pins is None:
                    return [values.from_record(peer.record(res), self.host.arena, ref)]
                # (promoted meanwhile, or pinned refs: as any get)
        return self._get_with_direct(refs, timeout)

    def _get_with_direct(self, refs: list, timeout: float | None) -> list:
        """get() of refs some of which are direct results."""
        peer = self.peer
        host = self.host
        results = peer.results
        mine = [r.id for r in refs if peer.owns(r.id)]
        deadline = None if timeout is None else time.monotonic() + timeout
        if any(i not in results for i in mine) and not host.wait_until(
                lambda: all(map(peer.answered, mine)), deadline, self._links_of(mine)):
            raise GetTimeoutError(f"get timed out after {timeout} s waiting for "
                                  f"{len(refs)} object(s): direct calls to actors not "
                                  f"answered")
        got = {i: results.get(i) for i in mine}
        others = [r for r in refs if got.get(r.id) is None]   # (promoted meanwhile: at the head)
        if others:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            for ref, value in zip(others, host.get_from_head(others, left)):
                got[ref.id] = (value,)
        pinned = [res for res in got.values() if type(res) is peer_calls.Result
                  and res.pins is not None]
        if pinned:
            host.confirm_holds()     # our holds of their nested refs are at the head
            for res in pinned:
                peer.unpin(res)
        out = []
        arena = host.arena
        for ref in refs:
            res = got[ref.id]
            if type(res) is tuple:
                out.append(res[0])
            else:
                out.append(values.from_record(peer.record(res), arena, ref))
        return out

    def _links_of(self, oids: list):
        """``need`` of a wait for ``oids``: their links, found once (a call's link is
        fixed when it is sent; a get of 100,000 refs must not scan them all every
        turn), those with calls still in flight at each turn."""
        links = self.peer.links_for(oids)
        return lambda: [link for link in links if link.inflight]

    def wait(self, ids: list[int], num_returns: int, timeout: float | None) -> set[int]:
        """The ids ready (at most ``num_returns``, earliest in input order first)."""
        peer = self.peer
        if peer is not None and peer.held:
            return self._wait_while_held(ids, num_returns, timeout)
        return self._wait(ids, num_returns, timeout)

    def _wait(self, ids: list[int], num_returns: int, timeout: float | None) -> set[int]:
        peer = self.peer
        if self.has_direct() and any(map(peer.owns, ids)):
            return self._wait_with_direct(ids, num_returns, timeout)
        return self.host.wait_on_head(ids, num_returns, timeout)

    def _wait_while_held(self, ids: list[int], num_returns: int,
                         timeout: float | None) -> set[int]:
        """wait() while calls are held: in slices of ``WAIT_SLICE``, sending held
        calls as the answers they wait for come. A held call's result is not
        ready (the head does not know it yet)."""
        peer = self.peer
        host = self.host
        deadline = None if timeout is None else time.monotonic() + timeout
        ready: set = set()
        while True:
            self.pump()
            held = peer.held
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not held:
                return self._wait(ids, num_returns, left)
            span = WAIT_SLICE if left is None else min(left, WAIT_SLICE)
            free = [i for i in ids if i not in held.returns]
            if len(free) >= num_returns:
                ready = self._wait(free, num_returns, span)
                if len(ready) >= num_returns:
                    return ready
            else:      # some held call's result is needed: wait for what it waits for
                ready = self._wait(free, len(free), 0) if free else set()
                waiting = held.waiting_on(peer.pending)
                host.wait_until(lambda: bool(held.ready(peer.pending)),
                                time.monotonic() + span, lambda: peer.links_for(waiting))
            if left == 0:
                return ready

    def _wait_with_direct(self, ids: list[int], num_returns: int,
                          timeout: float | None) -> set[int]:
        """wait() over direct results and head objects: the head is asked in slices
        of ``WAIT_SLICE`` while direct results may still come."""
        peer = self.peer
        host = self.host
        mine = [i for i in ids if peer.owns(i)]
        mine_set = set(mine)
        others = [i for i in ids if i not in mine_set]
        deadline = None if timeout is None else time.monotonic() + timeout

        def answered():
            return sum(map(peer.answered, mine))

        ready_others: set = set()
        links_needed = self._links_of(mine)
        first = True    # a timeout of 0 still reads the answers already sent
        while True:
            n_mine = answered()
            need = num_returns - n_mine - len(ready_others)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if need <= 0 or (left == 0 and not first):
                break
            first = False
            if others:
                waiting = [i for i in others if i not in ready_others]
                pending = n_mine < len(mine)
                span = left if not pending else (WAIT_SLICE if left is None
                                                 else min(left, WAIT_SLICE))
                asked = min(need, len(waiting))
                got = host.wait_on_head(waiting, asked, span)
                ready_others.update(got)
                if pending:
                    host.poll_links(links_needed)
                elif len(got) < asked:
                    break   # timed out with nothing direct left to wait for
            else:
                goal = num_returns
                host.wait_until(lambda: answered() >= goal, deadline, links_needed)
        ready = {i for i in mine if peer.answered(i)} | ready_others
        return set([i for i in ids if i in ready][:num_returns])
