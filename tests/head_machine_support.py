"""What the head's hypothesis machine (``test_head_machine.py``) and its kept
failing examples (``test_head_regressions.py``) share: ids, specs, a head of
three worker ranks, and the invariants checked after every step."""
from __future__ import annotations

import collections
import itertools
import pickle

from hpc_ray.exceptions import HeadError, TaskError, UnreconstructableError
from hpc_ray.runtime import scheduler
from hpc_ray.runtime.head import ActorState, Head, TaskState
from hpc_ray.runtime.store import BLOCK
from hpc_ray.transport import messages as m
from hpc_ray.transport.serialization import ERROR, RAW, SHM


STORE = 1 << 20
WORKERS = (1, 2, 3)
#: Errors a get of a held object must never be answered with: the object was
#: freed, or the head failed. (A task's own outcome, raised, crashed,
#: infeasible or its actor dead, is a fine answer.)
HEAD_FAULTS = (UnreconstructableError, HeadError)
#: Bits of a task id below its caller's number (head/actors.py _CALLER_SHIFT).
CALLER_SHIFT = 40
#: The driver (0) and two tasks' executors, as callers of actors.
CALLERS = (0, (1 << 20) | 1, (2 << 20) | 3)
#: Ids new_id() gives: above the small ids the plain tests below write out.
FIRST_ID = 1 << 20
_ids = itertools.count(FIRST_ID)


def new_id() -> int:
    return next(_ids)


def reset_ids() -> None:
    """Ids from FIRST_ID again (each hypothesis example starts here)."""
    global _ids
    _ids = itertools.count(FIRST_ID)


def spec(deps=(), returns=1, retries=None, actor=None, contained=(), resources=None,
         fn="f") -> list:
    """A task spec; ``retries`` None: 0 for a task, the actor's for an actor call."""
    s = [None] * 13
    s[m.T_ID] = new_id()
    s[m.T_FN] = fn
    s[m.T_BLOB] = b"blob"
    s[m.T_NAME] = fn
    s[m.T_PAYLOAD] = (RAW, ())
    s[m.T_DEPS] = [(i, oid) for i, oid in enumerate(deps)]
    s[m.T_RETURNS] = [new_id() for _ in range(returns)]
    s[m.T_RES] = resources
    s[m.T_RETRIES] = 0 if retries is None and actor is None else retries
    s[m.T_MAX_CALLS] = 0
    s[m.T_ACTOR] = actor
    s[m.T_OWNER] = 0
    s[m.T_CONTAINED] = list(contained) or None
    return s


def error_record(msg="boom") -> tuple:
    return (ERROR, pickle.dumps(TaskError("f", msg, 1, "host", ValueError(msg))))


def make_head(gpus: int = 0) -> Head:
    head = Head(len(WORKERS) + 1, [0] * (len(WORKERS) + 1), STORE,
                ["host"] * (len(WORKERS) + 1))
    for r in WORKERS:
        head.add_worker(r, {"CPU": 1, "GPU": gpus, "lic": 2}, list(range(gpus)), 1000 + r)
    return head


def rounded(size: int) -> int:
    return max(BLOCK, (size + BLOCK - 1) // BLOCK * BLOCK)


class Proc:
    """An executor process as the head sees it: what it holds, asked and lent."""

    def __init__(self, rank: int, pid: int) -> None:
        self.rank = rank
        self.pid = pid
        self.holds: collections.Counter = collections.Counter()
        self.reqs: dict[int, str] = {}          #: unanswered request id -> "get"/"wait"
        self.lent = 0                           #: CPUs lent while it waits (BLOCKED)
        self.blocks: dict[int, int] = {}        #: offset -> size, allocated, not sealed


def check_invariants(head: Head, driver_holds: collections.Counter, unsealed: dict,
                     procs=None) -> None:
    objects = head.objects
    procs = procs or {}
    # --- holders ---
    expected = collections.Counter(driver_holds)
    for proc in procs.values():
        expected.update(proc.holds)
    for task in head.tasks.values():
        assert task.state not in (TaskState.FINISHED, TaskState.FAILED), \
            f"ended task {task.spec[m.T_ID]} still in the live table"
        for _, oid in task.spec[m.T_DEPS] or ():
            expected[oid] += 1
        for oid in task.spec[m.T_CONTAINED] or ():
            expected[oid] += 1
    for actor in head.actors.values():
        assert actor.state is not ActorState.DEAD
        for _, oid in actor.spec[m.T_DEPS] or ():
            expected[oid] += 1
        if actor.state is ActorState.PENDING and all(
                objects.ready(oid) for _, oid in actor.spec[m.T_DEPS] or ()):
            # Waiting for room: it must be tried again when room appears.
            assert actor.actor_id in head.pending_actors, \
                f"actor {actor.actor_id} waits for room but is never retried"
    for oid, e in objects.entries.items():
        for c in e.contained or ():
            expected[c] += 1
    for oid, e in objects.entries.items():
        assert e.refs == expected[oid], \
            f"object {oid}: head counts {e.refs} holders, there are {expected[oid]}"
        if e.record is not None and not e.waiters:
            assert e.refs > 0, f"object {oid} is ready and unheld but not freed"
    for oid, n in expected.items():
        if n > 0:
            assert oid in objects, f"object {oid} freed while {n} holder(s) remain"
    # --- where each task is ---
    ready = collections.Counter()
    for q in head.ready.fifos.values():
        for t in q:
            if t.state is TaskState.READY:
                ready[t.spec[m.T_ID]] += 1
    in_actor_queues = {t.spec[m.T_ID] for a in head.actors.values() for t in a.queue
                       if t.state is TaskState.PENDING}
    in_actor_flight = {tid for a in head.actors.values() for tid in a.inflight}
    inflight = collections.Counter()
    fractions = collections.Counter()
    for task in head.tasks.values():
        tid = task.spec[m.T_ID]
        if task.state is TaskState.READY:
            assert ready[tid] == 1, f"READY task {tid} is queued {ready[tid]} times"
        else:
            assert ready[tid] == 0, f"{task.state} task {tid} is also in the ready queue"
        is_call = task.spec[m.T_ACTOR] is not None
        if task.state is TaskState.RUNNING:
            assert task.placed
            if is_call:
                assert tid in in_actor_flight
            elif scheduler.in_cpu_queue(task.resources):
                inflight[task.rank] += 1
            elif task.resources.get("CPU"):
                fractions[task.rank] += 1
        if is_call and task.state is TaskState.PENDING:
            assert tid in in_actor_queues
    for r, w in head.workers.items():
        assert w.inflight == inflight[r], f"rank {r}: inflight {w.inflight} != {inflight[r]}"
        assert w.fractions == fractions[r], f"rank {r}: {w.fractions} != {fractions[r]}"
        # Fractions of a CPU are placed only where free, and whole CPUs only where
        # free while fractions run: none is queued beyond the rank's CPUs.
        assert not w.fractions or w.avail["CPU"] > -1e-9, \
            f"rank {r}: {w.fractions} fractions with CPU avail {w.avail['CPU']}"
    # --- resources ---
    grants = [t for t in head.tasks.values() if t.placed and t.spec[m.T_ACTOR] is None] + \
        [a for a in head.actors.values() if a.state in (ActorState.STARTING, ActorState.ALIVE)]
    # node -> GPU id -> the fraction of it held (a node's GPU ids are one pool)
    gpu_shares = collections.defaultdict(collections.Counter)
    for r, w in head.workers.items():
        used = collections.Counter()
        gpu_share = gpu_shares[w.node]

        def holds(resources, ids):
            used.update({k: v for k, v in resources.items() if v})
            need = resources.get("GPU", 0)
            assert len(ids) == (1 if 0 < need < 1 else int(need)), (resources, ids)
            gpu_share.update({g: min(need, 1) for g in ids})

        for task in head.tasks.values():
            if task.placed and task.spec[m.T_ACTOR] is None and task.rank == r:
                holds(task.resources, task.gpu_ids)
        actor_cpus = 0
        for actor in head.actors.values():
            if actor.state in (ActorState.STARTING, ActorState.ALIVE) and actor.rank == r:
                holds(actor.resources, actor.gpu_ids)
                actor_cpus += actor.resources.get("CPU", 0)
        assert w.actor_cpus == actor_cpus, f"rank {r}: actor_cpus {w.actor_cpus} != {actor_cpus}"
        # CPUs a wider-than-one-rank grant borrowed from this rank (``pick_wide``).
        lent = [g for g in grants if w in g.lenders]
        used["CPU"] += sum(w.total["CPU"] for _ in lent)
        assert w.lending == len(lent), (r, w.lending, len(lent))
        assert w.hosting == sum(1 for g in grants if g.lenders and g.rank == r)
        for k, total in w.total.items():
            assert abs(total - w.avail.get(k, 0) - used.get(k, 0)) < 1e-9, \
                f"rank {r} {k}: total {total}, avail {w.avail.get(k)}, in use {used.get(k)}"
    # A node's GPUs and custom resources, held by tasks and actors of all its ranks.
    for node, pool in head.pools.items():
        assert sorted(pool.gpu_free) == list(range(int(pool.total.get("GPU", 0))))
        for g, free in pool.gpu_free.items():
            assert abs(free + gpu_shares[node][g] - 1) < 1e-9, \
                f"node {node} GPU {g}: {free} free, {gpu_shares[node][g]} held"
        used = node_pool_held(head, node)
        for k in set(pool.total) | set(pool.avail):
            total = pool.total.get(k, 0)
            assert abs(total - pool.avail.get(k, 0) - used.get(k, 0)) < 1e-9, \
                f"node {node} {k}: total {total}, avail {pool.avail.get(k)}, in use {used.get(k)}"
    # --- waiting processes ---
    asked = {(p.rank, req) for p in procs.values() for req in p.reqs}
    for key in list(head.remote_gets) + list(head.remote_waits):
        assert key in asked, f"the head waits to answer {key}, which no live process asked"
    for oid, e in objects.entries.items():
        for w in e.waiters:
            if w[0] == "get":
                assert w[1][2] > 0 and (w[1][0], w[1][1]) in head.remote_gets, \
                    f"object {oid} has a waiter for a get that is gone: {w[1]}"
            elif w[0] == "wait":
                assert w[1] in head.remote_waits, f"object {oid} waits for gone wait {w[1]}"
    for r, w in head.workers.items():
        lent = sum(p.lent for p in procs.values() if p.rank == r)
        assert w.blocked == lent, f"rank {r}: head counts {w.blocked} lent CPUs, {lent} are"
    # --- store bytes ---
    live = sum(rounded(e.record[3]) for e in objects.entries.values()
               if e.record is not None and e.record[0] == SHM)
    blocks = sum(rounded(s) for p in procs.values() for s in p.blocks.values())
    assert objects.allocators[0].used == live + blocks + \
        sum(rounded(s) for s in unsealed.values())


def node_pool_held(head: Head, node: int) -> collections.Counter:
    """What running tasks and live actors on ``node``'s ranks hold of its pool."""
    used = collections.Counter()
    for task in head.tasks.values():
        if task.placed and task.spec[m.T_ACTOR] is None and \
                head.workers[task.rank].node == node:
            used.update({k: v for k, v in task.resources.items() if k in POOLED})
    for actor in head.actors.values():
        if actor.state in (ActorState.STARTING, ActorState.ALIVE) and \
                head.workers[actor.rank].node == node:
            used.update({k: v for k, v in actor.resources.items() if k in POOLED})
    return used


#: The node's pooled resources the machine asks for: its GPUs, "lic" (2 from
#: init, then whatever set_resource makes it) and "X" (none until set_resource).
POOLED = ("GPU", "lic", "X")
