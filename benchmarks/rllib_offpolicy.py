"""Off-policy RLlib: hpc_ray.rllib against RLlib (Ray 2.60) on the same machine, in one run.

Workloads, each system in a fresh process:

    dqn        wall seconds and timesteps for DQN to reach a mean episode reward of
               150 on CartPole-v0 within 50k timesteps (Ray's regression threshold):
               each system's default DQN (double, dueling, prioritized replay,
               256-unit layers) with n_step 3 as in Ray's tuned cartpole example,
               no remote workers, seed 0
    dqn_small  hpc_ray only: the CI test's small DQN (64 units, lr 1e-3) to 150
    replay     a prioritized replay buffer (alpha 0.6) of --replay-size CartPole
               transitions: rows inserted per second (batches of 50, as Ape-X
               workers send), rows sampled per second (batches of 512, beta 0.4,
               each followed by a priority update), and the memory the filled
               buffer holds (RSS growth). Ray: ``ray.rllib.utils.replay_buffers.
               PrioritizedReplayBuffer`` (the SampleBatch buffer)
    apex       hpc_ray only (Ape-X left RLlib): Ape-X DQN on CartPole-v0, 2 workers,
               2 replay shards, to reward 150 within 100k timesteps
    ddpg, td3  hpc_ray only (DDPG and TD3 left RLlib after Ray 2.8): Pendulum-v0,
               Ray 0.7's tuned pendulum settings, reward -900 within 100k timesteps
               (TD3: its defaults with 1k pure exploration / learning starts)

    python benchmarks/rllib_offpolicy.py --ray-python /tmp/rayvenv/bin/python --save
    python benchmarks/rllib_offpolicy.py --systems hpc_ray --workloads ddpg,td3
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

SMALL_DQN = {"n_step": 3, "model": {"fcnet_hiddens": [64]}, "hiddens": [64], "lr": 1e-3,
             "target_network_update_freq": 250, "schedule_max_timesteps": 20000,
             "exploration_fraction": 0.5, "learning_starts": 500, "train_batch_size": 64,
             "sample_batch_size": 8}
#: Ray 0.7's tuned_examples/pendulum-ddpg.yaml.
DDPG_TUNED = {"actor_hiddens": [64, 64], "critic_hiddens": [64, 64], "n_step": 1,
              "exploration_should_anneal": True, "schedule_max_timesteps": 100000,
              "timesteps_per_iteration": 600, "exploration_fraction": 0.1,
              "exploration_final_scale": 0.02, "tau": 0.001, "buffer_size": 10000,
              "prioritized_replay": True, "actor_lr": 1e-3, "critic_lr": 1e-3,
              "use_huber": True, "huber_threshold": 1.0, "l2_reg": 1e-6,
              "learning_starts": 500, "sample_batch_size": 1, "train_batch_size": 64,
              "clip_rewards": False}
TD3_QUICK = {"learning_starts": 1000, "pure_exploration_steps": 1000}


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _train_until(trainer, threshold: float, budget: int) -> dict:
    t0 = time.perf_counter()
    curve = []
    while True:
        result = trainer.train()
        curve.append([result["timesteps_total"], round(result["episode_reward_mean"], 1)])
        if result["episode_reward_mean"] >= threshold or result["timesteps_total"] >= budget:
            break
    return {"wall_s": time.perf_counter() - t0, "reward": result["episode_reward_mean"],
            "timesteps": result["timesteps_total"], "reached":
            bool(result["episode_reward_mean"] >= threshold), "curve": curve[-40:]}


# --- hpc_ray ------------------------------------------------------------------------------


def hpc_ray_dqn(args, small: bool = False) -> dict:
    from hpc_ray.rllib.agents.dqn import DQNTrainer
    config = dict(SMALL_DQN) if small else {"n_step": 3}
    config.update(num_workers=0, seed=0, min_iter_time_s=0)
    t0 = time.perf_counter()
    trainer = DQNTrainer(env="CartPole-v0", config=config)
    setup = time.perf_counter() - t0
    out = _train_until(trainer, 150, 50_000)
    trainer.stop()
    return dict(out, setup_s=setup)


def _replay_columns(rng, done_key: str) -> dict:
    """50 CartPole-shaped transitions of random values (``done_key``: the library's
    name for the episode-end column)."""
    import numpy as np
    return {"obs": rng.normal(size=(50, 4)).astype(np.float32),
            "new_obs": rng.normal(size=(50, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, 50), "rewards": np.ones(50, np.float32),
            done_key: np.zeros(50, bool), "weights": np.ones(50, np.float32)}


def hpc_ray_replay(args) -> dict:
    import numpy as np
    from hpc_ray.rllib import SampleBatch
    from hpc_ray.rllib.optimizers.replay_buffer import PrioritizedReplayBuffer
    n = args.replay_size
    rng = np.random.default_rng(0)
    batches = [SampleBatch(**_replay_columns(rng, "dones")) for _ in range(n // 50)]
    rss0 = _rss()
    buf = PrioritizedReplayBuffer(n, alpha=0.6, seed=0)
    t0 = time.perf_counter()
    for b in batches:
        buf.add_batch(b)
    insert = time.perf_counter() - t0
    rss = _rss() - rss0
    t0 = time.perf_counter()
    rounds = args.replay_rounds
    for _ in range(rounds):
        s = buf.sample(512, beta=0.4)
        buf.update_priorities(s["batch_indexes"], rng.random(512) + 1e-6)
    sample = time.perf_counter() - t0
    return {"inserted_per_s": n / insert, "sampled_per_s": rounds * 512 / sample,
            "rss_mb": rss / 1e6, "nbytes_mb": buf.nbytes() / 1e6, "rows": len(buf)}


def hpc_ray_apex(args) -> dict:
    import hpc_ray as ray
    from hpc_ray.rllib.agents.dqn import ApexTrainer
    ray.init(num_cpus=2)
    try:
        trainer = ApexTrainer(env="CartPole-v0", config=dict(
            {k: SMALL_DQN[k] for k in ("model", "hiddens", "lr")}, num_workers=2, num_gpus=0,
            seed=0, min_iter_time_s=0, buffer_size=50000, learning_starts=1000,
            train_batch_size=64, sample_batch_size=25, target_network_update_freq=1000,
            timesteps_per_iteration=2000,
            optimizer={"num_replay_buffer_shards": 2, "max_weight_sync_delay": 200}))
        out = _train_until(trainer, 150, 100_000)
        out["shards"] = trainer.optimizer.replay_stats()
        trainer.stop()
        return out
    finally:
        ray.shutdown()


def hpc_ray_pendulum(args, td3: bool = False) -> dict:
    from hpc_ray.rllib.agents.ddpg import DDPGTrainer, TD3Trainer
    cls = TD3Trainer if td3 else DDPGTrainer
    config = dict(TD3_QUICK if td3 else DDPG_TUNED, seed=0, min_iter_time_s=0)
    trainer = cls(env="Pendulum-v0", config=config)
    out = _train_until(trainer, -900, 100_000)
    # Keep going a little: "improving past -900".
    trainer.stop()
    return out


# --- Ray 2.60 -------------------------------------------------------------------------------


def ray_dqn(args) -> dict:
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    from ray.rllib.algorithms.dqn import DQNConfig
    t0 = time.perf_counter()
    config = (DQNConfig().environment("CartPole-v0").env_runners(num_env_runners=0)
              .training(n_step=3).debugging(seed=0))
    algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    reward, timesteps, curve = float("nan"), 0, []
    while timesteps < 50_000:
        result = algo.train()
        reward = result["env_runners"].get("episode_return_mean", float("nan"))
        timesteps = result.get("num_env_steps_sampled_lifetime") or \
            result["env_runners"].get("num_env_steps_sampled_lifetime", 0)
        curve.append([int(timesteps), round(float(reward), 1)])
        if reward >= 150:
            break
    wall = time.perf_counter() - t0
    algo.stop()
    ray.shutdown()
    return {"wall_s": wall, "setup_s": setup, "reward": float(reward),
            "timesteps": int(timesteps), "reached": bool(reward >= 150), "curve": curve[-40:]}


def ray_replay(args) -> dict:
    import numpy as np
    from ray.rllib.policy.sample_batch import SampleBatch
    from ray.rllib.utils.replay_buffers import PrioritizedReplayBuffer
    n = args.replay_size
    rng = np.random.default_rng(0)
    batches = [SampleBatch(**_replay_columns(rng, "terminateds")) for _ in range(n // 50)]
    rss0 = _rss()
    buf = PrioritizedReplayBuffer(capacity=n, alpha=0.6, storage_unit="timesteps")
    t0 = time.perf_counter()
    for b in batches:
        buf.add(b)
    insert = time.perf_counter() - t0
    rss = _rss() - rss0
    t0 = time.perf_counter()
    rounds = args.replay_rounds
    for _ in range(rounds):
        s = buf.sample(512, beta=0.4)
        buf.update_priorities(s["batch_indexes"], rng.random(512) + 1e-6)
    sample = time.perf_counter() - t0
    return {"inserted_per_s": n / insert, "sampled_per_s": rounds * 512 / sample,
            "rss_mb": rss / 1e6, "rows": len(buf)}


CHILDREN = {("hpc_ray", "dqn"): hpc_ray_dqn,
            ("hpc_ray", "dqn_small"): lambda a: hpc_ray_dqn(a, small=True),
            ("hpc_ray", "replay"): hpc_ray_replay, ("hpc_ray", "apex"): hpc_ray_apex,
            ("hpc_ray", "ddpg"): hpc_ray_pendulum,
            ("hpc_ray", "td3"): lambda a: hpc_ray_pendulum(a, td3=True),
            ("ray", "dqn"): ray_dqn, ("ray", "replay"): ray_replay}


# --- the parent ------------------------------------------------------------------------------


def run_child(system: str, workload: str, args) -> dict:
    python = args.ray_python if system == "ray" else sys.executable
    cmd = [python, str(HERE), "--child", system, "--workload", workload,
           "--replay-size", str(args.replay_size), "--replay-rounds", str(args.replay_rounds)]
    env = dict(os.environ)
    if system == "hpc_ray":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    else:
        env.pop("PYTHONPATH", None)
    log(f"{system} {workload} ...")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=args.timeout, start_new_session=True, cwd="/tmp")
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    if proc.returncode != 0:
        log(proc.stdout[-3000:], proc.stderr[-5000:])
        return {"error": f"exit {proc.returncode}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"  {({k: v for k, v in result.items() if k != 'curve'})}")
    return result


def _run_cell(d: dict) -> str:
    if "wall_s" not in d:
        return d.get("error", "-")
    mark = "" if d.get("reached") else " (NOT reached)"
    return f"{d['wall_s']:.1f} s, {d['timesteps']:,} steps, reward {d['reward']:.1f}{mark}"


def table(results: dict) -> str:
    h, r = results.get("hpc_ray", {}), results.get("ray", {})
    lines = ["| workload | hpc_ray | RLlib 2.60 | hpc_ray / RLlib |", "|---|---|---|---|"]
    for key, label, threshold in (("dqn", "DQN CartPole-v0 to 150 (default net, n_step 3)", 150),
                                  ("dqn_small", "DQN CartPole-v0 to 150 (CI's small net)", 150),
                                  ("apex", "Ape-X DQN CartPole-v0 to 150, 2 workers, "
                                           "2 shards", 150),
                                  ("ddpg", "DDPG Pendulum to -900 (0.7 tuned)", -900),
                                  ("td3", "TD3 Pendulum to -900", -900)):
        hd, rd = h.get(key), r.get(key)
        if hd is None and rd is None:
            continue
        ratio = "-"
        if hd and rd and hd.get("reached") and rd.get("reached"):
            ratio = f"{rd['wall_s'] / hd['wall_s']:.2f}x faster (wall)"
        lines.append(f"| {label} | {_run_cell(hd or {})} | {_run_cell(rd or {})} | {ratio} |")
    hr, rr = h.get("replay", {}), r.get("replay", {})
    for key, label in (("inserted_per_s", "replay insert (rows/s, batches of 50)"),
                       ("sampled_per_s", "replay sample + priority update (rows/s, 512)"),
                       ("rss_mb", "replay memory when full (RSS growth, MB)")):
        if key in hr or key in rr:
            hv, rv = hr.get(key, float("nan")), rr.get(key, float("nan"))
            ratio = f"{hv / rv:.2f}" if key in hr and key in rr and rv else "-"
            lines.append(f"| {label} | {hv:,.1f} | {rv:,.1f} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="hpc_ray,ray", help="hpc_ray and/or ray")
    parser.add_argument("--workloads", default="replay,dqn,dqn_small,apex,ddpg,td3")
    parser.add_argument("--replay-size", type=int, default=100_000)
    parser.add_argument("--replay-rounds", type=int, default=200)
    parser.add_argument("--ray-python", default=os.environ.get("RAY_PYTHON", sys.executable),
                        help="a python with ray[rllib], torch==2.13.0 and gymnasium")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/results/rllib-offpolicy-<date>.md")
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
    text = table(results)
    print(text)
    if args.save:
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        ray_version = subprocess.run([args.ray_python, "-c", "import ray; print(ray.__version__)"],
                                     capture_output=True, text=True).stdout.strip() or "-"
        path = RESULTS / f"rllib-offpolicy-{stamp}.md"
        path.write_text(
            f"# Off-policy RLlib benchmark, {stamp}\n\n"
            f"`python benchmarks/rllib_offpolicy.py {' '.join(sys.argv[1:])}`\n\n"
            f"Machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; Ray {ray_version}; load average before: "
            f"{load_before}, after: {os.getloadavg()}\n\n{text}\n\n"
            f"```json\n{json.dumps(results, indent=1)}\n```\n")
        log(f"saved {path}")


if __name__ == "__main__":
    main()
