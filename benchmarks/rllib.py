"""RLlib: hpc_ray.rllib against RLlib (Ray 2.60) on the same machine, in one run.

Workloads, each system in a fresh process:

    sample   env steps/s of CartPole sampling on 2 PPO rollout workers (each
             system's default fully connected model, 256x256): --rounds rounds of
             ``sample()`` on both workers at once, --fragment steps each
    ppo      wall seconds for PPO to reach a mean episode reward of 150 on
             CartPole-v0 (Ray's tuned cartpole-ppo settings: lr 3e-4, 6 epochs,
             minibatch 128, train batch 4000, a linear 32-unit model with a shared
             value layer, vf_loss_coeff 0.01, MeanStdFilter), 1 worker, seed 0;
             timesteps and iterations it took, set-up time beside it
    thresholds  hpc_ray only: each algorithm on CartPole-v0 to Ray's regression
             threshold (PPO 150 / 100k steps, PG 100 / 100k, A3C 100 / 100k,
             IMPALA 150 / 500k, APPO 150 / 500k, DDPPO 150 / 100k, ES 150 / 500k,
             ARS 50 / 500k), seed 0, 2 workers: reward, timesteps, wall seconds
    es       hpc_ray only (ES left RLlib after Ray 2.4): memory of the noise table
             (--noise-size floats) with 2 ES workers: each worker's private memory
             (USS) against a run where every worker gets its own copy

Ray comes from ``--ray-python`` (a virtual environment with ``ray[rllib]``,
``torch==2.13.0`` and ``gymnasium``), so the project's environment needs no Ray.

    python benchmarks/rllib.py --ray-python /tmp/rayvenv/bin/python --save
    python benchmarks/rllib.py --systems hpc_ray --workloads sample,es
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
RESULTS = HERE.parent / "results"

PPO_TUNED = {"lr": 3e-4, "num_sgd_iter": 6, "sgd_minibatch_size": 128, "train_batch_size": 4000,
             "vf_loss_coeff": 0.01, "hiddens": [32], "activation": "linear"}


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


# --- hpc_ray ------------------------------------------------------------------------------


def hpc_ray_sample(args) -> dict:
    import hpc_ray as ray
    from hpc_ray.rllib.agents import ppo
    ray.init(num_cpus=2)
    t0 = time.perf_counter()
    # PPO's workers, as on Ray's side (they also compute the value estimates).
    trainer = ppo.PPOTrainer(env="CartPole-v0", config={
        "num_workers": 2, "sample_batch_size": args.fragment, "seed": 0})
    setup = time.perf_counter() - t0
    workers = trainer.workers.remote_workers()
    ray.get([w.sample.remote() for w in workers])  # warm-up
    t0 = time.perf_counter()
    steps = 0
    for _ in range(args.rounds):
        steps += sum(b.count for b in ray.get([w.sample.remote() for w in workers]))
    wall = time.perf_counter() - t0
    trainer.stop()
    ray.shutdown()
    return {"steps": steps, "wall_s": wall, "steps_per_s": steps / wall, "setup_s": setup}


def hpc_ray_ppo(args) -> dict:
    import hpc_ray as ray
    from hpc_ray.rllib.agents import ppo
    ray.init(num_cpus=2)
    t0 = time.perf_counter()
    trainer = ppo.PPOTrainer(env="CartPole-v0", config={
        "num_workers": 1, "seed": 0, "lr": PPO_TUNED["lr"],
        "num_sgd_iter": PPO_TUNED["num_sgd_iter"],
        "sgd_minibatch_size": PPO_TUNED["sgd_minibatch_size"],
        "train_batch_size": PPO_TUNED["train_batch_size"], "vf_share_layers": True,
        "vf_loss_coeff": PPO_TUNED["vf_loss_coeff"], "observation_filter": "MeanStdFilter",
        "model": {"fcnet_hiddens": PPO_TUNED["hiddens"],
                  "fcnet_activation": PPO_TUNED["activation"]}})
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = {}
    for _ in range(args.max_iters):
        result = trainer.train()
        if result["episode_reward_mean"] >= 150:
            break
    wall = time.perf_counter() - t0
    trainer.stop()
    ray.shutdown()
    return {"wall_s": wall, "setup_s": setup, "reward": result["episode_reward_mean"],
            "timesteps": result["timesteps_total"], "iterations": result["training_iteration"],
            "reached": result["episode_reward_mean"] >= 150}


def hpc_ray_es(args) -> dict:
    import numpy as np
    import psutil

    import hpc_ray as ray
    from hpc_ray.rllib.agents import es
    from hpc_ray.rllib.agents.es.es_worker import ESWorker

    class CopyingWorker(ESWorker):
        """The counterfactual: each worker keeps a private copy of the table."""

        def __init__(self, config, env_creator, noise, worker_index, *rest):
            super().__init__(config, env_creator, np.array(noise), worker_index, *rest)

    class CopyingES(es.ESTrainer):
        _worker_cls = CopyingWorker

    ray.init(num_cpus=2)
    out = {"noise_mb": args.noise_size * 4 / 2 ** 20}
    for mode, cls, size in (("shared", es.ESTrainer, args.noise_size),
                            ("copy", CopyingES, args.noise_size),
                            ("tiny table", es.ESTrainer, 100_000)):
        trainer = cls(env="CartPole-v0", config={
            "num_workers": 2, "seed": 0, "noise_size": size,
            "episodes_per_batch": 20, "train_batch_size": 200})
        trainer.train()
        infos = ray.get([w.noise_table_info.remote() for w in trainer._workers])
        mems = [psutil.Process(i["pid"]).memory_full_info() for i in infos]
        out[mode] = {"worker_uss_mb": [m.uss / 2 ** 20 for m in mems],
                     "worker_pss_mb": [m.pss / 2 ** 20 for m in mems],
                     "worker_rss_mb": [m.rss / 2 ** 20 for m in mems],
                     "owndata": [i["owndata"] for i in infos]}
        log(f"  {mode}: {out[mode]}")
        trainer.stop()
    ray.shutdown()
    return out


THRESHOLDS = {
    # name: (threshold, timestep budget, config)
    "PPO": (150, 100_000, {"num_workers": 2, "lr": 3e-4, "observation_filter": "MeanStdFilter",
                           "num_sgd_iter": 6, "vf_share_layers": True, "vf_loss_coeff": 0.01,
                           "model": {"fcnet_hiddens": [32], "fcnet_activation": "linear"}}),
    "PG": (100, 100_000, {"num_workers": 1}),
    "A3C": (100, 100_000, {"num_workers": 2, "gamma": 0.95, "min_iter_time_s": 0}),
    "A2C": (100, 100_000, {"num_workers": 2, "gamma": 0.95, "min_iter_time_s": 0}),
    "IMPALA": (150, 500_000, {"num_workers": 2, "min_iter_time_s": 0,
                              "timesteps_per_iteration": 5000}),
    "APPO": (150, 500_000, {"num_workers": 2, "min_iter_time_s": 0,
                            "timesteps_per_iteration": 5000}),
    "DDPPO": (150, 100_000, {"num_workers": 2, "lr": 3e-4, "sample_batch_size": 500,
                             "sgd_minibatch_size": 100, "num_sgd_iter": 6,
                             "vf_share_layers": True, "vf_loss_coeff": 0.01,
                             "model": {"fcnet_hiddens": [32], "fcnet_activation": "linear"}}),
    "ES": (150, 500_000, {"num_workers": 2, "noise_size": 2_000_000, "episodes_per_batch": 50,
                          "train_batch_size": 500, "eval_prob": 0.05}),
    "ARS": (50, 500_000, {"num_workers": 2, "noise_size": 2_000_000, "num_rollouts": 50,
                          "rollouts_used": 25, "eval_prob": 0.5}),
}


def hpc_ray_thresholds(args) -> dict:
    import hpc_ray as ray
    from hpc_ray.rllib.agents.registry import get_agent_class
    ray.init(num_cpus=2)
    out = {}
    for name, (threshold, budget, config) in THRESHOLDS.items():
        t0 = time.perf_counter()
        trainer = get_agent_class(name)(env="CartPole-v0", config=dict(config, seed=0))
        while True:
            result = trainer.train()
            if result["episode_reward_mean"] >= threshold or result["timesteps_total"] >= budget:
                break
        out[name] = {"threshold": threshold, "budget": budget,
                     "reward": result["episode_reward_mean"],
                     "timesteps": result["timesteps_total"],
                     "reached": result["episode_reward_mean"] >= threshold,
                     "wall_s": time.perf_counter() - t0}
        log(f"  {name}: {out[name]}")
        trainer.stop()
    ray.shutdown()
    return out


# --- Ray 2.60 -------------------------------------------------------------------------------


def _ray_init():
    import ray
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    return ray


def ray_sample(args) -> dict:
    ray = _ray_init()
    from ray.rllib.algorithms.ppo import PPOConfig
    t0 = time.perf_counter()
    config = (PPOConfig().environment("CartPole-v0")
              .env_runners(num_env_runners=2, rollout_fragment_length=args.fragment)
              .debugging(seed=0))
    algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
    setup = time.perf_counter() - t0
    group = algo.env_runner_group
    fragment = args.fragment

    def sample(runner):
        return sum(len(e) for e in runner.sample(num_timesteps=fragment))

    group.foreach_env_runner(sample, local_env_runner=False)  # warm-up
    t0 = time.perf_counter()
    steps = 0
    for _ in range(args.rounds):
        steps += sum(group.foreach_env_runner(sample, local_env_runner=False))
    wall = time.perf_counter() - t0
    algo.stop()
    ray.shutdown()
    return {"steps": steps, "wall_s": wall, "steps_per_s": steps / wall, "setup_s": setup}


def ray_ppo(args) -> dict:
    ray = _ray_init()
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    t0 = time.perf_counter()
    config = (PPOConfig().environment("CartPole-v0")
              .env_runners(num_env_runners=1,
                           env_to_module_connector=lambda env, *a, **k: MeanStdFilter())
              .training(lr=PPO_TUNED["lr"], num_epochs=PPO_TUNED["num_sgd_iter"],
                        minibatch_size=PPO_TUNED["sgd_minibatch_size"],
                        train_batch_size_per_learner=PPO_TUNED["train_batch_size"],
                        vf_loss_coeff=PPO_TUNED["vf_loss_coeff"])
              .rl_module(model_config=DefaultModelConfig(
                  fcnet_hiddens=PPO_TUNED["hiddens"],
                  fcnet_activation=PPO_TUNED["activation"], vf_share_layers=True))
              .debugging(seed=0))
    algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    reward, timesteps, it = float("nan"), 0, 0
    for it in range(1, args.max_iters + 1):
        result = algo.train()
        reward = result["env_runners"].get("episode_return_mean", float("nan"))
        timesteps = result.get("num_env_steps_sampled_lifetime") or \
            result["env_runners"].get("num_env_steps_sampled_lifetime", 0)
        if reward >= 150:
            break
    wall = time.perf_counter() - t0
    algo.stop()
    ray.shutdown()
    return {"wall_s": wall, "setup_s": setup, "reward": float(reward),
            "timesteps": int(timesteps), "iterations": it, "reached": bool(reward >= 150)}


CHILDREN = {("hpc_ray", "sample"): hpc_ray_sample, ("hpc_ray", "ppo"): hpc_ray_ppo,
            ("hpc_ray", "es"): hpc_ray_es,
            ("hpc_ray", "thresholds"): hpc_ray_thresholds, ("ray", "sample"): ray_sample,
            ("ray", "ppo"): ray_ppo}


# --- the parent ------------------------------------------------------------------------------


def run_child(system: str, workload: str, args) -> dict:
    python = args.ray_python if system == "ray" else sys.executable
    cmd = [python, str(HERE), "--child", system, "--workload", workload,
           "--rounds", str(args.rounds), "--fragment", str(args.fragment),
           "--max-iters", str(args.max_iters), "--noise-size", str(args.noise_size)]
    env = dict(os.environ)
    if system == "hpc_ray":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    else:
        env.pop("PYTHONPATH", None)
    log(f"{system} {workload} ...")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout,
                          start_new_session=True, cwd="/tmp")
    if proc.returncode != 0:
        log(proc.stdout[-3000:], proc.stderr[-5000:])
        return {"error": f"exit {proc.returncode}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"  {result}")
    return result


def table(results: dict, args) -> str:
    h, r = results.get("hpc_ray", {}), results.get("ray", {})
    lines = ["| workload | hpc_ray | RLlib 2.60 | hpc_ray advantage |", "|---|---|---|---|"]
    hs, rs = h.get("sample", {}), r.get("sample", {})
    if "steps_per_s" in hs or "steps_per_s" in rs:
        ratio = (f"{hs['steps_per_s'] / rs['steps_per_s']:.1f}x"
                 if "steps_per_s" in hs and "steps_per_s" in rs else "-")
        lines.append(f"| sampling, CartPole, 2 workers, {args.rounds} x {args.fragment} steps "
                     f"each (env steps/s) | {hs.get('steps_per_s', float('nan')):,.0f} | "
                     f"{rs.get('steps_per_s', float('nan')):,.0f} | {ratio} |")
    hp, rp = h.get("ppo", {}), r.get("ppo", {})
    if hp or rp:
        def cell(d):
            if "wall_s" not in d:
                return "-"
            mark = "" if d.get("reached") else " (not reached)"
            return (f"{d['wall_s']:.1f} s, {d['timesteps']:,} steps, {d['iterations']} it"
                    f"{mark}; set-up {d['setup_s']:.1f} s")
        ratio = (f"{rp['wall_s'] / hp['wall_s']:.1f}x" if "wall_s" in hp and "wall_s" in rp
                 and hp.get("reached") and rp.get("reached") else "-")
        lines.append(f"| PPO CartPole-v0 to reward 150 (wall) | {cell(hp)} | {cell(rp)} | "
                     f"{ratio} |")
    he = h.get("es", {})
    if "shared" in he:
        def mb(mode, key):
            return ", ".join(f"{x:.0f}" for x in he[mode][key])
        lines.append(f"| ES, noise table {he['noise_mb']:.0f} MB, 2 workers: each worker's "
                     f"private memory (USS, MB) | put once: {mb('shared', 'worker_uss_mb')}; "
                     f"a private copy each: {mb('copy', 'worker_uss_mb')}; a 0.4 MB table: "
                     f"{mb('tiny table', 'worker_uss_mb')} | - (no ES in RLlib 2.60) | - |")
    th = h.get("thresholds", {})
    if th and "error" not in th:
        lines += ["", "| algorithm (hpc_ray) | threshold / budget | reward | timesteps | "
                  "wall s | reached |", "|---|---|---|---|---|---|"]
        for name, d in th.items():
            lines.append(f"| {name} | {d['threshold']} / {d['budget']:,} | {d['reward']:.1f} | "
                         f"{d['timesteps']:,} | {d['wall_s']:.1f} | "
                         f"{'yes' if d['reached'] else 'NO'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="hpc_ray,ray", help="hpc_ray and/or ray")
    parser.add_argument("--workloads", default="sample,ppo,es,thresholds")
    parser.add_argument("--rounds", type=int, default=10, help="sampling rounds")
    parser.add_argument("--fragment", type=int, default=1000, help="steps per worker per round")
    parser.add_argument("--max-iters", type=int, default=40, help="PPO iterations at most")
    parser.add_argument("--noise-size", type=int, default=25_000_000)
    parser.add_argument("--ray-python", default=os.environ.get("RAY_PYTHON", sys.executable),
                        help="a python with ray[rllib], torch==2.13.0 and gymnasium")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/results/rllib-<date>.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        out = CHILDREN[(args.child, args.workload)](args)
        print(json.dumps(out), flush=True)
        return
    systems = args.systems.split(",")
    if "ray" in systems:
        probe = subprocess.run([args.ray_python, "-c", "import ray.rllib"], capture_output=True)
        if probe.returncode != 0:
            log(f"no ray[rllib] in {args.ray_python}: measuring hpc_ray alone")
            systems.remove("ray")
    results: dict = {}
    load_before = os.getloadavg()
    for workload in args.workloads.split(","):
        for system in systems:
            if (system, workload) in CHILDREN:
                results.setdefault(system, {})[workload] = run_child(system, workload, args)
    text = table(results, args)
    print(text)
    if args.save:
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        ray_version = subprocess.run([args.ray_python, "-c", "import ray; print(ray.__version__)"],
                                     capture_output=True, text=True).stdout.strip() or "-"
        path = RESULTS / f"rllib-{stamp}.md"
        path.write_text(
            f"# RLlib benchmark, {stamp}\n\n"
            f"`python benchmarks/rllib.py {' '.join(sys.argv[1:])}`\n\n"
            f"Machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; Ray {ray_version}; load average before: "
            f"{load_before}, after: {os.getloadavg()}\n\n{text}\n\n"
            f"```json\n{json.dumps(results, indent=1)}\n```\n")
        log(f"saved {path}")


if __name__ == "__main__":
    main()
