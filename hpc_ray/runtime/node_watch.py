"""Rank 0's watch over the other nodes: a node none of whose ranks is heard from
for ``NODE_TIMEOUT`` seconds is lost (or one of its ranks, if only that one is
silent), and the job ends, naming it.

    rank of another node ── ALIVE, each HEARTBEAT s ──▶ HeadLoop ─▶ NodeWatch.hear
    HeadLoop._loop, once a second ─▶ NodeWatch.check ─▶ lost: a line on stderr, MPI_Abort

MPI tells the surviving ranks nothing when a node dies, and not every launcher
ends the job: hydra does at once (unless ``-disable-auto-cleanup``), but under
Slurm the job waits until slurmctld declares the node down (``SlurmdTimeout``,
minutes), with the driver blocked in ``get`` on tasks that will never finish.
Only jobs whose ranks span several hosts are watched (``cfg["one_host"]``).

The job is aborted at once, as a launcher would have done, rather than failing
the driver's pending ``get`` calls first: a library that takes such errors for
its own failures records them (Tune would mark the trials of the lost node
ERROR once their retries failed too, and a requeued job would not resume them).

Embedded mode (``SpawnedWatch``): the driver is the user's own process (a
notebook, perhaps), which no launcher ends and which must not be aborted, and
the worker ranks it spawned are on its host. Rank 0 reads their /proc entries
once a second; a rank found dead breaks the session (``HeadLoop.ranks_lost``):
every pending task fails, and later ``get``/``wait``/``put`` raise a
``RayError`` naming the rank and its pid. MPICH's launcher ends the other ranks
of the spawn and itself when one dies; MPI_Finalize and MPI_Comm_spawn then
crash this process (they talk to that launcher), so the driver leaves out the
one at exit (``launch.finalize_at_exit``) and ``init()`` refuses the other.

    HeadLoop._loop, once a second ─▶ SpawnedWatch.check ─▶ HeadLoop.ranks_lost
"""
from __future__ import annotations

import time

from .. import _config
from .launch import abort_job

#: Seconds between a worker rank's ALIVE messages (``WorkerLoop.run``).
HEARTBEAT = 1.0
#: Seconds of silence from every rank of a node before it counts as lost
#: (``HPC_RAY_NODE_TIMEOUT``). Ray declares a node dead after 30 s without
#: heartbeats (300 x 100 ms). Shorter ends the job sooner after a failure, but a
#: node whose ranks' loops cannot run for that long (a machine swapping hard)
#: would be taken for a failed one.
NODE_TIMEOUT = _config.os_environ_get("NODE_TIMEOUT", 30.0, float)
#: A gap this long between two of rank 0's own checks means its loop was held
#: up, not the nodes: the ALIVEs of that time still wait in MPI, unread.
STALL = 5 * HEARTBEAT


class NodeWatch:
    """When each watched rank (those not on rank 0's node) was last heard from."""

    def __init__(self, node_of: list[int], host_of: list[str], now: float) -> None:
        #: Node -> its ranks, for every node but rank 0's.
        self.ranks: dict[int, list[int]] = {}
        for rank, node in enumerate(node_of):
            if node != node_of[0]:
                self.ranks.setdefault(node, []).append(rank)
        self.host_of = host_of
        #: Rank -> monotonic time of its last ALIVE (start-up counts as one).
        self.heard = {r: now for ranks in self.ranks.values() for r in ranks}
        #: When ``lost`` last looked.
        self.checked = now
        self.ended = False

    def hear(self, rank: int) -> None:
        self.heard[rank] = time.monotonic()

    def lost(self, now: float, busy=()) -> tuple[int, list[int]] | None:
        """The first node with a rank not heard from for NODE_TIMEOUT s, and its
        silent ranks (those silent for nearly as long count: the ranks of a failed
        node fall silent within a heartbeat of each other). ``busy`` ranks run a
        method of an in-rank actor, in their loop, which sends no ALIVE meanwhile
        however long the method takes: they count as heard."""
        for rank in busy:
            if rank in self.heard:
                self.heard[rank] = now
        if now - self.checked > STALL:
            for rank in self.heard:     # (counted from now: see STALL)
                self.heard[rank] = max(self.heard[rank], now)
        self.checked = now
        for node, ranks in self.ranks.items():
            if any(now - self.heard[r] > NODE_TIMEOUT for r in ranks):
                return node, [r for r in ranks
                              if now - self.heard[r] > NODE_TIMEOUT - 2 * HEARTBEAT]
        return None

    def describe(self, node: int, silent: list[int]) -> str:
        ranks = self.ranks[node]
        host = self.host_of[ranks[0]]
        if silent == ranks:
            what = (f"lost node {host} (ranks {', '.join(map(str, ranks))}): none of its "
                    f"ranks was heard from for {NODE_TIMEOUT:g} s (the node failed, or its "
                    f"processes were killed)")
        else:
            what = (f"lost rank{'s' if len(silent) > 1 else ''} "
                    f"{', '.join(map(str, silent))} on node {host}: not heard from for "
                    f"{NODE_TIMEOUT:g} s (killed, or hung)")
        return (f"hpc_ray: {what}; ending the job. Run it again to resume from "
                f"checkpoints (a requeued Tune job resumes with tune.run(..., resume=True)).")

    def check(self, now: float, comm, busy=()) -> None:
        """End the job if a node (or a rank of it) is lost: say which on stderr,
        then ``MPI_Abort``. ``busy``: as for ``lost``."""
        found = None if self.ended else self.lost(now, busy)
        if found is None:
            return
        self.ended = True
        abort_job(comm, self.describe(*found) + "\n")


def for_job(cfg: dict, node_of: list[int], host_of: list[str]) -> NodeWatch | None:
    """A watch for a job over several hosts; None for one host."""
    if cfg.get("one_host") or len(set(node_of)) < 2:
        return None
    return NodeWatch(node_of, host_of, time.monotonic())


class SpawnedWatch:
    """Embedded mode: whether each worker rank's process still runs."""

    def __init__(self, pids: dict[int, int]) -> None:
        #: Rank -> its process's pid.
        self.pids = dict(pids)
        #: Rank -> its process's start time (/proc), so that a reused pid is not taken for it.
        self.started = {rank: _start_time(pid) for rank, pid in self.pids.items()}
        #: Ranks found dead, in the order found.
        self.lost: list[int] = []
        #: The error of the broken session, set when the first dead rank is found.
        self.why: str | None = None

    def check(self) -> bool:
        """Look for dead ranks; True when the first ones are found (``why`` is then set)."""
        new = [rank for rank, pid in self.pids.items()
               if rank not in self.lost and _start_time(pid) != self.started[rank]]
        self.lost.extend(new)
        if not new or self.why is not None:
            return False
        # Named: the ranks found first (the launcher ends the others, found later).
        died = ", ".join(f"{rank} (pid {self.pids[rank]})" for rank in new)
        self.why = (f"worker rank{'s' if len(new) > 1 else ''} {died} of this embedded "
                    f"session died (killed from outside, e.g. by the OOM killer or a "
                    f"signal; MPI's launcher then ends the other ranks). The session cannot "
                    f"go on, and MPI cannot start worker ranks again in this process: call "
                    f"hpc_ray.shutdown(), and run hpc_ray in a new Python process (in a "
                    f"notebook: restart the kernel)")
        return True


def _start_time(pid: int) -> bytes | None:
    """The process's start time (/proc/<pid>/stat), None if it is gone or a zombie
    (a killed rank stays its launcher's zombie until reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in (b"Z", b"X") else fields[19]


def spawned_watch(cfg: dict, pids: dict[int, int]) -> SpawnedWatch | None:
    """A watch over the worker ranks an embedded driver spawned; None under a launcher."""
    return SpawnedWatch(pids) if cfg.get("embedded") else None
