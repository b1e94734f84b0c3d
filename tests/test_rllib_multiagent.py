"""Issue 37: agent groups and QMIX on the docs' two-step game, in the pytest process.

The two-step game (Rashid et al.; Ray's examples/twostep_game.py): agent 0's first
action picks state 2A (both then get 7 whatever they do) or 2B (8 if both pick 1,
0 if both pick 0, 1 otherwise). Independent learners settle for 7; QMIX finds 8.
Two-policy multi-agent DQN on workers is in tests/test_rllib_apex.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium.spaces import Box, Discrete, Tuple

from hpc_ray.rllib import MultiAgentEnv, register_env
from hpc_ray.rllib.agents.qmix import QMixTrainer
from hpc_ray.rllib.env.group_agents_wrapper import GROUP_REWARDS


class TwoStepGame(MultiAgentEnv):
    action_space = Discrete(2)
    observation_space = Box(0.0, 1.0, (3,), np.float32)

    def __init__(self, env_config=None):
        self.state = None

    def reset(self):
        self.state = np.array([1, 0, 0], np.float32)
        return {0: self.state, 1: self.state}

    def step(self, action_dict):
        index = int(np.flatnonzero(self.state)[0])
        if index == 0:
            self.state = np.array([0, 1, 0] if action_dict[0] == 0 else [0, 0, 1], np.float32)
            rew, done = 0.0, False
        elif index == 1:
            rew, done = 7.0, True
        else:
            a, b = action_dict[0], action_dict[1]
            rew, done = (8.0 if a == b == 1 else 0.0 if a == b == 0 else 1.0), True
        return ({0: self.state, 1: self.state}, {0: rew / 2, 1: rew / 2},
                {"__all__": done}, {})


OBS = Tuple([TwoStepGame.observation_space] * 2)
ACT = Tuple([TwoStepGame.action_space] * 2)
register_env("grouped_twostep", lambda config: TwoStepGame(config).with_agent_groups(
    {"group_1": [0, 1]}, obs_space=OBS, act_space=ACT))

CONFIG = {"seed": 0, "min_iter_time_s": 0, "exploration_final_eps": 0.0,
          "schedule_max_timesteps": 20000, "learning_starts": 200,
          "target_network_update_freq": 200,
          "multiagent": {"policies": {"pol1": (None, OBS, ACT, {})},
                         "policy_mapping_fn": lambda agent_id: "pol1"}}


def test_with_agent_groups_acts_and_rewards_as_one_agent():
    env = TwoStepGame().with_agent_groups({"group_1": [0, 1]}, obs_space=OBS, act_space=ACT)
    obs = env.reset()
    assert list(obs) == ["group_1"] and len(obs["group_1"]) == 2
    obs, rew, done, info = env.step({"group_1": [1, 0]})
    assert rew == {"group_1": 0.0} and done == {"__all__": False}
    obs, rew, done, info = env.step({"group_1": [1, 1]})
    assert rew == {"group_1": 8.0} and info["group_1"][GROUP_REWARDS] == [4.0, 4.0]
    assert done["__all__"]
    with pytest.raises(ValueError, match="2 agents but got 1"):
        env.step({"group_1": [1]})
    with pytest.raises(ValueError, match="in two groups"):
        TwoStepGame().with_agent_groups({"a": [0, 1], "b": [1]})


def test_qmix_finds_the_two_step_optimum_and_restores(tmp_path):
    trainer = QMixTrainer(env="grouped_twostep", config=dict(CONFIG, mixer="qmix"))
    for _ in range(4):
        result = trainer.train()
    assert result["episode_reward_mean"] == 8.0, result["episode_reward_mean"]
    start = [np.array([1, 0, 0], np.float32)] * 2
    assert trainer.compute_action(start, policy_id="pol1", explore=False)[0] == 1
    end = [np.array([0, 0, 1], np.float32)] * 2
    assert list(trainer.compute_action(end, policy_id="pol1", explore=False)) == [1, 1]
    path = trainer.save(str(tmp_path / "ckpt"))
    trainer.stop()
    other = QMixTrainer(env="grouped_twostep", config=dict(CONFIG, mixer="qmix", seed=4))
    other.restore(path)
    q = trainer.get_policy("pol1").compute_actions([np.concatenate(end)], explore=False)[2]
    q2 = other.get_policy("pol1").compute_actions([np.concatenate(end)], explore=False)[2]
    assert np.array_equal(q["q_values"], q2["q_values"])
    other.stop()


def test_independent_learners_settle_for_seven():
    trainer = QMixTrainer(env="grouped_twostep", config=dict(CONFIG, mixer=None))
    for _ in range(4):
        result = trainer.train()
    assert result["episode_reward_mean"] == 7.0, result["episode_reward_mean"]
    trainer.stop()


def test_qmix_bad_configs_name_the_fix():
    with pytest.raises(ValueError, match="'qmix', 'vdn' or None"):
        QMixTrainer(env="grouped_twostep", config=dict(CONFIG, mixer="sum"))
    with pytest.raises(ValueError, match="with_agent_groups"):
        QMixTrainer(env="CartPole-v0", config={"seed": 0})
