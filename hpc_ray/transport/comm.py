"""The pieces every rank's comm loop is made of: batched sends, the rings that
wake a sleeping loop, receives, and cross-node object copies. How a loop waits
(``Backoff``, ``Doorbell``) is ``wait.py``'s.

Only the thread that owns a rank's MPI traffic calls into this module (the comm
thread on rank 0, the main loop on worker ranks), so no lock is taken here. The
one exception is ``CommThreadBell.wake``, which rank 0's driver threads call:
it sets and reads flags and sends a datagram.

    rank A (needs object)                           rank B (node holding it)
      FETCH(oid, offset, size)   ── Tag.CONTROL ──▶
      Irecv into its own store   ◀── Tag.OBJECT_DATA ── Isend from its store (raw bytes)
"""
from __future__ import annotations

import logging
import mmap
import os
import select
import socket
from time import monotonic
from typing import Callable

from mpi4py import MPI

from . import messages
from .tags import Tag
from .wait import Doorbell, WaitTimeout, doorbell_address, idle_cap, wait_until

logger = logging.getLogger(__name__)

#: MPI counts are C ints: raw object bytes move in pieces of at most this size.
MAX_CHUNK = 1 << 30


def tighten_timer_slack(nanoseconds: int = 1000) -> None:
    """Make short sleeps of this process last what they ask (default slack: 50 us).

    The back-off sleeps 10-100 us at a time; with the default slack each one
    lasts ~60 us more than asked, which adds straight to task round trips.
    """
    try:
        import ctypes
        ctypes.CDLL(None).prctl(29, nanoseconds)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


class SleepFlags:
    """Which loops of a one-host job sleep on their doorbells: a byte per rank
    in memory every rank of the job maps (a ``memfd``, opened like the store,
    so nothing has a name to leave behind).

    A loop about to sleep raises its flag, looks at MPI once more
    (``control_waiting``), and sleeps only if nothing came; it lowers the flag
    when it wakes. A sender sends, then rings the receiver's doorbell if its
    flag is up (``Sender.ring``). Either the sender sees the flag, or the flag
    went up after the sender read it, so after the message was sent and before
    the receiver's last look, which finds it: no message waits for a sleeper
    that nobody rang. So a loop sleeps on its doorbell right after activity,
    with no phase of short sleeps (each a wake-up: 20 us sleeps for 10 ms after
    every task took 35-55 us of CPU per call from two caller tasks' direct calls
    on 2 cores). And no ring is sent to a loop that is awake.

    That holds for messages MPI shows once sent. A message can also take a
    while to show (between spawned ranks and rank 0 it crosses a netmod): one
    sent just before the flag went up may be missed by the last look with no
    ring. So a flagged loop's sleeps climb from 1 ms (``Backoff``), and such a
    message waits about as long again as it took to show, not a whole sleep.
    (Python stores and loads are plain ones too: nothing orders the flag's
    store before the last look, though thousands of instructions run between
    them; the climb bounds that case the same way.)
    """

    #: One flag per 64-byte line: each loop writes its own twice a sleep.
    STRIDE = 64

    def __init__(self, fd: int, ranks: int) -> None:
        self.map = mmap.mmap(fd, self._size(ranks))
        os.close(fd)   # the mapping keeps the memory; nothing else needs the fd

    @classmethod
    def _size(cls, ranks: int) -> int:
        return max(mmap.PAGESIZE, ranks * cls.STRIDE)

    @classmethod
    def create(cls, ranks: int) -> tuple["SleepFlags", int]:
        """New flags, all down, and a descriptor other processes can open
        through /proc (the caller closes it once they all have)."""
        fd = os.memfd_create("hpc_ray_sleep_flags", 0)
        os.ftruncate(fd, cls._size(ranks))
        return cls(os.dup(fd), ranks), fd

    @classmethod
    def open(cls, pid: int, fd: int, ranks: int) -> "SleepFlags":
        return cls(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR), ranks)

    def up(self, rank: int) -> None:
        self.map[rank * self.STRIDE] = 1

    def down(self, rank: int) -> None:
        self.map[rank * self.STRIDE] = 0

    def asleep(self, rank: int) -> bool:
        return self.map[rank * self.STRIDE] != 0

    def close(self) -> None:
        self.map.close()


class CommThreadBell:
    """Rank 0's wake-up: the one descriptor its comm thread sleeps on.

    Two kinds of senders wake the comm thread: worker ranks, over MPI (one on
    this host rings the doorbell first when it sends after a pause, as it does
    for any rank: ``Sender``), and the driver's own threads (``wake``), which
    set ``woken`` and ring if the comm thread sleeps or naps. Where the
    doorbell cannot be named (off Linux), it is a socket pair that only the
    driver's threads ring (``usable`` is False: the ranks cannot).
    """

    def __init__(self, session_id: str | None, flags: SleepFlags | None = None) -> None:
        self.bell = Doorbell(session_id or "", 0)
        #: Whether worker ranks can ring it (it has a name).
        self.usable = self.bell.sock is not None
        #: Rank 0's flag among the job's ``SleepFlags`` (one-host jobs).
        self.flags = flags if self.usable else None
        #: In a long sleep (``sleep``); ``napping``: in a short one (``nap``).
        self.sleeping = False
        self.napping = False
        #: A driver thread asked for a round since the last sleep or nap ended.
        self.woken = False
        #: Rings may have come for messages already received (set by the loop
        #: on activity): the next sleep drops them first.
        self.stale = False
        #: The driver's threads' end: connected to the bell either way.
        if self.usable:
            self.tx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.tx.connect("\0" + doorbell_address(session_id, 0))
        else:
            self.bell.sock, self.tx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.bell.sock.setblocking(False)
        self.tx.setblocking(False)

    def wake(self) -> None:
        """A driver thread wants a round (attribute stores and a send: no lock,
        so a Ctrl-C in the middle leaves nothing held)."""
        self.woken = True
        if self.sleeping or self.napping:
            try:
                self.tx.send(b"\1")
            except OSError:
                pass   # (rings already fill its queue, or the bell is closed)

    def nap(self, timeout: float) -> None:
        """Block up to ``timeout`` (a back-off's short sleep), or until woken."""
        self.napping = True
        try:
            if not self.woken:
                self._block(timeout)
        finally:
            self.napping = False
            self.woken = False

    def sleep(self, timeout: float, waiting=None) -> bool:
        """Block up to ``timeout`` for a ring; True if one came (a message is on
        its way). No wait if a driver thread asked for a round (``woken``).
        ``waiting()`` (whether the caller has work: a message in MPI, something
        to send) is asked after ``sleeping`` (and, with ``flags``, rank 0's
        flag) is up: True, and it does not sleep.

        The first sleep after activity only drops the rings that came meanwhile
        (they would wake it for nothing) and returns False, so the caller polls
        once more before it sleeps: a ring dropped of a message not received
        yet costs that message at most one sleep."""
        if self.stale:
            self.stale = False
            self.bell.drain()
            return False
        flags = self.flags
        self.sleeping = True
        if flags is not None:
            flags.up(0)
        try:
            # A driver thread sets ``woken``, then rings if it sees ``sleeping``:
            # one that set it before this test is seen here, one after it rings.
            if self.woken or (waiting is not None and waiting()):
                return False
            return self._block(timeout)
        finally:
            self.sleeping = False
            self.woken = False
            if flags is not None:
                flags.down(0)

    def _block(self, timeout: float) -> bool:
        """Up to ``timeout`` on the bell; True (its rings read) if one came."""
        try:
            ready = select.select([self.bell.fileno()], [], [], timeout)[0]
        except (OSError, ValueError):
            return False
        if ready:
            self.bell.drain()
        return bool(ready)

    def close(self) -> None:
        self.bell.close()
        self.tx.close()


#: Without ``SleepFlags`` (they could not be mapped), a send to a rank that
#: this process sent nothing to for this long rings the rank's doorbell first.
#: Below every ``Backoff.deep_after`` that relies on the rings
#: (``wait.DEEP_AFTER_ONE_HOST``): a receiver looks at MPI just before it
#: decides to sleep long, and it decides so only after ``deep_after`` without a
#: message, so one that had a message from this process within RING_AFTER is
#: not sleeping long, and one that is has it rung.
RING_AFTER = 0.002
_NEVER = float("-inf")


class Sender:
    """Nonblocking sends whose requests are kept until they complete."""

    def __init__(self, comm: MPI.Comm, session_id: str | None = None,
                 flags: SleepFlags | None = None) -> None:
        self.comm = comm
        #: The job's ``SleepFlags`` (one-host jobs): ring exactly the sleepers.
        self.flags = flags
        self.pending: list = []
        self.unmatched: list = []   # synchronous sends (``send_sync``) not yet received
        #: Rings the doorbells of the session's worker ranks on this host (``Doorbell``).
        self.session_id = session_id
        self.bell: socket.socket | None = None
        if session_id and hasattr(socket, "AF_UNIX"):
            self.bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.bell.setblocking(False)
        self.last_sent: dict[int, float] = {}

    def ring(self, dest: int) -> None:
        """Ring ``dest``'s doorbell, after the message is sent: if its flag is up
        (``SleepFlags``), else if this process sent it nothing for RING_AFTER.
        A rank on another host has none here: the send fails, and that rank
        reads the message at its next poll."""
        if self.bell is None:
            return
        flags = self.flags
        if flags is not None:
            due = flags.asleep(dest)
        else:
            now = monotonic()
            due = now - self.last_sent.get(dest, _NEVER) >= RING_AFTER
            self.last_sent[dest] = now
        if due:
            try:
                self.bell.sendto(b"\1", "\0" + doorbell_address(self.session_id, dest))
            except OSError:
                pass

    def close_bell(self) -> None:
        if self.bell is not None:
            self.bell.close()
            self.bell = None

    def send(self, dest: int, obj, tag: int = Tag.CONTROL) -> None:
        self.pending.append(self.comm.isend(obj, dest, tag))
        self.ring(dest)

    def send_sync(self, dest: int, obj, tag: int = Tag.CONTROL) -> None:
        """A send that completes once ``dest`` has received it (MPI's synchronous
        mode): ``unmatched_count()`` is how far the receiver is behind."""
        self.unmatched.append(self.comm.issend(obj, dest, tag))
        self.ring(dest)

    def unmatched_count(self) -> int:
        if self.unmatched:
            self.unmatched = [req for req in self.unmatched if not req.Test()]
        return len(self.unmatched)

    def send_raw(self, dest: int, buf, tag: int = Tag.OBJECT_DATA) -> None:
        mv = memoryview(buf)
        for start in range(0, max(len(mv), 1), MAX_CHUNK):
            piece = mv[start: start + MAX_CHUNK]
            self.pending.append((self.comm.Isend([piece, MPI.BYTE], dest, tag), piece))

    def progress(self) -> None:
        if not self.pending:
            return
        still = []
        for item in self.pending:
            req = item[0] if isinstance(item, tuple) else item
            if not req.Test():
                still.append(item)
        self.pending = still

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` for every send to complete (at shutdown: a
        receiver that is gone never completes one); whether they all did."""
        def sent() -> bool:
            self.progress()
            return not (self.pending or self.unmatched_count())
        try:
            wait_until(sent, timeout, what="sends to complete")
        except WaitTimeout:
            logger.debug("%d sends still pending after %.1f s", len(self.pending), timeout)
            return False
        return True


#: Seconds rank 0's ``init()`` waits for the launch's other ranks before it says
#: what keeps them, most likely: under mpiexec every rank runs the script and
#: must call ``init()`` (``if rank == 0: ray.init()`` waits for good).
RANKS_LATE_S = 30.0


def patient_bcast(comm: MPI.Comm, obj):
    """``comm.bcast(obj, root=0)`` for ranks that may wait long for rank 0.

    A worker rank waits for the session's set-up for as long as rank 0 runs the
    user's script before its ``init()``; in a blocking collective it would
    busy-poll a core all that time (MPICH's and Open MPI's progress loops).
    Here it first tests a barrier, with sleeps up to an idle worker rank's
    (``wait.idle_cap``, 10 ms). No deadline: a rank 0 that died ends the job
    (the launcher does, or the spawning driver's own world)."""
    request = comm.Ibarrier()
    if comm.Get_rank() == 0:
        try:
            wait_until(request.Test, timeout=RANKS_LATE_S, what="the other ranks")
        except WaitTimeout:
            logger.warning(
                "hpc_ray: init() on rank 0 has waited %g s for the other %d rank(s) of the "
                "launch to call init() too. Under mpiexec every rank runs the script and "
                "must call init(), where the other ranks serve as workers: `if rank == 0: "
                "ray.init()` waits here for good. `mpiexec -n N python -m hpc_ray script.py` "
                "runs the script on rank 0 alone.", RANKS_LATE_S, comm.Get_size() - 1)
            request.Wait()
    else:
        wait_until(request.Test, cap=idle_cap(), what="rank 0's init()")
    return comm.bcast(obj, root=0)


def control_waiting(comm: MPI.Comm) -> bool:
    """Whether a control message waits, as a loop's last look before it sleeps.

    Two probes: MPICH's ``Iprobe`` matches what its earlier progress received,
    then makes progress, so a message sent just before the first probe is seen
    only by the second (a sender's ``isend`` returned, a flag in shared memory
    said so, and the next ``Iprobe`` missed the message 20,000 times out of
    20,000; the one after never did)."""
    return comm.Iprobe(MPI.ANY_SOURCE, Tag.CONTROL) or comm.Iprobe(MPI.ANY_SOURCE, Tag.CONTROL)


def recv_control(comm: MPI.Comm, limit: int = 64) -> list[tuple[int, list]]:
    """Receive up to ``limit`` waiting control batches: [(source, msgs), ...].

    A probe that finds nothing at first is made once more, as in
    ``control_waiting``: the first one of a loop woken by a doorbell, a message
    on its way, missed it and cost the loop a whole empty round (50-100 us
    after a sleep here) before the next found it."""
    got = []
    status = MPI.Status()
    msg = comm.improbe(MPI.ANY_SOURCE, Tag.CONTROL, status)
    if msg is None:
        msg = comm.improbe(MPI.ANY_SOURCE, Tag.CONTROL, status)
    while msg is not None:
        got.append((status.Get_source(), msg.recv()))
        if len(got) >= limit:
            break
        msg = comm.improbe(MPI.ANY_SOURCE, Tag.CONTROL, status)
    if messages.CHECKING:
        for src, msgs in got:
            messages.check_all(msgs, f"rank {comm.Get_rank()} from rank {src}")
    return got


class Fetcher:
    """Copies objects between nodes' stores with raw point-to-point transfers."""

    def __init__(self, comm: MPI.Comm, sender: Sender, arena) -> None:
        self.comm = comm
        self.sender = sender
        self.arena = arena
        self.inflight: list = []  # (requests, oid, local_record, on_done)

    def start(self, oid: int, src_rank: int, src_rec: tuple, local_rec: tuple,
              on_done: Callable[[int, tuple], None], fetch_kind: int) -> None:
        size = local_rec[3]
        self.sender.send(src_rank, [(fetch_kind, oid, src_rec[2], size)])
        dest = self.arena.writable(local_rec[2], size)
        reqs = []
        for start in range(0, max(size, 1), MAX_CHUNK):
            piece = dest[start: start + MAX_CHUNK]
            reqs.append(self.comm.Irecv([piece, MPI.BYTE], src_rank, Tag.OBJECT_DATA))
        self.inflight.append((reqs, oid, local_rec, on_done))

    def serve(self, dest: int, object_id: int, offset: int, size: int) -> None:
        """Send ``dest`` the bytes its FETCH of ``object_id`` asked for."""
        self.sender.send_raw(dest, self.arena.writable(offset, size))

    def moving(self) -> bool:
        """Whether object bytes (or any send) are still on their way. They move
        only while both ends call into MPI, and their end rings no doorbell: a
        loop must not sleep deep meanwhile."""
        return bool(self.inflight or self.sender.pending)

    def progress(self) -> bool:
        if not self.inflight:
            return False
        done_any = False
        still = []
        for item in self.inflight:
            reqs = item[0]
            if MPI.Request.Testall(reqs):
                item[3](item[1], item[2])
                done_any = True
            else:
                still.append(item)
        self.inflight = still
        return done_any
