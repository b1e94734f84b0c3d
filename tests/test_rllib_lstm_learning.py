"""An LSTM policy learns what a feed-forward one cannot: to answer with the
token it saw one step ago.

``RepeatPrevious``: each step shows a random token (0 or 1, one-hot); the
reward is +1 when the action is the token of the step before, -1 otherwise
(0 on the first step), 20 steps an episode: at most 19. The observation says
nothing about the previous token, so a feed-forward policy's expected reward
is 0 whatever it learns. PPO, ``num_workers=0``, 10,000 steps each (about 6 s
each here). The long runs (StatelessCartPole too) are in
``benchmarks/rllib_lstm.py``.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from hpc_ray import tune
from hpc_ray.rllib.agents import ppo
from hpc_ray.rllib.models.pytorch.lstm import LSTM


class RepeatPrevious(gym.Env):
    """Reward +1 for repeating the previous step's token, -1 otherwise."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None) -> None:
        config = config or {}
        self.length = config.get("length", 20)
        self.rng = np.random.default_rng(config.get("seed", 0))

    def _show_token(self) -> np.ndarray:
        self.token = int(self.rng.integers(2))
        return np.eye(2, dtype=np.float32)[self.token]

    def reset(self, *, seed=None, options=None):
        self.t, self.previous = 0, None
        return self._show_token(), {}

    def step(self, action):
        reward = 0.0 if self.previous is None else (1.0 if int(action) == self.previous else -1.0)
        self.previous, self.t = self.token, self.t + 1
        return self._show_token(), reward, self.t >= self.length, False, {}


def _train(use_lstm: bool, iterations: int = 10) -> tuple[float, int]:
    tune.register_env("repeat_previous", lambda config: RepeatPrevious(config))
    trainer = ppo.PPOTrainer(env="repeat_previous", config={
        "num_workers": 0, "seed": 0, "train_batch_size": 1000, "sample_batch_size": 200,
        "sgd_minibatch_size": 200, "num_sgd_iter": 10, "lr": 3e-3, "vf_share_layers": True,
        "model": {"use_lstm": use_lstm, "lstm_cell_size": 32, "max_seq_len": 20,
                  "fcnet_hiddens": [32]}})
    assert isinstance(trainer.get_policy().model, LSTM) == use_lstm
    for _ in range(iterations):
        result = trainer.train()
    trainer.stop()
    return result["episode_reward_mean"], result["timesteps_total"]


def test_lstm_policy_remembers_the_previous_token_and_a_feed_forward_one_cannot():
    lstm_reward, lstm_steps = _train(use_lstm=True)
    ff_reward, ff_steps = _train(use_lstm=False)
    assert lstm_steps == ff_steps == 10_000
    # Chance is 0; the LSTM policy gets most of the 19 answers right.
    assert lstm_reward > 8.0, lstm_reward
    assert ff_reward < 3.0, ff_reward
