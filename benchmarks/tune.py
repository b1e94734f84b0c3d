"""Tune overhead: hpc_ray.tune against Ray Tune on the same machine, in one run.

Two workloads, each trial sleeping (so the CPUs stay free for the runtimes):

    short   --short-trials function trials (default 1,000) of one --trial-ms
            (default 10 ms) iteration each, reporting once
    ckpt    --ckpt-trials Trainable trials (default 100) of --iters iterations
            (default 20) of --trial-ms each, checkpointed every --ckpt-freq (5)

Each system runs each workload in a fresh process with ``--workers`` (default
2) trial slots: hpc_ray embedded (``init(num_cpus=W)``: W worker ranks), Ray
``init(num_cpus=W)`` with ``Tuner``.  The wall time is that of ``tune.run`` /
``Tuner.fit`` alone (start-up excluded, reported beside it); the ideal is the
total trial time / W.  Ray comes from ``--ray-python`` (a virtual environment
with ``ray[tune]``, so that the project's own environment needs no Ray).

    python benchmarks/tune.py                                  # both systems, ~5 min
    python benchmarks/tune.py --systems hpc_ray --short-trials 200
    python benchmarks/tune.py --ray-python /tmp/rayvenv/bin/python --save
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
RESULTS = HERE.parent / "results"


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


# --- the children: one system, one workload ------------------------------------------------


def child_hpc_ray(args) -> dict:
    import hpc_ray as ray
    from hpc_ray import tune

    t0 = time.perf_counter()
    ray.init(num_cpus=args.workers)
    started = time.perf_counter() - t0
    seconds = args.trial_ms / 1000
    local = tempfile.mkdtemp(prefix="tune-bench-")

    if args.workload == "short":
        def short(config, reporter):
            time.sleep(seconds)
            reporter(score=config["i"])

        t0 = time.perf_counter()
        trials = tune.run(short, name="short", local_dir=local, verbose=0,
                          config={"i": tune.grid_search(list(range(args.short_trials)))})
    else:
        class Ckpt(tune.Trainable):
            def _setup(self, config):
                self.i = 0

            def _train(self):
                time.sleep(seconds)
                self.i += 1
                return {"score": self.i}

            def _save(self, checkpoint_dir):
                path = os.path.join(checkpoint_dir, "state.json")
                with open(path, "w") as f:
                    json.dump({"i": self.i}, f)
                return path

            def _restore(self, path):
                with open(path) as f:
                    self.i = json.load(f)["i"]

        t0 = time.perf_counter()
        trials = tune.run(Ckpt, name="ckpt", local_dir=local, verbose=0,
                          stop={"training_iteration": args.iters},
                          checkpoint_freq=args.ckpt_freq,
                          config={"i": tune.grid_search(list(range(args.ckpt_trials)))})
    wall = time.perf_counter() - t0
    done = sum(t.status == "TERMINATED" for t in trials)
    ray.shutdown()
    return {"wall_s": wall, "startup_s": started, "trials_done": done}


def child_ray(args) -> dict:
    import ray
    from ray import tune

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    t0 = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    started = time.perf_counter() - t0
    seconds = args.trial_ms / 1000
    local = tempfile.mkdtemp(prefix="raytune-bench-")

    if args.workload == "short":
        def short(config):
            time.sleep(seconds)
            tune.report({"score": config["i"]})

        tuner = tune.Tuner(
            short, param_space={"i": tune.grid_search(list(range(args.short_trials)))},
            tune_config=tune.TuneConfig(reuse_actors=True),
            run_config=tune.RunConfig(name="short", storage_path=local, verbose=0))
    else:
        class Ckpt(tune.Trainable):
            def setup(self, config):
                self.i = 0

            def step(self):
                time.sleep(seconds)
                self.i += 1
                return {"score": self.i}

            def save_checkpoint(self, checkpoint_dir):
                with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
                    json.dump({"i": self.i}, f)

            def load_checkpoint(self, checkpoint_dir):
                with open(os.path.join(checkpoint_dir, "state.json")) as f:
                    self.i = json.load(f)["i"]

        tuner = tune.Tuner(
            Ckpt, param_space={"i": tune.grid_search(list(range(args.ckpt_trials)))},
            run_config=tune.RunConfig(
                name="ckpt", storage_path=local, verbose=0,
                stop={"training_iteration": args.iters},
                checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=args.ckpt_freq)))
    t0 = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    done = sum(1 for r in grid if r.error is None)
    ray.shutdown()
    return {"wall_s": wall, "startup_s": started, "trials_done": done}


# --- the parent ----------------------------------------------------------------------------


def run_child(system: str, workload: str, args) -> dict:
    python = args.ray_python if system == "ray" else sys.executable
    cmd = [python, str(HERE), "--child", system, "--workload", workload,
           "--workers", str(args.workers), "--trial-ms", str(args.trial_ms),
           "--short-trials", str(args.short_trials), "--ckpt-trials", str(args.ckpt_trials),
           "--iters", str(args.iters), "--ckpt-freq", str(args.ckpt_freq)]
    env = dict(os.environ)
    if system == "hpc_ray":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    log(f"{system} {workload} ...")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout,
                          start_new_session=True)
    if proc.returncode != 0:
        log(proc.stdout[-3000:], proc.stderr[-5000:])
        return {"error": f"exit {proc.returncode}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    log(f"  {result}")
    return result


def table(results: dict, args) -> str:
    ideal = {"short": args.short_trials * args.trial_ms / 1000 / args.workers,
             "ckpt": args.ckpt_trials * args.iters * args.trial_ms / 1000 / args.workers}
    what = {"short": f"{args.short_trials} trials x 1 iteration of {args.trial_ms} ms",
            "ckpt": f"{args.ckpt_trials} trials x {args.iters} iterations of {args.trial_ms} ms,"
                    f" checkpoint every {args.ckpt_freq}"}
    head = ["workload", "ideal s", "hpc_ray s", "hpc_ray / ideal", "Ray Tune s",
            "Ray Tune / ideal", "Ray / hpc_ray", "hpc_ray start-up s", "Ray start-up s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for workload in ("short", "ckpt"):
        h = results.get("hpc_ray", {}).get(workload, {})
        r = results.get("ray", {}).get(workload, {})

        def fig(d, key, fmt="{:.2f}"):
            return fmt.format(d[key]) if key in d else "-"

        row = [what[workload], f"{ideal[workload]:.2f}", fig(h, "wall_s"),
               f"{h['wall_s'] / ideal[workload]:.3f}" if "wall_s" in h else "-",
               fig(r, "wall_s"),
               f"{r['wall_s'] / ideal[workload]:.2f}" if "wall_s" in r else "-",
               f"{r['wall_s'] / h['wall_s']:.1f}x" if "wall_s" in r and "wall_s" in h else "-",
               fig(h, "startup_s"), fig(r, "startup_s")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="hpc_ray,ray", help="hpc_ray and/or ray")
    parser.add_argument("--workloads", default="short,ckpt")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trial-ms", type=float, default=10.0)
    parser.add_argument("--short-trials", type=int, default=1000)
    parser.add_argument("--ckpt-trials", type=int, default=100)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--ckpt-freq", type=int, default=5)
    parser.add_argument("--ray-python", default=os.environ.get("RAY_PYTHON", sys.executable),
                        help="a python with ray[tune] installed")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/results/tune-<date>.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = (child_hpc_ray if args.child == "hpc_ray" else child_ray)(args)
        print(json.dumps(out), flush=True)
        return
    systems = args.systems.split(",")
    if "ray" in systems:
        probe = subprocess.run([args.ray_python, "-c", "import ray.tune"], capture_output=True)
        if probe.returncode != 0:
            log(f"no ray[tune] in {args.ray_python}: measuring hpc_ray alone "
                f"(pip install 'ray[tune]' there, or pass --ray-python)")
            systems.remove("ray")
    results: dict = {}
    for workload in args.workloads.split(","):
        for system in systems:
            results.setdefault(system, {})[workload] = run_child(system, workload, args)
    text = table(results, args)
    print(text)
    if args.save:
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        ray_version = subprocess.run([args.ray_python, "-c", "import ray; print(ray.__version__)"],
                                     capture_output=True, text=True).stdout.strip() or "-"
        path = RESULTS / f"tune-{stamp}.md"
        path.write_text(
            f"# Tune benchmark, {stamp}\n\n"
            f"`python benchmarks/tune.py {' '.join(sys.argv[1:])}`\n\n"
            f"Machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; Ray {ray_version}; load average before: "
            f"{os.getloadavg()}\n\n{text}\n\n```json\n{json.dumps(results, indent=1)}\n```\n")
        log(f"saved {path}")


if __name__ == "__main__":
    main()
