"""The head as a state machine, driven directly (no MPI) by random event sequences.

Hypothesis plays a driver and a cluster of worker ranks against ``Head``:
submissions with argument refs (some of them failed), puts, releases, task
results, failures, executor crashes with retries, work given back, actors that
are created, called, killed and restarted, and store blocks. After every step
it checks the invariants the rest of the runtime relies on:

- every object is held exactly as often as its holders say (the driver's refs,
  live tasks' arguments, live actors' creation arguments, containing objects),
  and an object whose value is known is freed exactly when nothing holds it;
- a task is in one state, and it is where that state says (ready queue, a
  worker's in-flight count, an actor's queue or in-flight calls);
- the resources held on each rank equal what its running tasks and live actors use;
- a node's custom resources, created, changed and deleted at run time
  (``set_resource``): what is held never exceeds the capacity, except what was
  held when a shrink came (and less as holders end), and ``available_resources()``
  is never negative nor above ``cluster_resources()``;
- the store's used bytes equal the blocks of live objects and of unsealed allocations.

Failing examples found while writing this are kept below as plain regression
tests (``test_regression_*``).
"""
from __future__ import annotations

import collections
import itertools
import pickle

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition,  # noqa: E402
                                 rule)

from hpc_ray.exceptions import (ActorDiedError, HeadError, TaskError,  # noqa: E402
                                UnreconstructableError)
from hpc_ray.runtime import control, scheduler  # noqa: E402
from hpc_ray.runtime.head import ActorState, Head, TaskState  # noqa: E402
from hpc_ray.runtime.store import BLOCK  # noqa: E402
from hpc_ray.transport import messages as m  # noqa: E402
from hpc_ray.transport.serialization import ERROR, RAW, SHM, loads  # noqa: E402

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


def spec(deps=(), returns=1, retries=0, actor=None, contained=(), resources=None,
         fn="f") -> list:
    s = [None] * 13
    s[m.T_ID] = new_id()
    s[m.T_FN] = fn
    s[m.T_BLOB] = b"blob"
    s[m.T_NAME] = fn
    s[m.T_PAYLOAD] = (RAW, ())
    s[m.T_DEPS] = [(i, oid) for i, oid in enumerate(deps)]
    s[m.T_RETURNS] = [new_id() for _ in range(returns)]
    s[m.T_RES] = resources
    s[m.T_RETRIES] = retries
    s[m.T_MAX_CALLS] = 0
    s[m.T_ACTOR] = actor
    s[m.T_OWNER] = 0
    s[m.T_CONTAINED] = list(contained) or None
    return s


def error_record(msg="boom") -> tuple:
    return (ERROR, pickle.dumps(TaskError("f", msg, 1, "host", ValueError(msg))))


def make_head(gpus: int = 0, cpu_ids=None) -> Head:
    head = Head(len(WORKERS) + 1, [0] * (len(WORKERS) + 1), STORE,
                ["host"] * (len(WORKERS) + 1))
    for r in WORKERS:
        head.add_worker(r, {"CPU": 1, "GPU": gpus, "lic": 2}, list(range(gpus)), 1000 + r,
                        cpu_ids)
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
    tiny = collections.Counter(t.rank for t in head.tasks.values() if t.tiny)
    for task in head.tasks.values():
        if task.tiny:
            assert task.placed and task.state is TaskState.RUNNING and \
                task.spec[m.T_ACTOR] is None and scheduler.in_cpu_queue(task.resources), \
                f"task {task.spec[m.T_ID]} counted tiny while {task.state}"
    for r, w in head.workers.items():
        assert w.inflight == inflight[r], f"rank {r}: inflight {w.inflight} != {inflight[r]}"
        assert w.fractions == fractions[r], f"rank {r}: {w.fractions} != {fractions[r]}"
        # Fractions of a CPU are placed only where free, and whole CPUs only where
        # free while fractions run: none is queued beyond the rank's CPUs.
        assert not w.fractions or w.avail["CPU"] > -1e-9, \
            f"rank {r}: {w.fractions} fractions with CPU avail {w.avail['CPU']}"
        assert w.tiny_inflight == tiny[r], \
            f"rank {r}: tiny_inflight {w.tiny_inflight} != {tiny[r]}"
    # A crowded node runs tiny tasks on no more ranks than it has cores (none of
    # the machine's ranks stops making progress: TINY_LIVE_SECONDS is endless there).
    for node, cores in head.crowded_nodes.items():
        busy = sum(w.total["CPU"] for w in head.workers.values()
                   if w.node == node and w.tiny_inflight)
        assert busy <= cores, f"node {node}: tiny tasks on {busy} CPUs of ranks, {cores} cores"
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


class HeadMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # The same ids in every example: the head iterates sets of ids, whose
        # order follows their values, and hypothesis replays an example expecting
        # the same steps (a shared counter made replays "flaky").
        global _ids
        _ids = itertools.count(FIRST_ID)
        # The node's 3 one-CPU ranks share 2 cores: tasks of a function that
        # runs fast ("tiny") go to 2 of them at most (scheduler.concentrate).
        self.head = make_head(gpus=2, cpu_ids=[0, 1])
        self.tiny_settings = scheduler.TINY_LIVE_SECONDS, scheduler.TINY_AFTER
        scheduler.TINY_LIVE_SECONDS = float("inf")
        scheduler.TINY_AFTER = 1   # (tiny from its first end: within a short run)
        self.driver_holds: collections.Counter = collections.Counter()
        self.unsealed: dict[int, int] = {}   # offset -> size, allocated and not sealed
        self.actor_ids: list[int] = []
        #: Actor id -> the calls sent to its current process, in the order sent.
        self.dispatched: collections.defaultdict = collections.defaultdict(list)
        #: Live executor processes by pid, and who asked each request (rank, req).
        self.procs: dict[int, Proc] = {}
        self.asker: dict[tuple, Proc] = {}
        #: Requests of processes that died: the head must never answer them.
        self.dead_reqs: set = set()
        self.pids = itertools.count(5000)
        self.reqs = itertools.count(1)
        #: (node, resource) -> the most held of it while above its capacity:
        #: set by a shrink below what was held, lower as holders end.
        self.over: dict[tuple, float] = {}

    def teardown(self) -> None:
        try:
            self._everything_ends()
        finally:
            scheduler.TINY_LIVE_SECONDS, scheduler.TINY_AFTER = self.tiny_settings

    def _everything_ends(self) -> None:
        """The job ends: every process dies, every actor is killed, every task
        fails, the driver drops its refs. Nothing is left: no object, no byte."""
        head = self.head
        for proc in list(self.procs.values()):
            self._end(proc, crashed=True)
        for actor_id in self.actor_ids:
            head.kill_actor(actor_id)
        with head.lock:
            head.mark_broken("the job ended")
        for oid, n in list(self.driver_holds.items()):
            head.release([oid] * n)
        self.driver_holds.clear()
        self._sent()
        assert head.tasks == {}, f"tasks left: {list(head.tasks)}"
        assert head.remote_gets == {} and head.remote_waits == {}
        assert len(head.objects) == 0, f"objects left: {dict(head.objects.entries)}"
        assert head.allocators[0].used == sum(rounded(s) for s in self.unsealed.values())

    def _held(self) -> list[int]:
        return sorted(self.driver_holds)

    def _running(self, actor_calls: bool) -> list:
        return sorted((t for t in self.head.tasks.values() if t.state is TaskState.RUNNING
                       and (t.spec[m.T_ACTOR] is not None) == actor_calls),
                      key=lambda t: t.spec[m.T_ID])

    # --- driver ---

    @rule(data=st.data(), inline=st.booleans(), contain=st.booleans())
    def put(self, data, inline, contain):
        oid = new_id()
        contained = []
        if contain and self.driver_holds:
            contained = [data.draw(st.sampled_from(self._held()))]
        if inline:
            rec = (RAW, 1)
        else:
            size = data.draw(st.integers(1, 5000))
            off = self.head.alloc(0, size)
            if off is None:
                return
            rec = (SHM, 0, off, size, 0, [])
        self.head.hold([oid])
        self.head.put_object(oid, rec, contained or None)
        self.driver_holds[oid] += 1

    @rule(data=st.data(), ndeps=st.integers(0, 3), retries=st.integers(0, 2),
          returns=st.integers(1, 2), gpu=st.sampled_from([0, 0.5, 0.25, 1, 2]),
          lic=st.integers(0, 3), cpus=st.sampled_from([1, 1, 1, 0, 0.25, 0.5, 2, 3, 4]),
          contain=st.booleans(), fn=st.sampled_from(["f", "tiny"]),
          x=st.sampled_from([0, 0, 1, 2]))
    def submit(self, data, ndeps, retries, returns, gpu, lic, cpus, contain, fn, x):
        held = self._held()
        deps = [data.draw(st.sampled_from(held)) for _ in range(ndeps)] if held else []
        contained = [data.draw(st.sampled_from(held))] if held and contain else []
        resources = None
        # 4 CPUs never fit (the node's 3 ranks have 3): such a task fails at
        # submission. lic=3, or any X, waits until set_resource makes room. 2 or
        # 3 CPUs run on one rank with siblings lending theirs; 0 CPUs, or a
        # fraction, run beside the CPUs (fractions only where free).
        if gpu or lic or cpus != 1 or x:
            resources = {"CPU": cpus, "GPU": gpu, "lic": lic}
            if x:
                resources["X"] = x
        s = spec(deps, returns, retries, contained=contained, resources=resources, fn=fn)
        self.head.submit(s)
        self.driver_holds.update(s[m.T_RETURNS])

    @rule(n=st.integers(1, 12))
    def tiny_burst(self, n):
        # Plain one-CPU tasks of the fast function: enough of them fill the ranks.
        for _ in range(n):
            s = spec(fn="tiny")
            self.head.submit(s)
            self.driver_holds.update(s[m.T_RETURNS])

    @rule(data=st.data())
    @precondition(lambda self: self.driver_holds)
    def release(self, data):
        oid = data.draw(st.sampled_from(self._held()))
        self.driver_holds[oid] -= 1
        if not self.driver_holds[oid]:
            del self.driver_holds[oid]
        self.head.release([oid])

    @rule()
    def schedule(self):
        self.head.schedule()
        self._sent()

    def _sent(self) -> None:
        """Take what the head sent (MPI and direct channels); log actor calls."""
        head = self.head
        for rank, msgs in head.take_outbox().items():
            for msg in msgs:
                if msg[0] == m.EXECUTE and msg[1][m.T_ACTOR] is not None:
                    self.dispatched[msg[1][m.T_ACTOR]].append(msg[1][m.T_ID])
                elif msg[0] == m.REPLY:
                    self._answered(rank, msg)
        direct, head.direct_out = head.direct_out, {}
        for actor_id, msgs in direct.items():
            self.dispatched[actor_id].extend(msg[1][m.T_ID] for msg in msgs)

    # --- workers ---

    @rule(data=st.data(), shm=st.booleans())
    def finish(self, data, shm):
        running = self._running(False) + self._running(True)
        if not running:
            return
        task = data.draw(st.sampled_from(running))
        results = []
        for _ in task.spec[m.T_RETURNS]:
            off = self.head.alloc(0, 100) if shm else None
            results.append((SHM, 0, off, 100, 0, []) if off is not None else (RAW, 7))
        took = 1e-5 if task.spec[m.T_FN] == "tiny" else 1.0
        self.head.task_done(task.rank, task.spec[m.T_ID], results, None, 1.0, 1.0 + took, 5)

    @rule(data=st.data())
    def fail(self, data):
        running = self._running(False) + self._running(True)
        if running:
            task = data.draw(st.sampled_from(running))
            self.head.task_failed(task.rank, task.spec[m.T_ID], error_record(), 1.0, 2.0, 5)

    @rule(data=st.data())
    def crash(self, data):
        running = self._running(False)
        if running:
            task = data.draw(st.sampled_from(running))
            self.head.worker_crashed(task.rank, [task.spec[m.T_ID]], -11, 5, None)

    @rule(data=st.data())
    def give_back(self, data):
        running = self._running(False)
        if running:
            task = data.draw(st.sampled_from(running))
            self.head.tasks_returned(task.rank, [task.spec[m.T_ID]])

    @rule(size=st.integers(1, 3000), seal=st.booleans())
    def alloc_then_die_or_seal(self, size, seal):
        # A process allocates a block; either it seals it in a put, or it dies
        # first and its rank hands the block back (FREE_BLOCKS).
        off = self.head.alloc(0, size)
        if off is None:
            return
        if seal:
            oid = new_id()
            self.head.hold([oid])
            self.head.put_object(oid, (SHM, 0, off, size, 0, []), None)
            self.driver_holds[oid] += 1
        else:
            self.head.free_blocks(1, [(off, size)])


    # --- executor processes: what they hold, put, submit, ask and lend; their deaths ---

    def _answered(self, rank: int, msg: tuple) -> None:
        key = (rank, msg[1])
        assert key not in self.dead_reqs, f"the head answered {key} of a dead process"
        proc = self.asker.pop(key, None)
        if proc is None:
            return
        kind = proc.reqs.pop(msg[1], None)
        if kind == "get":
            for rec in msg[2]:
                assert rec[0] != ERROR or not isinstance(loads(rec[1]), HEAD_FAULTS), \
                    f"a get of a held object was answered with {loads(rec[1])!r}"

    def _proc(self, data) -> Proc:
        return self.procs[data.draw(st.sampled_from(sorted(self.procs)))]

    @rule(rank=st.sampled_from(WORKERS))
    def process_starts(self, rank):
        if len(self.procs) < 4:
            pid = next(self.pids)
            self.procs[pid] = Proc(rank, pid)

    @rule(data=st.data())
    @precondition(lambda self: self.procs and self.driver_holds)
    def process_gets_a_ref(self, data):
        # A ref arrives inside a task's argument or result: HOLD.
        proc = self._proc(data)
        oid = data.draw(st.sampled_from(self._held()))
        self.head.hold([oid])
        proc.holds[oid] += 1

    @rule(data=st.data(), shm=st.booleans())
    @precondition(lambda self: self.procs)
    def process_puts(self, data, shm):
        proc = self._proc(data)
        oid = new_id()
        rec = (RAW, 1)
        if shm:
            off = self.head.alloc(0, 700)
            if off is None:
                return
            rec = (SHM, 0, off, 700, 0, [])
        self.head.hold([oid])
        self.head.put_object(oid, rec, None)
        proc.holds[oid] += 1

    @rule(data=st.data())
    @precondition(lambda self: self.procs)
    def process_allocates(self, data):
        # ALLOC answered; the PUT that seals it has not come (or never will).
        proc = self._proc(data)
        off = self.head.alloc(0, 900)
        if off is not None:
            proc.blocks[off] = 900

    @rule(data=st.data())
    @precondition(lambda self: any(p.blocks for p in self.procs.values()))
    def process_seals(self, data):
        proc = data.draw(st.sampled_from([p for _, p in sorted(self.procs.items())
                                          if p.blocks]))
        off = data.draw(st.sampled_from(sorted(proc.blocks)))
        size = proc.blocks.pop(off)
        oid = new_id()
        self.head.hold([oid])
        self.head.put_object(oid, (SHM, 0, off, size, 0, []), None)
        proc.holds[oid] += 1

    @rule(data=st.data())
    @precondition(lambda self: any(p.holds for p in self.procs.values()))
    def process_releases(self, data):
        proc = data.draw(st.sampled_from([p for _, p in sorted(self.procs.items())
                                          if p.holds]))
        oid = data.draw(st.sampled_from(sorted(proc.holds)))
        proc.holds[oid] -= 1
        if not proc.holds[oid]:
            del proc.holds[oid]
        self.head.release([oid])

    @rule(data=st.data(), ndeps=st.integers(0, 2), fn=st.sampled_from(["f", "tiny"]))
    @precondition(lambda self: self.procs)
    def process_submits(self, data, ndeps, fn):
        # A nested task: its returns are held by the process that submitted it.
        proc = self._proc(data)
        held = sorted(proc.holds)
        deps = [data.draw(st.sampled_from(held)) for _ in range(ndeps)] if held else []
        s = spec(deps, fn=fn)
        self.head.submit(s)
        proc.holds.update(s[m.T_RETURNS])

    @rule(data=st.data(), lend=st.booleans(), wait=st.booleans())
    @precondition(lambda self: any(p.holds for p in self.procs.values()))
    def process_waits(self, data, lend, wait):
        # get() or wait() inside a task, of refs it holds (ready or not); a task's
        # get lends its CPU (BLOCKED) while it waits.
        proc = data.draw(st.sampled_from([p for _, p in sorted(self.procs.items())
                                          if p.holds]))
        held = sorted(proc.holds)
        oids = data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=3))
        req = next(self.reqs)
        self.asker[(proc.rank, req)] = proc
        proc.reqs[req] = "wait" if wait else "get"
        if lend:
            self.head.blocked(proc.rank, 1)
            proc.lent += 1
        if wait:
            self.head.remote_wait(proc.rank, req, oids, data.draw(st.integers(1, len(oids))))
        else:
            self.head.remote_get(proc.rank, req, oids)
        self._sent()

    @rule(data=st.data())
    @precondition(lambda self: any("wait" in p.reqs.values() for p in self.procs.values()))
    def process_wait_times_out(self, data):
        proc = data.draw(st.sampled_from([p for _, p in sorted(self.procs.items())
                                          if "wait" in p.reqs.values()]))
        req = data.draw(st.sampled_from(sorted(r for r, k in proc.reqs.items() if k == "wait")))
        self.head.remote_wait_now(proc.rank, req)
        self._sent()

    @rule(data=st.data())
    @precondition(lambda self: any(p.lent for p in self.procs.values()))
    def process_unblocks(self, data):
        proc = data.draw(st.sampled_from([p for _, p in sorted(self.procs.items()) if p.lent]))
        self.head.blocked(proc.rank, -1)
        proc.lent -= 1

    @rule(data=st.data(), crashed=st.booleans(), with_task=st.booleans())
    @precondition(lambda self: self.procs)
    def process_dies(self, data, crashed, with_task):
        # Killed at any point: while it holds refs, waits, lends, runs a task.
        proc = self._proc(data)
        tids = []
        if crashed and with_task:
            mine = [t for t in self._running(False) if t.rank == proc.rank]
            if mine:
                tids = [data.draw(st.sampled_from(mine)).spec[m.T_ID]]
        self._end(proc, crashed, tids)

    def _end(self, proc: Proc, crashed: bool, tids=()) -> None:
        self._sent()      # (answers sent before it died may still reach its rank)
        del self.procs[proc.pid]
        holds = [oid for oid, n in proc.holds.items() for _ in range(n)]
        reqs = sorted(proc.reqs)
        for req in reqs:
            self.asker.pop((proc.rank, req), None)
            self.dead_reqs.add((proc.rank, req))
        self.head.process_ended(proc.rank, proc.pid, holds, list(proc.blocks.items()), reqs,
                                proc.lent, tids, -9 if crashed else None, None)
        self._sent()

    # --- actors ---

    @rule(data=st.data(), restarts=st.integers(0, 2), gpu=st.sampled_from([0, 0.5, 1]),
          task_retries=st.integers(0, 1))
    def create_actor(self, data, restarts, gpu, task_retries):
        held = self._held()
        deps = [data.draw(st.sampled_from(held))] if held and data.draw(st.booleans()) else []
        actor_id = new_id()
        s = spec(deps, actor=actor_id, fn="A")
        resources = {"GPU": gpu} if gpu else {}
        if data.draw(st.booleans()):
            resources["lic"] = 1
        if data.draw(st.booleans()):
            resources["X"] = 1
        if data.draw(st.booleans()):
            resources["CPU"] = data.draw(st.sampled_from([1, 2]))
        self.head.create_actor(s, resources, restarts, None, "A", task_retries)
        self.actor_ids.append(actor_id)

    @rule(data=st.data())
    @precondition(lambda self: self.actor_ids)
    def actor_ready(self, data):
        actor_id = data.draw(st.sampled_from(self.actor_ids))
        self.head.actor_ready(actor_id, 77)
        actor = self.head.actors.get(actor_id)
        if actor is not None and actor.pid and data.draw(st.booleans()):
            # On the driver's host: its process opens a direct channel at once.
            self.head.direct_pids[actor_id] = actor.pid
        self._sent()

    @rule(data=st.data(), ndeps=st.integers(0, 2), caller=st.sampled_from(CALLERS))
    @precondition(lambda self: self.actor_ids)
    def call(self, data, ndeps, caller):
        actor_id = data.draw(st.sampled_from(self.actor_ids))
        held = self._held()
        deps = [data.draw(st.sampled_from(held)) for _ in range(ndeps)] if held else []
        s = spec(deps, actor=actor_id, fn="A.m", retries=data.draw(st.integers(0, 1)))
        # The caller's number in the id's high bits (context.set_id_prefix): the
        # driver's is 0, a task's is its rank and executor serial.
        s[m.T_ID] |= caller << CALLER_SHIFT
        self.head.submit(s)
        self.driver_holds.update(s[m.T_RETURNS])

    @rule(data=st.data())
    @precondition(lambda self: self.actor_ids)
    def channel_opens(self, data):
        # DIRECT_HELLO from the actor's process (HeadLoop._channels_changed).
        actor = self.head.actors.get(data.draw(st.sampled_from(self.actor_ids)))
        if actor is not None and actor.pid:
            self.head.direct_pids[actor.actor_id] = actor.pid

    @rule(data=st.data())
    @precondition(lambda self: self.head.direct_pids)
    def channel_closes(self, data):
        actor_id = data.draw(st.sampled_from(sorted(self.head.direct_pids)))
        del self.head.direct_pids[actor_id]

    @rule(data=st.data())
    @precondition(lambda self: self.actor_ids)
    def fence(self, data):
        # A group created on an actor's rank: the next call must not overtake it.
        actor = self.head.actors.get(data.draw(st.sampled_from(self.actor_ids)))
        if actor is not None and actor.rank > 0:
            self.head.send(actor.rank, (m.GROUP_CREATE, "g", [0], [actor.actor_id]))

    @rule(data=st.data(), restart=st.booleans())
    @precondition(lambda self: self.actor_ids)
    def actor_process_died(self, data, restart):
        actor_id = data.draw(st.sampled_from(self.actor_ids))
        self.head.actor_died(actor_id, "its process died", allow_restart=restart)
        self.head.direct_pids.pop(actor_id, None)   # its channel closed with it
        self.dispatched.pop(actor_id, None)         # a new process starts afresh

    @rule(data=st.data())
    @precondition(lambda self: self.actor_ids)
    def kill(self, data):
        actor_id = data.draw(st.sampled_from(self.actor_ids))
        self.head.kill_actor(actor_id)
        self._sent()

    # --- resources at run time ---

    @rule(name=st.sampled_from(["lic", "X"]), capacity=st.integers(0, 3))
    def set_resource(self, name, capacity):
        # experimental.set_resource on the node (0 deletes the resource).
        self.head.set_resource(0, name, capacity)
        held = node_pool_held(self.head, 0).get(name, 0)
        if held > capacity:
            self.over[(0, name)] = held
        else:
            self.over.pop((0, name), None)

    @invariant()
    def held_within_capacity_except_after_a_shrink(self):
        head = self.head
        for node, pool in head.pools.items():
            held = node_pool_held(head, node)
            for name in ("lic", "X"):
                have, cap = held.get(name, 0), pool.total.get(name, 0)
                key = (node, name)
                if have <= cap + 1e-9:
                    self.over.pop(key, None)
                    continue
                assert key in self.over and have <= self.over[key] + 1e-9, \
                    f"node {node} {name}: {have} held of {cap}, more than at the shrink " \
                    f"({self.over.get(key)})"
                self.over[key] = have
        total = control._cluster_resources(head)
        for k, v in control._available_resources(head).items():
            assert 0 < v <= total.get(k, 0) + 1e-9, (k, v, total)

    @invariant()
    def consistent(self):
        check_invariants(self.head, self.driver_holds, self.unsealed, self.procs)

    @invariant()
    def no_answer_to_a_dead_process(self):
        for rank, msgs in self.head.outbox.items():
            for msg in msgs:
                if msg[0] == m.REPLY:
                    assert (rank, msg[1]) not in self.dead_reqs, \
                        f"the head answers request {msg[1]} of a dead process on rank {rank}"

    @invariant()
    def calls_take_one_path_in_order(self):
        for actor in self.head.actors.values():
            # Never both paths at once: the actor's process would see the calls
            # of the two in any order.
            assert not (actor.direct and actor.via_rank), \
                f"actor {actor.actor_id}: calls in flight on both paths"
            assert actor.direct | actor.via_rank == set(actor.inflight), \
                f"actor {actor.actor_id}: in-flight calls on no path or a finished one"
        for actor_id, tids in self.dispatched.items():
            # Each caller's calls went out in the order it made them (ids rise).
            for caller in CALLERS:
                mine = [t for t in tids if t >> CALLER_SHIFT == caller]
                assert mine == sorted(mine), f"caller {caller}'s calls out of order: {mine}"


HeadMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                         deadline=None,
                                         suppress_health_check=list(HealthCheck))
# A task or actor that asks for more "lic" or "X" than the node has waits for
# set_resource, with this warning.
test_head_state_machine = pytest.mark.filterwarnings(
    "ignore:.*stays pending until it fits")(HeadMachine.TestCase)


# --- regressions: the failures this suite (and the issue) found, as plain tests ---------

def test_regression_failed_dependency_does_not_free_a_held_argument():
    # add.remote(failed_ref, held_ref): the head used to stop counting at the first
    # failed argument, then release both, freeing held_ref under the driver.
    head = make_head()
    off = head.alloc(0, 1000)
    head.hold([1])
    head.put_object(1, error_record(), None)
    head.hold([2])
    head.put_object(2, (SHM, 0, off, 1000, 0, []), None)
    s = spec([1, 2])
    head.submit(s)
    assert isinstance(loads(head.objects[s[m.T_RETURNS][0]].record[1]), TaskError)
    assert head.objects[2].refs == 1 and head.objects[2].record[2] == off
    assert head.allocators[0].used == rounded(1000)    # the block is still taken
    check_invariants(head, collections.Counter({1: 1, 2: 1, s[m.T_RETURNS][0]: 1}), {})


def test_regression_actor_death_fails_queued_calls_once():
    head = make_head()
    head.hold([1])
    head.put_object(1, error_record(), None)
    head.hold([2])
    head.put_object(2, (RAW, 2), None)
    create = spec(actor=900, fn="A")
    head.create_actor(create, {}, 0, None, "A")
    calls = [spec([1, 2], actor=900, fn="A.m") for _ in range(3)]
    for c in calls:
        head.submit(c)                 # each fails at once on its failed argument
    head.actor_died(900, "segfault", allow_restart=False)
    holders = collections.Counter({1: 1, 2: 1})
    for c in calls:
        holders[c[m.T_RETURNS][0]] += 1
    check_invariants(head, holders, {})
    assert head.objects[2].refs == 1


@pytest.mark.parametrize("restarts", [0, 1])
def test_regression_calls_made_ready_by_a_lost_call_are_not_sent_to_the_dead_process(restarts):
    # Found by the machine above: f running, g(f's result) and then h queued
    # behind it, when the actor is killed (or dies). Failing f's call failed g,
    # which let h go, to the process being taken down: h stayed RUNNING after
    # the actor was gone, and a get of its result waited forever.
    head = make_head()
    head.create_actor(spec(actor=900, fn="A"), {}, restarts, None, "A")
    head.actor_ready(900, 77)
    f = spec(actor=900, fn="A.f")
    head.submit(f)
    g = spec([f[m.T_RETURNS][0]], actor=900, fn="A.g")
    head.submit(g)
    h = spec(actor=900, fn="A.h")
    head.submit(h)
    assert head.tasks[f[m.T_ID]].state is TaskState.RUNNING
    assert head.tasks[h[m.T_ID]].state is TaskState.PENDING   # behind g, in order
    if restarts:
        head.actor_died(900, "segfault", allow_restart=True)
    else:
        head.kill_actor(900)
    holders = collections.Counter(c[m.T_RETURNS][0] for c in (f, g, h))
    check_invariants(head, holders, {})
    for c in (f, g):
        assert isinstance(loads(head.objects[c[m.T_RETURNS][0]].record[1]), ActorDiedError)
    if restarts:
        # h waits for the new process.
        assert head.tasks[h[m.T_ID]].state is TaskState.PENDING
        head.actor_ready(900, 78)
        assert head.tasks[h[m.T_ID]].state is TaskState.RUNNING
        assert h[m.T_ID] in head.actors[900].inflight
    else:
        assert isinstance(loads(head.objects[h[m.T_RETURNS][0]].record[1]), ActorDiedError)
        assert head.tasks == {}


def test_regression_a_long_chain_of_contained_refs_is_released_without_recursion():
    head = make_head()
    prev = None
    for oid in range(1, 100_001):
        head.hold([oid])
        head.put_object(oid, (RAW, oid), [prev] if prev else None)
        if prev:
            head.release([prev])
        prev = oid
    head.release([prev])
    assert len(head.objects) == 0


def test_regression_dead_actors_leave_no_live_entry():
    head = make_head()
    for i in range(1000):
        actor_id = 10_000 + i
        head.create_actor(spec(actor=actor_id, fn="A"), {}, 0, f"a{i}", "A")
        head.actor_ready(actor_id, 1)
        head.kill_actor(actor_id)
    assert head.actors == {} and head.named_actors == {}
    late = spec(actor=10_000, fn="A.m")
    head.submit(late)
    err = loads(head.objects[late[m.T_RETURNS][0]].record[1])
    assert isinstance(err, ActorDiedError) and "killed" in str(err)


def test_regression_actor_restart_requeues_lost_calls_in_order():
    head = make_head()
    head.create_actor(spec(actor=7, fn="A"), {}, 1, None, "A", 1)
    head.actor_ready(7, 1)
    calls = [spec(actor=7, fn="A.m") for _ in range(3)]
    for c in calls:
        head.submit(c)
    head.take_outbox()
    head.actor_died(7, "crash", allow_restart=True)
    head.actor_ready(7, 2)
    sent = [msg[1][m.T_ID] for msgs in head.take_outbox().values() for msg in msgs
            if msg[0] == m.EXECUTE]
    assert sent == [c[m.T_ID] for c in calls]


def test_regression_a_crash_report_for_an_actor_without_a_process_is_ignored():
    # Hypothesis: create an actor whose argument is not ready (PENDING), then a
    # crash report for it arrived; the head tried PENDING -> RESTARTING.
    head = make_head()
    head.submit(spec())
    pending_arg = max(head.objects.entries)
    head.create_actor(spec([pending_arg], actor=31, fn="A"), {}, 1, None, "A")
    head.actor_died(31, "its process died", allow_restart=True)
    assert head.actors[31].state is ActorState.PENDING


def test_regression_an_actor_waiting_for_room_is_placed_when_room_appears():
    # Helper report: an actor created while another held the last CPU, whose
    # holder then ended, stayed PENDING forever (it was never put on the retry list).
    head = Head(2, [0, 0], STORE, ["h", "h"])
    head.add_worker(1, {"CPU": 1}, [], 1)
    head.create_actor(spec(actor=61, fn="A"), {"CPU": 1}, 0, None, "A")
    head.actor_ready(61, 1)
    head.create_actor(spec(actor=62, fn="A"), {"CPU": 1}, 0, None, "A")
    assert head.actors[62].state is ActorState.PENDING
    head.actor_died(61, "terminated by __ray_terminate__", allow_restart=False)
    assert head.actors[62].state is ActorState.STARTING


def test_regression_an_actors_calls_never_take_both_paths_at_once():
    # A fence (a group created on the actor's rank) sends the next call through
    # the rank; a call on the other path waits until the first path is empty,
    # whoever the caller: else the actor's process could run them out of order.
    head = make_head()
    head.create_actor(spec(actor=71, fn="A"), {}, 0, None, "A")
    head.schedule()
    head.actor_ready(71, 77)
    head.direct_pids[71] = 77
    actor = head.actors[71]
    task_caller = CALLERS[1] << CALLER_SHIFT

    def call(caller=0):
        s = spec(actor=71, fn="A.m")
        s[m.T_ID] |= caller
        head.submit(s)
        return s[m.T_ID]

    def sent():
        rank = [msg[1][m.T_ID] for msgs in head.take_outbox().values() for msg in msgs
                if msg[0] == m.EXECUTE]
        direct, head.direct_out = head.direct_out, {}
        return rank, [msg[1][m.T_ID] for msgs in direct.values() for msg in msgs]

    first = call()
    assert sent() == ([], [first])
    head.send(actor.rank, (m.GROUP_CREATE, "g", [0], [71]))
    second = call(task_caller)
    assert sent() == ([], [])                 # the fenced call waits for the channel
    head.task_done(actor.rank, first, [(RAW, 1)], None, 1.0, 2.0, 5)
    assert sent() == ([second], [])           # then goes through the rank
    third = call()
    assert sent() == ([third], [])            # the rank path is in use: it stays on it
    assert not (actor.direct and actor.via_rank)
    head.task_done(actor.rank, second, [(RAW, 1)], None, 1.0, 2.0, 5)
    head.task_done(actor.rank, third, [(RAW, 1)], None, 1.0, 2.0, 5)
    fourth = call(task_caller)
    assert sent() == ([], [fourth])           # back on the channel once it is empty


def test_scheduling_pass_costs_what_it_places(monkeypatch):
    # 20,000 queued tasks, 3 one-CPU workers already full: a pass looks at each
    # worker once per resource shape, not at the whole backlog.
    head = make_head()
    for _ in range(20_000):
        head.submit(spec())
    head.schedule()
    head.take_outbox()
    import hpc_ray.runtime.scheduler as scheduler
    calls = []
    real = scheduler.capacity_ok

    def counting(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(scheduler, "capacity_ok", counting)
    for _ in range(100):
        head.schedule()
    assert len(calls) <= 100 * len(WORKERS)
    assert head.ready.count == 20_000 - sum(w.inflight for w in head.workers.values())


def test_a_burst_is_spread_over_the_workers_with_room():
    head = make_head()
    for _ in range(30):
        head.submit(spec())
    head.schedule()
    sent = [rank for rank, msgs in head.take_outbox().items() for msg in msgs
            if msg[0] == m.EXECUTE]
    per_rank = [sent.count(r) for r in WORKERS]
    assert min(per_rank) > 0 and max(per_rank) - min(per_rank) <= 1, per_rank


def test_history_is_bounded_by_its_budget():
    head = Head(2, [0, 0], STORE, ["h", "h"], history_bytes=1 << 20)
    head.add_worker(1, {"CPU": 1}, [], 1)
    for _ in range(20_000):
        s = spec()
        head.submit(s)
        head.schedule()
        head.take_outbox()
        head.task_done(1, s[m.T_ID], [(RAW, 1)], None, 1.0, 2.0, 3)
        head.release(s[m.T_RETURNS])
    assert head.history.tasks.bytes <= (1 << 20) // 2
    assert head.history.tasks.dropped > 0
    assert len(head.tasks) == 0 and len(head.objects) == 0


def test_actor_calls_are_ordered_per_caller_and_callers_take_turns(monkeypatch):
    # A task floods an actor with calls; the driver's one call must not wait
    # behind all of them: callers are served in turn once the actor has room.
    import hpc_ray.runtime.head.actors as head_actors
    monkeypatch.setattr(head_actors, "MAX_ACTOR_INFLIGHT", 1024)
    head = make_head()
    head.create_actor(spec(actor=50, fn="A"), {}, 0, None, "A")
    head.actor_ready(50, 1)
    head.take_outbox()
    flood = []
    for _ in range(3000):
        s = spec(actor=50, fn="A.inc")
        s[m.T_ID] |= 7 << 40                    # submitted by another process
        head.submit(s)
        flood.append(s)
    first = [msg[1][m.T_ID] for msgs in head.take_outbox().values() for msg in msgs
             if msg[0] == m.EXECUTE]
    assert first == [s[m.T_ID] for s in flood[:len(first)]]   # in order, bounded
    mine = spec(actor=50, fn="A.get")
    head.submit(mine)
    for tid in first[:len(first) // 2 + 1]:     # half of the sent calls finish
        head.task_done(1, tid, [(RAW, None)], None, 0.0, 1.0, 1)
    sent = [msg[1][m.T_ID] for msgs in head.take_outbox().values() for msg in msgs
            if msg[0] == m.EXECUTE]
    assert len(first) < len(flood)
    assert mine[m.T_ID] in sent[:2], "the driver's call waited behind the flood"


def test_a_caller_with_too_many_queued_calls_is_throttled_until_they_drain(monkeypatch):
    # A task looping on actor.inc.remote(): once it has CALLER_QUEUE_HIGH calls
    # queued at the head, its rank is told to stop reading it; it is read again
    # once they are down to CALLER_QUEUE_LOW, or at once when the actor dies.
    import hpc_ray.runtime.head.actors as head_actors
    monkeypatch.setattr(head_actors, "MAX_ACTOR_INFLIGHT", 16)
    monkeypatch.setattr(head_actors, "CALLER_QUEUE_HIGH", 100)
    monkeypatch.setattr(head_actors, "CALLER_QUEUE_LOW", 10)
    head = make_head()
    for actor_id in (50, 51):
        head.create_actor(spec(actor=actor_id, fn="A"), {}, 0, None, "A")
        head.actor_ready(actor_id, 1)
    head.take_outbox()
    caller = (2 << 20) | 5                      # rank 2's executor with serial 5

    def throttles():
        return [msg for msgs in head.take_outbox().values() for msg in msgs
                if msg[0] == m.THROTTLE]

    def flood(actor_id, n):
        calls = []
        for _ in range(n):
            s = spec(actor=actor_id, fn="A.inc")
            s[m.T_ID] |= caller << 40
            head.submit(s)
            calls.append(s)
        return calls

    calls = flood(50, 100 + 16)
    assert throttles() == [(m.THROTTLE, 5, True)]
    flood(51, 100 + 16)                         # over at a second actor: no second message
    assert throttles() == []
    for s in calls[:100 + 16 - 10]:             # actor 50 runs its calls
        head.task_done(1, s[m.T_ID], [(RAW, None)], None, 0.0, 1.0, 1)
    assert throttles() == []                    # still too many at actor 51
    head.actor_died(51, "its process was killed", False)   # its queue is dropped
    assert throttles() == [(m.THROTTLE, 5, False)]
    assert head.throttled == {}


def test_direct_call_reports_are_read_before_tasks_and_at_most_some_held():
    from hpc_ray.runtime import control
    from hpc_ray.runtime.head import DIRECT_REPORTS_HELD

    head = make_head()

    def report(tid):
        return pickle.dumps([(tid, "A.f", "FINISHED", 1, 1, (tid + 1,), 1.0, 2.0, 3.0, 9)])

    head.direct_report(report(1000))
    assert len(head.history.tasks) == 0                 # held, not read yet
    assert f"{1000:032x}" in control._tasks(head)       # tasks() reads it first
    assert [ev[5] for ev in control._timeline(head)] == [1000]
    for i in range(DIRECT_REPORTS_HELD):
        head.direct_report(report(2000 + 2 * i))
    # A head that never had a quiet moment holds no more than that many.
    assert len(head.direct_reports) < DIRECT_REPORTS_HELD
    assert len(head.history.tasks) == 1 + DIRECT_REPORTS_HELD - len(head.direct_reports)


def _running_task(head: Head) -> tuple[list, int]:
    """A task placed and running on a worker, and the id of its pending result."""
    task = spec()
    head.submit(task)
    head.schedule()
    head.take_outbox()
    return task, task[m.T_RETURNS][0]


def test_regression_a_get_of_a_process_killed_while_it_waits_is_never_answered():
    # Issue 33: a task put a value, then waited in get() for it and for a ref
    # still running elsewhere, and was killed. Its death freed the value; when
    # the other ref's task finished, the head answered the dead get and read
    # the freed id (KeyError in record_for), and the head failed for good.
    head = make_head()
    slow, pending = _running_task(head)
    mine = new_id()
    off = head.alloc(0, 1000)
    head.hold([mine])
    head.put_object(mine, (SHM, 0, off, 1000, 0, []), None)   # held by the process only
    head.hold([pending])                                      # the task's argument
    head.blocked(2, 1)
    head.remote_get(2, 41, [mine, pending])
    head.process_ended(2, 5001, [mine, pending], [], [41], 1, [], -9, None)
    assert mine not in head.objects and head.allocators[0].used == 0
    assert head.remote_gets == {} and head.workers[2].blocked == 0
    head.task_done(head.tasks[slow[m.T_ID]].rank, slow[m.T_ID], [(RAW, 3.0)], None,
                   0.0, 3.0, 7)
    assert [msg for msgs in head.take_outbox().values() for msg in msgs
            if msg[0] == m.REPLY] == []
    assert head.objects[pending].record == (RAW, 3.0)         # the driver still gets it
    check_invariants(head, collections.Counter({pending: 1}), {})


def test_regression_a_wait_that_timed_out_leaves_no_waiter_behind():
    # A task polling ray.wait([ref], timeout=0) on a long task: each answered
    # wait stayed among the pending object's waiters (found by the machine as
    # "object waits for gone wait"), one more per call, until the task ended.
    head = make_head()
    _, pending = _running_task(head)
    head.hold([pending])
    for req in range(1, 101):
        head.remote_wait(2, req, [pending], 1)
        head.remote_wait_now(2, req)
    assert head.remote_waits == {} and head.objects[pending].waiters == []
    replies = [msg for msgs in head.take_outbox().values() for msg in msgs
               if msg[0] == m.REPLY]
    assert [r[2] for r in replies] == [[]] * 100        # each answered: nothing ready


def test_a_handler_that_raises_fails_the_task_it_concerns_and_the_head_goes_on():
    from hpc_ray.exceptions import HeadError

    head = make_head()
    s = spec()
    head.submit(s)
    head.schedule()
    head.take_outbox()
    head.handler_failed(1, (m.TASK_DONE, s[m.T_ID], [(RAW, 1)], None, 0.0, 1.0, 5),
                        "Traceback: KeyError")
    err = loads(head.objects[s[m.T_RETURNS][0]].record[1])
    assert isinstance(err, HeadError) and "TASK_DONE message from rank 1" in str(err)
    head.handler_failed(2, (m.GET, 9, [s[m.T_RETURNS][0], 12345]), "Traceback: bug")
    (reply,) = [msg for msgs in head.take_outbox().values() for msg in msgs]
    assert reply[:2] == (m.REPLY, 9) and all(r[0] == ERROR for r in reply[2])
    later = spec()
    head.submit(later)                  # and the head takes more work
    head.schedule()
    assert head.tasks[later[m.T_ID]].state is TaskState.RUNNING
    check_invariants(head, collections.Counter([s[m.T_RETURNS][0], later[m.T_RETURNS][0]]),
                     {})
