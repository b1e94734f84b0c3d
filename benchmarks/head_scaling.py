"""The head against a simulated fleet of worker ranks: cost per task and memory.

The head (``hpc_ray.runtime.head.Head``) has no MPI and no threads, so it can be
driven directly with synthetic messages, as the comm thread of rank 0 would:

    driver: submit(spec) x SUBMIT_BATCH, schedule()            (drain_refs)
    fleet:  one round = one HeadLoop.poll_once():
              up to RECV_LIMIT rank batches, each 1..per_msg TASK_DONEs (task_done)
              RETURNED answers to STEAL (tasks_returned)
              the driver's releases of the finished tasks' refs (release)
              schedule(); take_outbox()  -> EXECUTE/STEAL per rank, delivered (not timed)

Only the calls into the head are timed, in CPU time (``time.process_time`` around
each round's block of head calls, so other jobs on a shared machine do not
inflate it; the simulated ranks' bookkeeping is outside). GC pauses inside those
calls are counted separately (``gc.callbacks``). No process
is started: 1,024 "ranks" are 1,024 deques.

Scenarios:

- ``burst``: ``--tasks`` tiny tasks submitted at once (in batches of 256 with a
  scheduling pass each, as the driver does), then the fleet works them off; every
  rank reports ``--per-msg`` results per message, RECV_LIMIT ranks per round.
- ``steady``: the driver keeps ``--window`` tasks in flight (fewer than there are
  ranks at 256 and 1,024): each round it submits as many as finished and
  releases them. Most ranks are idle, as in a latency-bound program.

Usage::

    python benchmarks/head_scaling.py                      # 8, 64, 256, 1024 ranks, both scenarios
    python benchmarks/head_scaling.py --ranks 8,1024 --tasks 20000
    python benchmarks/head_scaling.py --memory             # + tracemalloc peak / RSS (slower)
    python benchmarks/head_scaling.py --profile 1024 --scenario burst   # cProfile, top functions
    python benchmarks/head_scaling.py --save               # write benchmarks/results/head-scaling-<date>.md/.json

Each configuration runs in its own child process (``--one``), so RSS growth of
one does not leak into the next.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where hpc_ray is imported from: this checkout, or a pinned copy (``--src``, e.g.
#: ``git archive HEAD hpc_ray | tar -x -C DIR``) while others edit the head.
SRC = os.environ.get("HEAD_SCALING_SRC") or str(ROOT)
sys.path.insert(0, SRC)

#: Batches one HeadLoop.poll_once() receives at most (transport.comm.recv_control).
RECV_LIMIT = 64
#: Specs the driver hands to the head per drain_refs() (runtime.headloop.SUBMIT_BATCH).
SUBMIT_BATCH = 256
#: Synthetic task duration reported in TASK_DONE (t1 - t0): sets the head's prefetch depth.
TASK_SECONDS = 1e-4
#: Ranks per simulated node (each node has one store allocator in the head).
RANKS_PER_NODE = 64
#: True while a call into the head is being timed: GC pauses are counted then only.
IN_HEAD = [False]


# --- the simulation ---------------------------------------------------------------

class Fleet:
    """N worker ranks as queues of (task id, return ids), and the head they talk to."""

    def __init__(self, n_workers: int, ranks_per_node: int = RANKS_PER_NODE,
                 per_msg: int = 1) -> None:
        from hpc_ray.runtime.head import Head
        from hpc_ray.transport import messages as m
        self.m = m
        world = n_workers + 1
        node_of = [r // ranks_per_node for r in range(world)]
        self.head = Head(world, node_of, 1 << 30, [f"node{n}" for n in node_of])
        for r in range(1, world):
            self.head.add_worker(r, {"CPU": 1, "GPU": 0}, [], 1000 + r)
        self.queues = [collections.deque() for _ in range(world)]
        self.ring: collections.deque = collections.deque()   # ranks with queued work
        self.in_ring = [False] * world
        self.steals: list = []                                # (rank, n) asked back
        self.per_msg = per_msg
        self.head_seconds = 0.0
        self.rounds = 0
        self.done = 0
        self.executes = 0                                     # EXECUTEs sent (re-sends included)
        self.steal_msgs = 0                                   # STEALs sent
        self.clock = 1.0
        self._fn_sent = False

    def spec(self) -> list:
        from hpc_ray.runtime.taskspec import build_spec
        blob = None if self._fn_sent else b"x" * 200   # the function ships once
        self._fn_sent = True
        s = build_spec(7, blob, "tiny", (0,), {}, 1, None, 3, 0, None, 0)
        return s

    def submit(self, specs: list) -> None:
        """The driver's drain_refs(): submissions, then one scheduling pass."""
        head = self.head
        IN_HEAD[0] = True
        t = time.process_time()
        for s in specs:
            head.submit(s)
        head.schedule()
        out = head.take_outbox()
        self.head_seconds += time.process_time() - t
        IN_HEAD[0] = False
        self.deliver(out)

    def deliver(self, out: dict) -> None:
        m = self.m
        for rank, msgs in out.items():
            q = self.queues[rank]
            for msg in msgs:
                if msg[0] == m.EXECUTE:
                    spec = msg[1]
                    q.append((spec[m.T_ID], spec[m.T_RETURNS]))
                    self.executes += 1
                elif msg[0] == m.STEAL:
                    self.steals.append((rank, msg[1]))
                    self.steal_msgs += 1
            if q and not self.in_ring[rank]:
                self.in_ring[rank] = True
                self.ring.append(rank)

    def round(self, new_specs: list | None = None) -> list:
        """One poll of the head's comm thread; returns the finished tasks' return ids."""
        m = self.m
        reports = []
        ring = self.ring
        for _ in range(min(RECV_LIMIT, len(ring))):
            rank = ring.popleft()
            q = self.queues[rank]
            items = [q.popleft() for _ in range(min(self.per_msg, len(q)))]
            reports.append((rank, items))
            if q:
                ring.append(rank)
            else:
                self.in_ring[rank] = False
        returned = []
        for rank, n in self.steals:
            q = self.queues[rank]
            back = []
            while len(q) > 1 and len(back) < n:          # the first one is running
                back.append(q.pop()[0])
            back.reverse()
            returned.append((rank, back))
        self.steals = []
        t0 = self.clock
        t1 = t0 + TASK_SECONDS
        self.clock = t1
        released = []
        head = self.head
        raw = ((0, 0),)   # (RAW, value): RAW is 0 in transport.serialization
        IN_HEAD[0] = True
        t = time.process_time()
        for rank, items in reports:
            for tid, rets in items:
                head.task_done(rank, tid, [raw[0]] * len(rets), None, t0, t1, 1000 + rank)
                released.extend(rets)
        for rank, tids in returned:
            head.tasks_returned(rank, tids)
        if new_specs:
            for s in new_specs:
                head.submit(s)
        if reports or returned or new_specs:   # poll_once schedules only after events
            head.schedule()
        if released:
            head.release(released)
        out = head.take_outbox()
        self.head_seconds += time.process_time() - t
        IN_HEAD[0] = False
        self.rounds += 1
        self.done += len(released)
        self.deliver(out)
        return released


def _check_raw() -> None:
    from hpc_ray.transport.serialization import RAW
    assert RAW == 0, f"RAW is {RAW!r}: update Fleet.round"


def use_round_robin_pick() -> None:
    """Experiment (``--pick rr``), not a change to the head: a pick that does not scan.

    ``scheduler.pick_worker`` looks at every worker for every task (least loaded
    wins). This replacement, for tasks without argument locality, takes the first
    worker with room after the previous pick, so a placement costs O(1) while
    workers have room. It shows what the head costs once the scan is gone.
    """
    from hpc_ray.runtime import scheduler
    original = scheduler.pick_worker
    capacity_ok = getattr(scheduler, "capacity_ok", None) or scheduler._capacity_ok
    cursor = [0]

    def pick_worker(workers, need, arg_nodes):
        if arg_nodes:
            return original(workers, need, arg_nodes)
        n = len(workers)
        i = cursor[0]
        for k in range(n):
            w = workers[(i + k) % n]
            if capacity_ok(w, need):
                cursor[0] = (i + k + 1) % n
                return w
        return None

    scheduler.pick_worker = pick_worker


def run_burst(n: int, tasks: int, per_msg: int) -> dict:
    fleet = Fleet(n, per_msg=per_msg)
    specs = [fleet.spec() for _ in range(tasks)]
    for i in range(0, tasks, SUBMIT_BATCH):
        fleet.submit(specs[i:i + SUBMIT_BATCH])
    del specs
    while fleet.done < tasks:
        if not fleet.ring and not fleet.steals:
            raise RuntimeError(f"stuck: {fleet.done} of {tasks} done, nothing queued")
        fleet.round()
    return fleet, _result(fleet, tasks)


def run_steady(n: int, tasks: int, per_msg: int, window: int) -> dict:
    fleet = Fleet(n, per_msg=per_msg)
    fleet.submit([fleet.spec() for _ in range(min(window, tasks))])
    submitted = min(window, tasks)
    half_seconds = half_done = None
    finished = 0
    while fleet.done < tasks:
        # The driver keeps its window full: as many new tasks as came back last
        # round, handed over at the start of this poll (drain_refs).
        new = [fleet.spec() for _ in range(min(finished, tasks - submitted))]
        submitted += len(new)
        if not new and not fleet.ring and not fleet.steals:
            raise RuntimeError(f"stuck: {fleet.done} of {tasks} done, nothing queued")
        finished = len(fleet.round(new))
        if half_seconds is None and fleet.done >= tasks // 2:
            half_seconds, half_done = fleet.head_seconds, fleet.done
    res = _result(fleet, tasks)
    # Steady state: the second half only (the first fills the history log).
    res["us_per_task_2nd_half"] = round(
        (fleet.head_seconds - half_seconds) / max(1, fleet.done - half_done) * 1e6, 2)
    return fleet, res


def _result(fleet: Fleet, tasks: int) -> dict:
    head = fleet.head
    assert not head.tasks, f"{len(head.tasks)} tasks left in the head"
    assert len(head.objects) == 0, f"{len(head.objects)} objects left in the head"
    return {"tasks": tasks, "rounds": fleet.rounds,
            "head_s": round(fleet.head_seconds, 3),
            "us_per_task": round(fleet.head_seconds / tasks * 1e6, 2),
            "tasks_per_s_head_bound": round(tasks / fleet.head_seconds),
            "tasks_per_round": round(tasks / max(1, fleet.rounds), 1),
            "executes_per_task": round(fleet.executes / tasks, 3),
            "steals": fleet.steal_msgs}


# --- one configuration in this process ------------------------------------------

def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one(scenario: str, n: int, tasks: int, per_msg: int, window: int, memory: bool,
        profile: bool, pick: str = "scan") -> dict:
    _check_raw()
    if pick == "rr":
        use_round_robin_pick()
    gc.collect()
    if memory:
        import tracemalloc
        tracemalloc.start()
    rss0 = _rss()
    gc_time = [0.0, 0.0]

    def gc_timer(phase, info):   # GC pauses inside the timed head calls
        if not IN_HEAD[0]:
            return
        if phase == "start":
            gc_time[1] = time.process_time()
        elif gc_time[1]:
            gc_time[0] += time.process_time() - gc_time[1]
            gc_time[1] = 0.0

    gc.callbacks.append(gc_timer)
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    if scenario == "burst":
        fleet, res = run_burst(n, tasks, per_msg)
    else:
        fleet, res = run_steady(n, tasks, per_msg, window)
    gc.callbacks.remove(gc_timer)
    if prof is not None:
        prof.disable()
        import io
        import pstats
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
        res["profile"] = buf.getvalue()
    res["gc_s"] = round(gc_time[0], 3)
    # Kept by the head after the run (history of finished tasks, per-rank records).
    res["rss_growth_mb"] = round((_rss() - rss0) / 2**20, 1)
    res["history_tasks"] = len(fleet.head.history.tasks)
    if memory:
        import tracemalloc
        cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        res["tracemalloc_peak_mb"] = round(peak / 2**20, 1)
        res["tracemalloc_end_mb"] = round(cur / 2**20, 1)
    del fleet
    res.update(scenario=scenario, ranks=n, per_msg=per_msg, pick=pick,
               window=window if scenario == "steady" else None)
    return res


# --- parent: every configuration in a child, one table -------------------------------

def _child(args, scenario: str, n: int, memory: bool, profile: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--one", "--scenario", scenario, "--ranks", str(n),
           "--tasks", str(args.tasks), "--per-msg", str(args.per_msg),
           "--window", str(args.window), "--pick", args.pick]
    if memory:
        cmd.append("--memory")
    if profile:
        cmd.append("--profile-here")
    env = dict(os.environ, HEAD_SCALING_SRC=str(Path(args.src).resolve())) if args.src \
        else None
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    cols = [("scenario", "scenario"), ("pick", "pick"), ("ranks", "ranks"), ("tasks", "tasks"),
            ("head CPU µs/task", "us_per_task"), ("µs/task 2nd half", "us_per_task_2nd_half"),
            ("head-bound tasks/s", "tasks_per_s_head_bound"),
            ("tasks/round", "tasks_per_round"), ("EXECUTEs/task", "executes_per_task"),
            ("STEALs", "steals"), ("of which GC s", "gc_s"),
            ("head s", "head_s"), ("RSS growth MB", "rss_growth_mb"),
            ("tracemalloc peak MB", "tracemalloc_peak_mb"),
            ("tracemalloc end MB", "tracemalloc_end_mb"),
            ("history tasks kept", "history_tasks")]
    cols = [(h, k) for h, k in cols if any(r.get(k) is not None for r in rows)]
    lines = ["| " + " | ".join(h for h, _ in cols) + " |",
             "|" + "|".join("---" if k in ("scenario", "pick") else "---:" for _, k in cols) + "|"]
    for r in rows:
        cells = []
        for _, k in cols:
            v = r.get(k)
            cells.append("" if v is None else (f"{v:,}" if isinstance(v, int) else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="8,64,256,1024", help="worker rank counts")
    p.add_argument("--scenario", default="burst,steady", help="burst, steady or both")
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--per-msg", type=int, default=1,
                   help="TASK_DONEs per rank message (1: every result alone, the worst case)")
    p.add_argument("--window", type=int, default=64, help="steady: tasks kept in flight")
    p.add_argument("--pick", default="scan", choices=["scan", "rr"],
                   help="scan: the head's own pick_worker; rr: use_round_robin_pick() (experiment)")
    p.add_argument("--memory", action="store_true",
                   help="also a tracemalloc run per configuration (slower; timed separately)")
    p.add_argument("--profile", type=int, default=0,
                   help="cProfile one configuration with this many ranks; print the top functions")
    p.add_argument("--save", action="store_true", help="write benchmarks/results/head-scaling-*")
    p.add_argument("--src", default="",
                   help="import hpc_ray from this directory (a pinned export of a commit)")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--profile-here", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    scenarios = [s for s in args.scenario.split(",") if s]
    for s in scenarios:
        if s not in ("burst", "steady"):
            p.error(f"unknown scenario {s!r} (known: ['burst', 'steady'])")
    ranks = [int(r) for r in args.ranks.split(",") if r]

    if args.one:
        res = one(scenarios[0], ranks[0], args.tasks, args.per_msg, args.window,
                  args.memory, args.profile_here, args.pick)
        print(json.dumps(res))
        return

    if args.profile:
        for s in scenarios:
            res = _child(args, s, args.profile, memory=False, profile=True)
            print(f"## cProfile: {s}, {args.profile} ranks, {args.tasks} tasks "
                  f"({res['us_per_task']} µs/task under the profiler is inflated)\n")
            print(res["profile"])
        return

    started = time.time()
    rows = []
    for s in scenarios:
        for n in ranks:
            res = _child(args, s, n, memory=False)
            if args.memory:
                mem = _child(args, s, n, memory=True)
                res["tracemalloc_peak_mb"] = mem["tracemalloc_peak_mb"]
                res["tracemalloc_end_mb"] = mem["tracemalloc_end_mb"]
            rows.append(res)
            print(json.dumps(res), file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    if args.save:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        out = ROOT / "benchmarks" / "results" / f"head-scaling-{stamp}"
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        if args.src:
            commit = f"{commit} (hpc_ray imported from {args.src})"
        head = (f"# Head against a simulated fleet, {stamp}\n\n"
                f"Command: `python benchmarks/head_scaling.py {' '.join(sys.argv[1:])}`\n\n"
                f"- hpc_ray commit: {commit}\n- python: {platform.python_version()}\n"
                f"- cpus: {os.cpu_count()}, load average at start: "
                f"{os.getloadavg()[0]:.2f}\n- per_msg: {args.per_msg}, window (steady): "
                f"{args.window}, pick: {args.pick}, RECV_LIMIT: {RECV_LIMIT}, SUBMIT_BATCH: {SUBMIT_BATCH}, "
                f"ranks per node: {RANKS_PER_NODE}\n- total: {time.time() - started:.0f} s\n\n")
        out.with_suffix(".md").write_text(head + text + "\n")
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
        print(f"saved {out}.md and .json", file=sys.stderr)


if __name__ == "__main__":
    main()
