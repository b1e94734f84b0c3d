"""The driver's reading of its actors' sockets (``peer_calls``, caller side).

The driver calls an actor on its host as a task does: straight over the actor's
socket, the result owned by the driver, the head not involved (``caller.Caller``
decides the route). What the head would otherwise do for the call, the driver
does in-process under the head's lock (``driver.DriverContext``, the caller's
host): an escaping result is put into the head's tables, the holds of refs
nested in a result are applied before the actor's pins go, and the calls'
summaries go into the head's history (``tasks()``, the timeline, ``report``).

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

from ..exceptions import RayError
from ..transport.wait import Spinner
from . import peer_calls
from .interrupts import deferred

#: Longest a waiting thread blocks on the sockets at a time (a Ctrl-C, a
#: deadline and the other threads' wake-ups are looked at in between).
POLL_SLICE = 0.05
#: Least seconds between two looks at the idle links for actors that ended
#: (``close_ended``): one poll of every such socket.
ENDED_LOOK = 1.0
#: What a thread still waiting in get() or wait() raises once shutdown() began.
SHUT_DOWN = ("hpc_ray.shutdown() ended the session while this thread waited in get() or "
             "wait(): the results it waited for will not come")


class DriverLinks:
    """The driver threads' turns reading the sockets of the actors they call."""

    def __init__(self, peer, readers: dict, channels: dict, lock, head) -> None:
        self.peer = peer
        #: Shared with ``peer``: fd -> reader, fd -> Channel, the lock of their writes.
        self.readers = readers
        self.channels = channels
        self.lock = lock
        self.head = head
        #: ``arrived``'s lock, taken directly (Condition's ``with`` is Python code).
        self.arrived_lock = threading.Lock()
        self.arrived = threading.Condition(self.arrived_lock)
        #: Threads in ``arrived.wait`` (a turn that ends wakes them).
        self.waiting = 0
        self.spinners = threading.local()
        self.ended_looked = 0.0

    def wait(self, done, deadline: float | None, need) -> bool:
        """Read the direct sockets until ``done()``; False at the deadline, after
        one read at least (so that a timeout of 0 sees answers already sent).
        ``need()``: the links whose answers ``done`` waits for."""
        read = False
        while not done():
            if self.head.closing:
                raise RayError(SHUT_DOWN)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0 and read:
                return False
            self.turn(POLL_SLICE if left is None else max(0.0, min(left, POLL_SLICE)), need)
            read = True
        return True

    def wait_answer(self, oid: int, link) -> None:
        """Read ``link`` until the call that makes ``oid`` is answered."""
        pending = self.peer.pending
        need = lambda: [link]   # noqa: E731 (in flight there while oid is pending)
        while oid in pending:
            if self.head.closing:
                raise RayError(SHUT_DOWN)
            self.turn(POLL_SLICE, need)

    def keep_up(self, link) -> None:
        """After a call sent on ``link``."""
        if link.channel.outbuf:
            # The actor's socket is full: wait for room (it is not read here
            # otherwise until the next get or wait).
            links = self.peer.links
            self.wait(lambda: not link.channel.outbuf or links.get(link.actor_id) is not link,
                      None, lambda: [link])
        elif len(link.inflight) > peer_calls.INFLIGHT_READ:
            self.turn(0, lambda: [link])   # far ahead: take its answers

    def read_answers(self) -> None:
        """Read, without waiting, what every link with calls in flight has
        brought: a call's handle keeps its actor alive until its answer is read,
        and a dropped handle's actor must end (and give back what it holds)
        while the driver waits for something else."""
        links = self.peer.links
        self.turn(0, lambda: [link for link in list(links.values()) if link.inflight])

    def close_ended(self) -> None:
        """Close the links of actors that ended while no call of the driver's was
        in flight there (``__ray_terminate__``, ``exit_actor``, a kill from another
        process): nothing reads such a link otherwise, and a program that goes
        through many actors kept a socket for each until it ran out of file
        descriptors. A read of each idle link that has something (``turn``): EOF
        closes it (``PeerCaller._lost``). At most every ENDED_LOOK seconds."""
        now = time.monotonic()
        if now - self.ended_looked < ENDED_LOOK:
            return
        self.ended_looked = now
        links = self.peer.links
        self.turn(0, lambda: [link for link in list(links.values()) if not link.inflight])

    def turn(self, span: float, need) -> None:
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
        channels = self.channels
        with deferred():
            for fd, ev in events:
                # (A link another thread closed meanwhile: its fd may be a new socket's.)
                if channels.get(fd) is mine[fd]:
                    peer_calls.serve(fd, ev, self.readers, channels, self.lock)
        if self.peer.finished:
            self.report(False)

    def report(self, now: bool) -> None:
        done = self.peer.report_due(now)
        if done:
            with deferred(), self.head.lock:
                self.head.direct_calls_done(done)
