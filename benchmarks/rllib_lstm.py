"""Recurrent policies: PPO with ``"use_lstm": True`` against the same PPO
without, on environments where memory is needed (hpc_ray only: Ray's own
torch LSTM is a later API).

    repeat_previous   each step shows a random token (0/1, one-hot); reward +1
                      for acting the previous step's token, -1 otherwise, 20
                      steps: at most 19, chance (and the best feed-forward) 0
    stateless_cartpole  CartPole-v1 with the two velocities removed from the
                      observation (RLlib's StatelessCartPole example): position
                      and angle only, so a policy must infer the velocities

Each run: one process, ``num_workers=0``, seed 0, until ``--steps`` env
steps or the target reward (``--target``, per env); it prints, per run, the
best mean episode reward, the steps and wall seconds to reach the target.

    python benchmarks/rllib_lstm.py                     # both envs, LSTM and feed-forward
    python benchmarks/rllib_lstm.py --envs stateless_cartpole --steps 300000 --save
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

HERE = Path(__file__).resolve()

#: Reward each env counts as solved (and the default budget of steps).
TARGETS = {"repeat_previous": (15.0, 40_000), "stateless_cartpole": (150.0, 400_000)}


class RepeatPrevious(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None) -> None:
        self.rng = np.random.default_rng((config or {}).get("seed", 0))

    def _show_token(self):
        self.token = int(self.rng.integers(2))
        return np.eye(2, dtype=np.float32)[self.token]

    def reset(self, *, seed=None, options=None):
        self.t, self.previous = 0, None
        return self._show_token(), {}

    def step(self, action):
        reward = 0.0 if self.previous is None else (1.0 if int(action) == self.previous else -1.0)
        self.previous, self.t = self.token, self.t + 1
        return self._show_token(), reward, self.t >= 20, False, {}


class StatelessCartPole(gym.Env):
    """CartPole-v1 observing only the cart's position and the pole's angle."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None) -> None:
        self.env = gym.make("CartPole-v1")

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed)
        return obs[[0, 2]].astype(np.float32), info

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        return obs[[0, 2]].astype(np.float32), reward, term, trunc, info


CONFIGS = {
    "repeat_previous": {"train_batch_size": 1000, "sample_batch_size": 200,
                        "sgd_minibatch_size": 200, "num_sgd_iter": 10, "lr": 3e-3,
                        "vf_share_layers": True,
                        "model": {"lstm_cell_size": 32, "max_seq_len": 20,
                                  "fcnet_hiddens": [32]}},
    "stateless_cartpole": {"train_batch_size": 4000, "sample_batch_size": 200,
                           "sgd_minibatch_size": 500, "num_sgd_iter": 10, "lr": 1e-3,
                           "gamma": 0.99, "lambda": 0.95, "vf_share_layers": True,
                           "vf_loss_coeff": 1e-3, "entropy_coeff": 0.0,
                           "model": {"lstm_cell_size": 64, "max_seq_len": 20,
                                     "fcnet_hiddens": [64]}},
}


def run(env_name: str, use_lstm: bool, steps: int, target: float) -> dict:
    from hpc_ray import tune
    from hpc_ray.rllib.agents import ppo
    tune.register_env(env_name, lambda c: {"repeat_previous": RepeatPrevious,
                                           "stateless_cartpole": StatelessCartPole}[env_name](c))
    config = json.loads(json.dumps(CONFIGS[env_name]))
    config["model"]["use_lstm"] = use_lstm
    trainer = ppo.PPOTrainer(env=env_name, config=dict(config, num_workers=0, seed=0))
    start = time.perf_counter()
    best, reached = -float("inf"), None
    result = {"timesteps_total": 0}
    while result["timesteps_total"] < steps:
        result = trainer.train()
        reward = result["episode_reward_mean"]
        best = max(best, reward)
        if reached is None and reward >= target:
            reached = (result["timesteps_total"], time.perf_counter() - start)
            break
    trainer.stop()
    return {"env": env_name, "model": "LSTM" if use_lstm else "feed-forward",
            "best_reward": round(best, 2), "steps": result["timesteps_total"],
            "wall_s": round(time.perf_counter() - start, 1),
            "reached_target": reached is not None, "target": target}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="repeat_previous,stateless_cartpole")
    parser.add_argument("--steps", type=int, default=0, help="budget (default: per env)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/results/")
    args = parser.parse_args()
    rows = []
    for env_name in args.envs.split(","):
        target, budget = TARGETS[env_name]
        for use_lstm in (True, False):
            row = run(env_name, use_lstm, args.steps or budget, target)
            print(json.dumps(row), flush=True)
            rows.append(row)
    lines = ["| env | model | best mean reward | target | reached | steps | wall s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['env']} | {r['model']} | {r['best_reward']} | {r['target']} | "
              f"{'yes' if r['reached_target'] else 'no'} | {r['steps']} | {r['wall_s']} |"
              for r in rows]
    table = "\n".join(lines)
    print(table)
    if args.save:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
        out = HERE.parent / "results" / f"rllib-lstm-{stamp}.md"
        out.write_text(f"# PPO with and without use_lstm ({platform.node()}, "
                       f"{platform.processor() or platform.machine()})\n\n"
                       f"`python benchmarks/rllib_lstm.py {' '.join(sys.argv[1:])}`\n\n"
                       f"{table}\n")
        print(f"saved {out}")


if __name__ == "__main__":
    main()
