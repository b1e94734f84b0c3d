"""Rank 0's API context (``DriverContext``): the user's calls into the head.

    user thread ─ DriverContext.submit/get/put/wait ─▶ Head (under Head.lock)
                     ▲ Head.cond.notify_all()  ◀── comm thread (``headloop.HeadLoop``)

The head's state is guarded by ``Head.lock`` (held for microseconds). Users'
threads hand submissions over through lock-free deques (``headloop._submitted``,
``_held``) drained under that lock. A thread waiting in ``get``/``wait`` runs
the comm thread's rounds itself for a while (``headloop.DRIVER_SPINS``), then
sleeps on the head's condition.

Most of the driver's own calls to actors on this host do not reach the head at
all: they go straight to the actor's socket (``caller.py`` decides,
``driver_calls.py`` reads the sockets, ``peer_calls.py`` keeps the calls).
"""
from __future__ import annotations

import threading
import logging
import time
from typing import Any

from mpi4py import MPI

from ..exceptions import GetTimeoutError, RayError
from ..transport import messages as m
from ..transport import wait
from ..transport.messages import FETCH_PLAN
from ..transport.serialization import RAW
from . import context, interrupts, peer_calls, values
from .caller import Caller
from .driver_calls import DriverLinks
from .head import Head
from .headloop import (DRIVER_SPINS, STOP_WAIT, SUBMIT_BATCH, SUBMIT_QUIET,
                       TERMINATED_STOP_WAIT, HeadLoop, _held, _peer, _submitted, drain_refs,
                       schedule)
from .interrupts import deferred
from .launch import abort_job
from .driver_calls import SHUT_DOWN

logger = logging.getLogger(__name__)


class DriverContext(context.ContextBase):
    """The API on rank 0: calls go straight into the head under its lock, and
    calls to actors on this host straight to them (``caller``). It is its
    caller's host (``caller.CallerHost``)."""

    is_driver = True

    def __init__(self, head: Head, loop: HeadLoop, arena, node: int, rank: int,
                 world: dict, session_id: str | None = None) -> None:
        readers: dict = {}
        channels: dict = {}
        lock = threading.Lock()
        self.peer = (peer_calls.PeerCaller(session_id, readers, channels, lock, self.control)
                     if session_id and peer_calls.ENABLED else None)
        #: The driver threads' reading of the actors' sockets.
        self.links = DriverLinks(self.peer, readers, channels, lock, head)
        self.caller = Caller(self, self.peer, threading.Lock())
        _peer[0] = self.peer
        self.head = head
        self.loop = loop
        self.arena = arena
        self.node = node
        self.rank = rank
        self.world = world
        self.current_task_name = None
        self.gpu_ids: list[int] = []
        #: Whether the driver thread's waits pay for their spin (DRIVER_SPINS).
        self.wait_spinner = wait.Spinner()
        interrupts.install()
        interrupts.dump_stacks_on_sigusr2()

    # --- refs -------------------------------------------------------------------

    def hold_refs(self, ids) -> None:
        _held.extend(ids)

    # --- tasks ------------------------------------------------------------------

    def submit(self, spec: list) -> bool:
        return self.caller.submit(spec)

    def submit_call(self, spec: list, lifetime) -> None:
        self.caller.submit_call(spec, lifetime)

    def send_to_head(self, spec: list) -> None:
        # Deque appends are atomic: no lock here. get()/wait() and the comm thread
        # drain the queue; the comm thread is woken when the queue was empty.
        if _submitted:
            _submitted.append(spec)
            if len(_submitted) >= SUBMIT_BATCH:
                with deferred(), self.head.lock:
                    drain_refs(self.head)
        else:
            _submitted.append(spec)
            # A driver thread that has just left get()/wait() is likely back in one
            # within microseconds (a loop of get(a.m.remote())), and runs the round
            # that sends this itself: waking the comm thread as well would only
            # make the two threads trade the GIL. Otherwise, or if the comm
            # thread sleeps (a wait that does not spin leaves the rounds to it:
            # DRIVER_SPINS), it is woken; one awake sends it at its next round,
            # and one about to sleep sees it first (``HeadLoop._work_waiting``).
            loop = self.loop
            if loop.bell.sleeping or time.monotonic() - loop.waited_at > SUBMIT_QUIET:
                loop.wake()

    def control(self, name: str, *args) -> Any:
        from . import control
        peer = self.peer
        if peer is not None:
            if peer.pending:
                self.links.read_answers()
            if peer.links:
                self.links.close_ended()
            if peer.finished:
                self.links.report(True)    # tasks(), timeline() see every answered call
            if self.caller.before_control(name, args):
                return None     # held: see caller.before_control
        with deferred(), self.head.lock:
            drain_refs(self.head)
            result = control.call(self.head, name, args)
            # A call may free resources (kill() of an actor): place what waits
            # for them now, not when some rank next sends a message.
            schedule(self.head)
        self.loop.wake()
        return result

    # --- objects ----------------------------------------------------------------

    def _check_broken(self) -> None:
        if self.head.closing:
            raise RayError(SHUT_DOWN)
        if self.loop.error:
            raise RayError("the hpc_ray head failed; see the traceback on stderr:\n"
                           + self.loop.error)
        self._check_lost()

    def _check_lost(self) -> None:
        """Embedded mode: a worker rank died, and the session with it (``SpawnedWatch``)."""
        spawned = self.loop.spawned
        if spawned is not None and spawned.why is not None:
            raise RayError(spawned.why)

    def _wait_for(self, check, deadline: float | None):
        """Wait until ``check()`` (run under the head lock) returns non-None.

        While waiting, the driver thread drives the head's I/O itself when the
        comm thread is not doing so, then backs off to sleeping on the head's
        condition (the comm thread notifies it).
        """
        head = self.head
        loop = self.loop
        try:
            return self._wait_loop(check, deadline, head, loop)
        finally:
            loop.driver_polling = False
            loop.waited_at = time.monotonic()

    def _wait_loop(self, check, deadline, head, loop):
        spinning = self.wait_spinner.due()
        spins = 0 if spinning else DRIVER_SPINS
        while True:
            # One turn is one critical section: a Ctrl-C lands between turns.
            with deferred():
                with head.lock:
                    drain_refs(head)
                    result = check()
                    if result is not None:
                        if spinning:
                            self.wait_spinner.scored(spins < DRIVER_SPINS)
                        return result
                    self._check_broken()
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                if spins < DRIVER_SPINS:
                    loop.driver_polling = True
                    if loop.progress.acquire(timeout=0.001):
                        try:
                            active = loop.poll_from_driver()
                        finally:
                            loop.progress.release()
                        spins = 0 if active else spins + 1
                    else:
                        spins += 1  # the comm thread is finishing a round; it then idles
                    continue
                if loop.driver_polling:
                    loop.driver_polling = False   # hand polling back to the comm thread
                    loop.wake()
                spins += 1
                if self.peer is not None and self.peer.pending:
                    self.links.read_answers()   # (calls nobody waits for: their actors)
                nap = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                with head.lock:
                    if check() is None:
                        loop.driver_sleepers += 1
                        try:
                            head.cond.wait(min(nap, 0.001 * min(spins, 100)))
                        finally:
                            loop.driver_sleepers -= 1

    def get(self, refs: list, timeout: float | None) -> list:
        if self.loop.spawned is not None:
            self._check_lost()
        return self.caller.get(refs, timeout)

    def get_from_head(self, refs: list, timeout: float | None) -> list:
        head = self.head
        ids = [r.id for r in refs]
        deadline = None if timeout is None else time.monotonic() + timeout
        objects = head.objects
        entries = objects.entries
        # Values stay known while the caller holds their refs, so each check goes
        # on from the first id not ready last time: a get of N refs costs O(N) in
        # all, however often it is checked.
        first_missing = [0]

        def all_ready():
            i, n = first_missing[0], len(ids)
            while i < n:
                e = entries.get(ids[i])
                if e is None or e.record is None:
                    first_missing[0] = i
                    return None
                i += 1
            first_missing[0] = n
            return [objects.record_for(i, self.node) for i in ids]

        recs = self._wait_for(all_ready, deadline)
        if recs is None:
            with head.lock:
                missing = [i for i in ids if not objects.ready(i)]
            raise GetTimeoutError(
                f"get timed out after {timeout} s: {len(missing)} of {len(ids)} objects "
                f"not ready (first: {context.ObjectRef(missing[0]).hex() if missing else '-'})")
        if any(r[0] == FETCH_PLAN for r in recs):
            recs = self._fetch_remote(ids, recs)
        out = []
        arena = self.arena
        for ref, rec in zip(refs, recs):
            if rec[0] == RAW:
                out.append(rec[1])
            else:
                out.append(values.from_record(rec, arena, ref))
        return out

    def _fetch_remote(self, ids: list[int], recs: list) -> list:
        with deferred():
            waits = [self.loop.request_fetch(i, rec) for i, rec in zip(ids, recs)
                     if rec[0] == FETCH_PLAN]
            for ev in waits:
                while not ev.wait(0.5):
                    self._check_broken()
            with self.head.lock:
                return [self.head.record_for(i, self.node) for i in ids]

    def _alloc(self, size: int) -> tuple[int, int]:
        head = self.head

        def try_alloc() -> tuple:
            with head.lock:
                drain_refs(head)
                return (self.node, head.alloc(self.node, size), head.store_size,
                        head.allocators[self.node].freed)
        return values.allocate(try_alloc, size, head.store_size, self.node)

    def put(self, value: Any) -> context.ObjectRef:
        if isinstance(value, context.ObjectRef):
            raise TypeError("put() of an ObjectRef is not allowed; pass the ref itself")
        self._check_lost()
        # From the store block's allocation to its seal: a Ctrl-C in between would
        # leave the block taken with no object to free it.
        with deferred():
            rec, contained = values.to_record(value, self._alloc, self.arena,
                                              "value passed to put()")
            if contained and self.peer is not None:
                self.caller.promote(contained)
            return self._seal(rec, contained)

    def put_serialized(self, s) -> context.ObjectRef:
        if s.contained and self.peer is not None:
            self.caller.promote(s.contained)
        with deferred():
            rec = values.serialized_to_record(s, self._alloc, self.arena)
            return self._seal(rec, s.contained)

    def _seal(self, rec: tuple, contained) -> context.ObjectRef:
        oid = context.new_ids(1)
        ref = context.ObjectRef(oid)
        head = self.head
        with head.lock:
            head.hold((oid,))
            head.put_object(oid, rec, contained or None)
        return ref

    def record_profile(self, event: dict) -> None:
        with self.head.lock:
            self.head.history.event(event)

    def wait(self, ids: list[int], num_returns: int, timeout: float | None) -> set[int]:
        """The ids ready (at most ``num_returns``, earliest in input order first)."""
        self._check_lost()
        return self.caller.wait(ids, num_returns, timeout)

    def wait_on_head(self, ids: list[int], num_returns: int,
                     timeout: float | None) -> set[int]:
        objects = self.head.objects
        deadline = None if timeout is None else time.monotonic() + timeout

        def ready_now():
            get = objects.entries.get   # the dict itself: this runs per id, per check
            ready = [i for i in ids if (e := get(i)) is not None and e.record is not None]
            return set(ready[:num_returns]) if len(ready) >= num_returns else None

        result = self._wait_for(ready_now, deadline)
        if result is None:
            with self.head.lock:
                return {i for i in ids if objects.ready(i)}
        return result

    # --- the caller's host (caller.CallerHost) -------------------------------------

    def known_at_head(self, oid: int) -> bool:
        """Whether the head knows the object's value (its holder keeps it there)."""
        e = self.head.objects.entries.get(oid)
        return e is not None and e.record is not None

    def put_at_head(self, oid: int, record: tuple, contained) -> None:
        head = self.head
        with deferred(), head.lock:
            drain_refs(head)      # our holds of its nested refs first
            head.hold((oid,))
            head.put_object(oid, record, contained)

    def confirm_holds(self) -> None:
        with deferred(), self.head.lock:
            drain_refs(self.head)     # the holds queued by this process's threads

    def wait_until(self, done, deadline: float | None, need) -> bool:
        return self.links.wait(done, deadline, need)

    def wait_answer(self, oid: int, link) -> None:
        self.links.wait_answer(oid, link)

    def keep_up(self, link) -> None:
        self.links.keep_up(link)

    def poll_links(self, need) -> None:
        self.links.turn(0, need)

    def before_route(self, spec: list) -> None:
        """The driver's calls through the head that have finished (the head is here)."""
        head = self.head
        peer = self.peer
        calls = peer.head_calls_of(spec[m.T_ACTOR])
        with deferred(), head.lock:
            drain_refs(head)
            tasks = head.tasks
            done = [oid for oid in calls if oid - 1 not in tasks]   # task id = first return - 1
        peer.seen_finished(done)

    def with_head_args(self, spec: list) -> None:
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

    # --- shutdown ---------------------------------------------------------------

    def shutdown(self) -> None:
        # A Ctrl-C during shutdown is dropped: the job is ending anyway.
        with deferred():
            try:
                self._shutdown()
            finally:
                interrupts.uninstall()

    def _shutdown(self) -> None:
        peer = self.peer
        if peer is not None:
            for link in list(peer.links.values()):
                peer.close(link)
            _peer[0] = None
        head = self.head
        loop = self.loop
        lost = loop.spawned.lost if loop.spawned is not None else ()
        with head.lock:
            drain_refs(head)
            for w in head.workers.values():
                if w.rank not in lost:
                    head.send(w.rank, (m.SHUTDOWN,))
            head.closing = True  # SHUTDOWN is the last message each rank gets
            head.cond.notify_all()   # other threads' waits end (``SHUT_DOWN``)
        wait = TERMINATED_STOP_WAIT if interrupts.terminated else STOP_WAIT
        loop.stop_deadline = time.monotonic() + wait
        loop.stop_requested = True
        loop.wake()
        loop.join(wait + 10)
        if loop.is_alive() or loop.error:
            self._shutdown_without_comm_thread()

    def _shutdown_without_comm_thread(self) -> None:
        """The comm thread is gone or stuck: deliver SHUTDOWN ourselves, or abort."""
        try:
            if not self.loop.progress.acquire(timeout=5):
                raise RuntimeError("the comm thread holds the MPI progress lock")
            try:
                deadline = time.monotonic() + 5
                while (self.head.outbox or self.loop.sender.pending) and \
                        time.monotonic() < deadline:
                    try:
                        self.loop.poll_once()
                    except Exception:   # (the head's bug again: SHUTDOWN may still go)
                        logger.debug("poll during shutdown failed", exc_info=True)
                    time.sleep(1e-3)
            finally:
                self.loop.progress.release()
        except Exception as exc:
            abort_job(MPI.COMM_WORLD, f"hpc_ray: cannot stop the worker ranks cleanly ({exc}); "
                                      f"aborting the MPI job\n")
