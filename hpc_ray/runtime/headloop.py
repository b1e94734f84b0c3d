"""Rank 0's comm thread (``HeadLoop``): the head's I/O over MPI.

    user thread ─ DriverContext.submit/get/put/wait ─▶ Head (lock) ─ outbox ─┐
                     ▲ Head.cond.notify_all()                                 ▼
    comm thread (HeadLoop): recv batches ─▶ Head.handle ─▶ schedule ─▶ isend batches
                             FETCH requests from other nodes ─▶ raw Isend from the store

Who calls MPI on rank 0: whichever thread holds ``HeadLoop.progress``, and only
inside ``HeadLoop.poll_once`` (one round: receive, handle, send, progress the
transfers). Normally that is the comm thread. A user thread waiting in
``get``/``wait`` takes the same lock and runs rounds itself for a while
(``DRIVER_SPINS``), so a sync round trip involves no hand-over between threads;
meanwhile ``driver_polling`` tells the comm thread to stay idle, and when the
waiter gives up polling it wakes the comm thread. That one lock is the whole
hand-over: no other code on rank 0 calls MPI, except ``MPI_Abort`` when
shutdown cannot reach the workers or a node is lost (``node_watch``). MPI sees
serialized calls from several threads (``MPI_THREAD_SERIALIZED`` use; mpi4py
asks for ``MPI_THREAD_MULTIPLE``).
``tests/mpi_scripts/driver_threads.py`` hammers it from many user threads.

A handler that raises on one message fails what that message concerns and the
job goes on (``HeadLoop.handler_failed``); a bug in the scheduler breaks the
head once (``schedule``), and shutdown still reaches every rank.

The head reaches every actor through its rank, over MPI; a caller on the
actor's host may call it directly instead (``peer_calls``).

The driver's threads hand HOLDs and submissions over through lock-free deques
(``_held``, ``_submitted``), drained under the head's lock by ``drain_refs``.
"""
from __future__ import annotations

import collections
import logging
import sys
import threading
import time
import traceback

from mpi4py import MPI

from ..exceptions import RayError
from ..transport import messages as m
from ..transport.comm import (CommThreadBell, Fetcher, Sender, control_waiting, recv_control,
                              tighten_timer_slack)
from ..transport.wait import loop_backoff
from . import context, interrupts, launch
from .head import Head

logger = logging.getLogger(__name__)

#: Rounds of I/O the driver thread runs itself, back to back, while it waits
#: before it sleeps and leaves the polling to the comm thread. Only while such
#: rounds pay off: as an executor's busy-poll (``wait.Spinner``), the driver
#: spins while a moving average of its waits that ended within the spin stays
#: above ``wait.KEEP``, and on one wait in ``wait.PROBE_EVERY`` otherwise.
#: Waits for tasks longer than the spin (two caller tasks of 200 direct actor
#: calls each) spun 2-4 ms of a core away from the tasks each time: 13-14 us of
#: the driver's CPU per call instead of 10.
DRIVER_SPINS = 200
#: A submission this soon after a driver thread left get()/wait() does not wake
#: the comm thread (see DriverContext.submit).
SUBMIT_QUIET = 0.0002
#: Seconds shutdown() waits for every worker rank to confirm it has stopped
#: (a rank first stops its executors, which takes up to 2 s).
STOP_WAIT = 20.0
#: The same wait when the driver was sent SIGTERM (``interrupts.terminated``):
#: Slurm sends it to every process of the step, so the ranks that will confirm
#: do so within their executors' stop, and the rest of KillWait (30 s by
#: default, 5 s on some sites) is the user's atexit clean-up's.
TERMINATED_STOP_WAIT = 3.0


class HeadLoop(threading.Thread):
    """The comm thread of rank 0."""

    def __init__(self, comm: MPI.Comm, head: Head, arena,
                 session_id: str | None = None, one_host: bool = False,
                 flags=None) -> None:
        super().__init__(name="hpc_ray-head", daemon=True)
        self.comm = comm
        self.head = head
        #: Rings the doorbell of a worker rank it sends to after a pause (wait.Doorbell).
        self.sender = Sender(comm, session_id, flags)
        self.fetcher = Fetcher(comm, self.sender, arena)
        #: What the quiet comm thread sleeps on: a worker rank on this host that
        #: sends after a pause rings it (``comm.Sender``), and the driver's
        #: threads ring it in ``wake()``.
        self.bell = CommThreadBell(session_id, flags)
        self.stop_requested = False
        #: Worker ranks that sent STOPPED, and how long to wait for the others.
        self.stopped: set[int] = set()
        self.stop_deadline = 0.0
        self.fetch_requests: list = []
        self.error: str | None = None
        self.backoff = loop_backoff(True, one_host and self.bell.usable,
                                    self.bell.flags is not None)
        #: Held by whichever thread runs poll_once(): MPI calls never overlap.
        self.progress = threading.Lock()
        #: True while the driver thread polls in get()/wait(); the comm thread idles.
        self.driver_polling = False
        #: Driver threads asleep on the head's condition in get()/wait() now.
        self.driver_sleepers = 0
        #: When a driver thread last left get()/wait() (see DriverContext.submit).
        self.waited_at = 0.0
        self.last_flush = 0.0
        #: Executors' lines (LOG), printed at the end of the round, under the head's lock.
        self.logs: list = []
        self.watch = None   #: NodeWatch over the other nodes (node_watch.py); None on one host
        #: Embedded mode: SpawnedWatch over the worker ranks' processes (node_watch.py).
        self.spawned = None
        self._handlers = self._make_handlers()

    def _make_handlers(self) -> dict:
        """Kind -> handler(src, msg) for every kind in ``messages.TO_HEAD``."""
        head = self.head
        return {
            m.TASK_DONE: lambda src, msg: head.task_done(src, *msg[1:]),
            m.TASK_FAILED: lambda src, msg: head.task_failed(src, *msg[1:]),
            m.PROCESS_ENDED: lambda src, msg: head.process_ended(src, *msg[1:]),
            m.SUBMIT: lambda src, msg: head.submit(*msg[1:]),
            m.PUT: self._on_put,
            m.GET: lambda src, msg: head.remote_get(src, *msg[1:]),
            m.WAIT: lambda src, msg: head.remote_wait(src, *msg[1:]),
            m.WAIT_NOW: lambda src, msg: head.remote_wait_now(src, *msg[1:]),
            m.ALLOC: self._on_alloc,
            m.HOLD: lambda src, msg: head.hold(*msg[1:]),
            m.RELEASE: lambda src, msg: head.release(*msg[1:]),
            m.BLOCKED: lambda src, msg: head.blocked(src, *msg[1:]),
            m.ADD_LOCATION: lambda src, msg: head.add_location(*msg[1:]),
            m.ACTOR_READY: lambda src, msg: head.actor_ready(*msg[1:]),
            m.ACTOR_DIED: lambda src, msg: head.actor_died(*msg[1:]),
            m.CONTROL_CALL: self._on_control,
            m.PROFILE: lambda src, msg: head.add_events(*msg[1:]),
            m.DIRECT_DONE: lambda src, msg: head.direct_report(*msg[1:]),
            m.FREE_BLOCKS: lambda src, msg: head.free_blocks(src, *msg[1:]),
            m.FETCH: lambda src, msg: self.fetcher.serve(src, *msg[1:]),
            m.RETURNED: lambda src, msg: head.tasks_returned(src, *msg[1:]),
            m.STOPPED: self._on_stopped,
            m.LOG: lambda src, msg: self.logs.append((src, *msg[1:])),
            m.ALIVE: lambda src, msg: self.watch and self.watch.hear(src),
        }

    # --- handlers ---------------------------------------------------------------

    def _on_put(self, src: int, msg: tuple) -> None:
        _, object_id, record, contained = msg
        self.head.hold((object_id,))
        self.head.put_object(object_id, record, contained)

    def _on_alloc(self, src: int, msg: tuple) -> None:
        _, req_id, size = msg
        node = self.head.node_of[src]
        off = self.head.alloc(node, size)
        freed = self.head.allocators[node].freed
        self.head.send(src, (m.REPLY, req_id, (node, off, self.head.store_size, freed)))

    def _on_stopped(self, src: int, msg: tuple) -> None:
        self.stopped.add(src)
        self.head.worker_stopped(src)

    def _on_control(self, src: int, msg: tuple) -> None:
        from . import control
        _, req_id, name, args = msg
        if name == "collective_join":
            self.head.collective_join(src, req_id, *args)
            return
        try:
            result = (True, control.call(self.head, name, args))
        except Exception as exc:  # returned to the caller, raised there
            result = (False, exc)
        self.head.send(src, (m.REPLY, req_id, result))

    # --- loop -------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._loop()
        except BaseException:
            self.fail(traceback.format_exc())
        finally:
            self.sender.close_bell()
            self.bell.close()

    def fail(self, tb: str) -> None:
        """The head hit a bug: say so once, and fail everything pending."""
        if self.error is None:
            self.error = tb
            sys.stderr.write(f"### hpc_ray head (rank 0) failed:\n{tb}")
        with self.head.lock:
            self.head.mark_broken("the head failed:\n" + tb)

    def ranks_lost(self) -> None:
        """Embedded mode: a worker rank's process died (``SpawnedWatch``). Nothing
        ends the job, and the driver is the user's process: break the session,
        failing everything pending, say so on stderr, and keep this process from
        calling MPI_Finalize or spawning again (``launch.spawned_lost``)."""
        why = self.spawned.why
        launch.spawned_lost = why
        with self.head.lock:
            self.head.mark_broken(why)
        sys.stderr.write(f"hpc_ray: {why}\n")

    def handler_failed(self, src: int, msg: tuple) -> None:
        """One message's handler raised (a bug in the head): log it, fail what the
        message concerns, and go on with the job (``Head.handler_failed``)."""
        tb = traceback.format_exc()
        logger.error("hpc_ray head (rank 0): handling a message from rank %d failed; "
                     "the job goes on without it:\n%s", src, tb)
        self.head.handler_failed(src, msg, tb)

    def poll_from_driver(self) -> bool:
        """poll_once() for the driver thread: a head bug becomes a RayError, not a hang."""
        try:
            return self.poll_once()
        except Exception:
            self.fail(traceback.format_exc())
            raise RayError("the hpc_ray head failed; see the traceback on stderr:\n"
                           + (self.error or "")) from None

    def poll_once(self) -> bool:
        """One round of the head's I/O; the caller holds ``self.progress``.

        Returns whether anything happened. Called by the comm thread, and by the
        driver thread itself while it waits in get()/wait(): a sync round trip then
        involves no hand-over between threads.
        """
        head = self.head
        sender = self.sender
        active = False
        batches = recv_control(self.comm)
        with head.lock:
            drain_refs(head)
            if batches:
                active = any(m.reply_due(msgs) for _, msgs in batches)
                handlers = self._handlers
                for src, msgs in batches:
                    for msg in msgs:
                        try:
                            handlers[msg[0]](src, msg)
                        except Exception:
                            self.handler_failed(src, msg)
                if not head.closing:
                    schedule(head)
                if self.driver_sleepers:
                    head.cond.notify_all()
            out = head.take_outbox() if head.outbox else None
            if self.logs:
                # Printed before the lock goes: no get() sees a result that came
                # after a task's lines before they are out (nor a peer call's answer,
                # which waits for a reply sent below).
                logs, self.logs = self.logs, []
                for src, entries in logs:
                    context.print_worker_logs(src, entries)
            if self.fetch_requests:
                reqs, self.fetch_requests = self.fetch_requests, []
            else:
                reqs = None
        if out:
            active = True
            for rank, msgs in out.items():
                sender.send(rank, msgs)
            self.last_flush = time.monotonic()
        if reqs:
            for oid, plan, done in reqs:
                self.fetcher.start(oid, plan[1], plan[2], plan[3],
                                   lambda o, rec, done=done: self._fetched(o, rec, done),
                                   m.FETCH)
        sender.progress()
        if self.fetcher.progress():
            active = True
        return active

    def _loop(self) -> None:
        tighten_timer_slack()  # per thread on Linux: this comm thread only
        head = self.head
        backoff = self.backoff
        progress = self.progress
        last_check = time.monotonic()
        while True:
            active = False
            if self.driver_polling:
                # The driver thread is polling for its own get(): stay out of its way
                # (two pollers only trade the GIL and the lock back and forth).
                self.bell.nap(0.0005)
                continue
            if progress.acquire(timeout=0.01):
                try:
                    active = self.poll_once()
                    if self.stop_requested and self._stopped_cleanly():
                        return
                finally:
                    progress.release()
            now = time.monotonic()
            if now - last_check > 1.0:
                last_check = now
                with head.lock:
                    head.retry_pending_actors()
                    head.placement.warn_stalled(now)
                    busy = head.in_rank_busy() if self.watch is not None else ()
                if self.watch is not None and not self.stop_requested:
                    self.watch.check(now, self.comm, busy)
                # Also while stopping: a dead rank will not confirm the shutdown.
                if self.spawned is not None and self.spawned.check():
                    self.ranks_lost()
            if active:
                backoff.reset()
                self.bell.stale = True
            elif self.fetcher.moving():
                continue   # object bytes move only while both ends call into MPI
            else:
                # Deep sleeps while tasks run only where a task's result rings the
                # doorbell. (A dict's length, read without the lock: at worst one
                # poll late.)
                t = backoff.next_timeout(not head.tasks or self.bell.usable)
                if head.direct_reports:
                    # Quiet enough to wait: read the callers' reports first
                    # (Head.direct_report), then look once more.
                    with head.lock:
                        head.settle_direct_reports()
                    continue
                if t > backoff.cap and self.bell.usable:
                    if self.bell.sleep(t, self._work_waiting):
                        backoff.rung()    # a message is on its way: poll MPI at once
                else:
                    self.bell.nap(t)

    def _work_waiting(self) -> bool:
        """Whether a round has work now: something submitted or due to be sent,
        or a control message waiting in MPI (True when a driver thread holds
        MPI: it is polling, so the comm thread should not sleep long). Asked
        by a comm thread about to sleep, after it said so (``bell.sleeping``,
        its flag): a driver thread that submits without waking it (``submit``)
        did so before this look, or sees it sleeping and wakes it."""
        head = self.head
        if _submitted or head.outbox or self.fetch_requests:
            return True
        if not self.progress.acquire(False):
            return True
        try:
            return control_waiting(self.comm)
        finally:
            self.progress.release()

    def _stopped_cleanly(self) -> bool:
        """After SHUTDOWN: every message sent, and every worker rank's last one received.

        MPI_Finalize must not find a message that no one received: under srun
        (PMI-2) the MPICH wheel's Finalize then hangs in the other ranks (with
        mpiexec it does not). So rank 0 keeps receiving until each live worker
        rank has sent STOPPED, its last message, which MPI delivers after all
        the rank's earlier ones.
        """
        head = self.head
        lost = self.spawned.lost if self.spawned is not None else ()
        waiting = [r for r in head.workers if r not in self.stopped and r not in lost]
        if lost and not waiting:
            return True     # each rank stopped or died: sends still pending go to dead ones
        if head.outbox or self.sender.pending:
            return False
        if not waiting:
            return True
        if time.monotonic() < self.stop_deadline:
            return False
        if interrupts.terminated:
            # MPI_Finalize would wait for ranks the same SIGTERM ended.
            interrupts.skip_finalize = True
            sys.stderr.write(f"hpc_ray: terminated (SIGTERM); worker ranks {waiting} did not "
                             f"confirm the shutdown (they were likely terminated too): the "
                             f"driver leaves without MPI_Finalize\n")
            return True
        sys.stderr.write(f"hpc_ray: worker ranks {waiting} did not confirm the shutdown "
                         f"within {STOP_WAIT:.0f} s; the MPI job may not end cleanly\n")
        return True

    def _fetched(self, oid: int, rec: tuple, done: threading.Event) -> None:
        with self.head.lock:
            self.head.add_location(oid, rec)
        done.set()

    def request_fetch(self, oid: int, plan: tuple) -> threading.Event:
        done = threading.Event()
        self.fetch_requests.append((oid, plan, done))
        self.wake()
        return done

    def wake(self) -> None:
        """Wake the comm thread from its wait (called from the driver's threads)."""
        self.bell.wake()


def drain_refs(head: Head) -> None:
    """Apply the driver's pending HOLDs, submissions, then RELEASEs (lock held).

    A ref made by a submission may already have died, and its RELEASE must find
    the object the submission creates. The driver thread appends concurrently,
    so the releases are taken *first*: every one of them was made after the
    HOLDs and submissions it depends on were queued, and those are all applied
    before it.
    """
    released = context.released
    rel = []
    while released:
        rel.append(released.popleft())
    peer = _peer[0]
    if rel and peer is not None and (peer.pending or peer.results or peer.held):
        # Results of direct calls or held ones (``forget`` says which): the head
        # never knew them, or does not yet.
        mine = {oid for oid in rel if peer.forget(oid)}
        if mine:
            rel = [oid for oid in rel if oid not in mine]
    if _held:
        ids = []
        while _held:
            ids.append(_held.popleft())
        head.hold(ids)
    if _submitted:
        while _submitted:
            head.submit(_submitted.popleft())
        schedule(head)
    if rel:
        head.release(rel)


def schedule(head: Head) -> None:
    """``head.schedule()`` (lock held), unless the head is broken. A bug in the
    scheduler breaks the head once: every pending task fails with its traceback,
    later ones fail at submission, the caller gets a RayError, and the job can
    still shut down cleanly (nothing calls the scheduler again)."""
    if head.broken:
        return
    try:
        head.schedule()
    except Exception:
        tb = traceback.format_exc()
        logger.error("hpc_ray head (rank 0) failed in its scheduler:\n%s", tb)
        head.mark_broken("the head failed:\n" + tb)
        raise RayError("the hpc_ray head failed; see the traceback on stderr:\n"
                       + tb) from None


#: HOLDs of refs the driver unpickled, applied at the next drain_refs().
_held: collections.deque = collections.deque()
#: Specs the driver submitted, handed to the head in batches by drain_refs():
#: one lock acquisition and one scheduling pass per batch, not per task.
_submitted: collections.deque = collections.deque()
#: Hand submissions over at least this often, even while no one waits.
SUBMIT_BATCH = 256
#: The driver's PeerCaller (direct calls), for drain_refs().
_peer: list = [None]
