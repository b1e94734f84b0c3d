"""How long creating an actor takes, up to its first call's answer: hpc_ray beside Ray.

Each system runs in its own child process with 2 CPUs (``init(num_cpus=2)``),
runs one task (its workers are up), then creates actors of a class with one
method, one at a time, in two patterns:

    after a pause   sleep --gap seconds, then create an actor and get one call;
                    the actor lives on (the way a program builds its actors
                    over its first seconds, or Tune starts trials)
    back to back    create, get one call, kill; at once again

and reports the median seconds of ``get(Actor.remote().f.remote())`` in each.

Systems:

    hpc_ray          hpc_ray.init(num_cpus=2), embedded: 2 worker ranks
    hpc_ray_nostandby  the same with HPC_RAY_ACTOR_STANDBY=0: every actor
                     starts a new executor process (hpc_ray before the standby)
    ray              ray.init(num_cpus=2, include_dashboard=False)

    python benchmarks/actor_start.py                 # all three, ~1 min
    python benchmarks/actor_start.py --save          # + results/actor-start-<date>.md
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPO = HERE.parent
SYSTEMS = ("hpc_ray", "hpc_ray_nostandby", "ray")


def child(system: str, rounds: int, gap: float) -> dict:
    if system == "ray":
        import ray as rt
        rt.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    else:
        import hpc_ray as rt
        rt.init(num_cpus=2)

    @rt.remote
    def warm():
        return 1

    @rt.remote
    class Actor:
        def f(self):
            return os.getpid()

    rt.get([warm.remote() for _ in range(4)])
    paused, keep = [], []
    for _ in range(rounds):
        time.sleep(gap)
        t0 = time.perf_counter()
        a = Actor.remote()
        rt.get(a.f.remote())
        paused.append(time.perf_counter() - t0)
        keep.append(a)
    for a in keep:
        rt.kill(a)
    time.sleep(gap)
    back_to_back = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        a = Actor.remote()
        rt.get(a.f.remote())
        back_to_back.append(time.perf_counter() - t0)
        rt.kill(a)
    rt.shutdown()
    return {"paused": paused, "back_to_back": back_to_back}


def run_child(system: str, rounds: int, gap: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    if system == "hpc_ray_nostandby":
        env["HPC_RAY_ACTOR_STANDBY"] = "0"
    out = subprocess.run([sys.executable, __file__, "--child", system, "--rounds", str(rounds),
                          "--gap", str(gap)], env=env, capture_output=True, text=True,
                         timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("@@actor_start "):
            return json.loads(line.split(" ", 1)[1])
    raise RuntimeError(f"{system} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--gap", type=float, default=1.5,
                    help="seconds of pause before each actor in 'after a pause'")
    ap.add_argument("--save", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("@@actor_start " + json.dumps(child(args.child, args.rounds, args.gap)), flush=True)
        return
    systems = args.systems.split(",")
    res = {s: run_child(s, args.rounds, args.gap) for s in systems}
    med = {s: {k: statistics.median(v) for k, v in r.items()} for s, r in res.items()}
    lines = [f"# Actor start-up, {datetime.datetime.now():%Y-%m-%d %H:%M}",
             "",
             f"`python benchmarks/actor_start.py --rounds {args.rounds} --gap {args.gap}`"
             f" on {platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}."
             " Median seconds from `Actor.remote()` to its first call's answer"
             " (min-max in brackets); ratio: Ray's median over the system's.",
             "",
             "| system | after a pause (s) | vs Ray | back to back (s) | vs Ray |",
             "| --- | --: | --: | --: | --: |"]
    for s in systems:
        row = [s]
        for k in ("paused", "back_to_back"):
            v = res[s][k]
            row.append(f"{med[s][k]:.3f} ({min(v):.3f}-{max(v):.3f})")
            row.append(f"{med['ray'][k] / med[s][k]:.2f}x" if "ray" in med else "-")
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.save:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"actor-start-{datetime.datetime.now():%Y-%m-%d-%H%M%S}.md"
        path.write_text(text)
        print(f"saved {path}")


if __name__ == "__main__":
    main()
