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

Failing examples found while writing this are kept as plain regression
tests in ``test_head_regressions.py``.
"""
from __future__ import annotations

import collections
import itertools

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition,  # noqa: E402
                                 rule)

from hpc_ray.runtime import control  # noqa: E402
from hpc_ray.runtime.head import TaskState  # noqa: E402
from hpc_ray.transport import messages as m  # noqa: E402
from hpc_ray.transport.serialization import ERROR, RAW, SHM, loads  # noqa: E402

from head_machine_support import (  # noqa: E402
    CALLER_SHIFT, CALLERS, HEAD_FAULTS, WORKERS, Proc, check_invariants, error_record,
    make_head, new_id, node_pool_held, reset_ids, rounded, spec)


class HeadMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # The same ids in every example: the head iterates sets of ids, whose
        # order follows their values, and hypothesis replays an example expecting
        # the same steps (a shared counter made replays "flaky").
        reset_ids()
        self.head = make_head(gpus=2)
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
        self._everything_ends()

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
        # Plain one-CPU tasks of a fast function: enough of them fill the ranks.
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
        """Take what the head sent; log actor calls."""
        head = self.head
        for rank, msgs in head.take_outbox().items():
            for msg in msgs:
                if msg[0] == m.EXECUTE and msg[1][m.T_ACTOR] is not None:
                    self.dispatched[msg[1][m.T_ACTOR]].append(msg[1][m.T_ID])
                elif msg[0] == m.REPLY:
                    self._answered(rank, msg)

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
        s = spec(deps, actor=actor_id, fn="A", retries=task_retries)
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
        self._sent()

    @rule(data=st.data(), ndeps=st.integers(0, 2), caller=st.sampled_from(CALLERS))
    @precondition(lambda self: self.actor_ids)
    def call(self, data, ndeps, caller):
        actor_id = data.draw(st.sampled_from(self.actor_ids))
        held = self._held()
        deps = [data.draw(st.sampled_from(held)) for _ in range(ndeps)] if held else []
        s = spec(deps, actor=actor_id, fn="A.m",
                 retries=data.draw(st.sampled_from([None, 0, 1])))
        # The caller's number in the id's high bits (context.set_id_prefix): the
        # driver's is 0, a task's is its rank and executor serial.
        s[m.T_ID] |= caller << CALLER_SHIFT
        self.head.submit(s)
        self.driver_holds.update(s[m.T_RETURNS])

    @rule(data=st.data(), restart=st.booleans())
    @precondition(lambda self: self.actor_ids)
    def actor_process_died(self, data, restart):
        actor_id = data.draw(st.sampled_from(self.actor_ids))
        self.head.actor_died(actor_id, "its process died", allow_restart=restart)
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
    def each_callers_calls_go_in_order(self):
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
