"""Ray 0.7's documented Policy, model and episode interfaces, in-process.

What the sampler passes to ``compute_actions`` (RNN state, previous actions and
rewards, infos, episodes) and records in the batch, Dict observations reaching
a custom model unflattened, ``MultiAgentEpisode``'s accessors, ``soft_horizon``
and the like. Each test runs a ``RolloutWorker`` or a ``num_workers=0``
trainer for a few steps.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from hpc_ray.rllib.agents import pg
from hpc_ray.rllib.evaluation import MultiAgentEpisode, RolloutWorker
from hpc_ray.rllib.models import ModelCatalog
from hpc_ray.rllib.models.pytorch.model import TorchModel
from hpc_ray.rllib.policy.policy import Policy


class CountEnv(gym.Env):
    """obs = reward = info["t"] = the step count; episodes of ``length`` steps."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None) -> None:
        self.length = (config or {}).get("length", 5)
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        self.resets += 1
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        return np.array([self.t], np.float32), float(self.t), done, False, {"t": self.t}


class CounterPolicy(Policy):
    """The docs' CustomPolicy ("RLlib Concepts"): the required ``state_batches``
    argument, one RNN state that counts the episode's steps."""

    def __init__(self, observation_space, action_space, config) -> None:
        Policy.__init__(self, observation_space, action_space, config)
        self.calls: list[dict] = []

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]

    def compute_actions(self, obs_batch, state_batches, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None, **kwargs):
        self.calls.append({"state": np.array(state_batches[0]),
                           "prev_action": list(prev_action_batch),
                           "prev_reward": list(prev_reward_batch),
                           "info": list(info_batch), "episodes": list(episodes)})
        state = np.asarray(state_batches[0])
        actions = (state[:, 0] % 2).astype(np.int64)
        return actions, [state + 1], {"custom_col": [7] * len(obs_batch)}

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass


def test_sampler_passes_and_records_state_prev_actions_rewards_infos_episodes():
    worker = RolloutWorker(lambda c: CountEnv(c), CounterPolicy, batch_steps=10)
    batch = worker.sample()
    # Two 5-step episodes: the state restarts from get_initial_state() at each.
    assert batch["state_in_0"][:, 0].tolist() == [0, 1, 2, 3, 4] * 2
    assert batch["state_out_0"][:, 0].tolist() == [1, 2, 3, 4, 5] * 2
    assert batch["actions"].tolist() == [0, 1, 0, 1, 0] * 2
    assert batch["prev_actions"].tolist() == [0, 0, 1, 0, 1] * 2
    assert batch["rewards"].tolist() == [1, 2, 3, 4, 5] * 2
    assert batch["prev_rewards"].tolist() == [0, 1, 2, 3, 4] * 2
    assert [i["t"] for i in batch["infos"]] == [1, 2, 3, 4, 5] * 2
    assert batch["custom_col"].tolist() == [7] * 10
    calls = worker.get_policy().calls
    assert [c["prev_action"][0] for c in calls[:5]] == [0, 0, 1, 0, 1]
    assert [c["prev_reward"][0] for c in calls[:5]] == [0, 1, 2, 3, 4]
    assert calls[0]["info"] == [{}] and calls[3]["info"] == [{"t": 3}]
    assert isinstance(calls[0]["episodes"][0], MultiAgentEpisode)
    assert calls[0]["episodes"][0] is calls[4]["episodes"][0]
    assert calls[5]["episodes"][0] is not calls[4]["episodes"][0]


def test_truncated_trajectories_carry_prev_action_and_state_across_batches():
    worker = RolloutWorker(lambda c: CountEnv({"length": 8}), CounterPolicy, batch_steps=3)
    first, second = worker.sample(), worker.sample()
    assert second["state_in_0"][:, 0].tolist() == [3, 4, 5]
    assert second["prev_actions"].tolist() == [first["actions"][-1], 1, 0]
    assert second["prev_rewards"].tolist() == [3, 4, 5]


def test_builtin_policy_batches_have_the_new_columns():
    trainer = pg.PGTrainer(env="CartPole-v0", config={"num_workers": 0, "seed": 0,
                                                       "train_batch_size": 50,
                                                       "sample_batch_size": 50})
    batch = trainer.workers.local_worker().sample()
    assert {"prev_actions", "prev_rewards", "infos"} <= set(batch.keys())
    assert "state_in_0" not in batch.keys()
    assert trainer.train()["timesteps_total"] == 50
    trainer.stop()


# --- Dict and Tuple observations reach custom models unflattened ----------------------


class DictObsEnv(gym.Env):
    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Dict({
        "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        "flag": gym.spaces.Discrete(3),
        "pair": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2, 2)))),
    })

    def __init__(self, config=None) -> None:
        pass

    def _obs(self):
        return {"pos": np.array([0.5, -0.5], np.float32), "flag": 2,
                "pair": (1, np.full((2, 2), 0.25, np.float32))}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= 5, False, {}


class DictObsModel(TorchModel):
    seen: list = []

    def __init__(self, obs_space, num_outputs, options) -> None:
        TorchModel.__init__(self, obs_space, num_outputs, options)
        DictObsModel.seen.append(("space", obs_space.original_space))
        self.lin = nn.Linear(2 + 3 + 2 + 4, num_outputs)
        self.v = nn.Linear(2 + 3 + 2 + 4, 1)

    def _forward(self, input_dict, hidden_state):
        obs = input_dict["obs"]
        DictObsModel.seen.append((obs, input_dict["obs_flat"]))
        flag, box = obs["pair"]
        x = torch.cat([obs["pos"], obs["flag"], flag, box.reshape(len(box), -1)], -1)
        return self.lin(x), x, self.v(x).squeeze(-1), hidden_state


def test_dict_and_tuple_observations_reach_custom_models_unflattened():
    ModelCatalog.register_custom_model("test_dict_obs_model", DictObsModel)
    DictObsModel.seen.clear()
    trainer = pg.PGTrainer(env=DictObsEnv, config={
        "num_workers": 0, "train_batch_size": 20, "sample_batch_size": 20,
        "model": {"custom_model": "test_dict_obs_model"}})
    assert trainer.train()["timesteps_total"] == 20
    assert trainer.compute_action(DictObsEnv()._obs()) in (0, 1)
    assert type(DictObsModel.seen[0][1]).__name__ == "Dict"
    obs, flat = DictObsModel.seen[-1]
    assert obs["pos"].tolist() == [[0.5, -0.5]]
    assert obs["flag"].tolist() == [[0.0, 0.0, 1.0]]  # Discrete: one-hot
    assert obs["pair"][0].tolist() == [[0.0, 1.0]]
    assert obs["pair"][1].shape == (1, 2, 2) and obs["pair"][1].sum() == 1.0
    assert flat.shape == (1, 11)
    trainer.stop()


def test_builtin_model_reads_dict_observations_flat():
    trainer = pg.PGTrainer(env=DictObsEnv, config={
        "num_workers": 0, "train_batch_size": 20, "sample_batch_size": 20,
        "model": {"fcnet_hiddens": [8]}})
    assert trainer.train()["episode_reward_mean"] == 5.0
    assert trainer.compute_action(DictObsEnv()._obs()) in (0, 1)
    trainer.stop()


# --- Trainer.compute_action ------------------------------------------------------------


def test_compute_action_clips_box_actions_unless_clip_actions_is_false():
    obs = np.array([1.0, 0.0, 0.0], np.float32)
    ranges = {}
    for clip in (True, False):
        trainer = pg.PGTrainer(env="Pendulum-v0", config={
            "num_workers": 0, "seed": 0, "clip_actions": clip, "model": {"fcnet_hiddens": [8]}})
        acts = np.array([trainer.compute_action(obs) for _ in range(200)])
        ranges[clip] = (float(acts.min()), float(acts.max()))
        trainer.stop()
    assert -2.0 <= ranges[True][0] and ranges[True][1] <= 2.0
    assert ranges[True][0] == -2.0 or ranges[True][1] == 2.0  # clipped, not shrunk
    assert ranges[False][0] < -2.0 or ranges[False][1] > 2.0


# --- spaces of the old gym package ------------------------------------------------------


def _old_gym_spaces():
    """Classes named and shaped as the ``gym`` package's spaces (not gymnasium's),
    so the test needs no ``gym`` install."""

    class Space:
        pass

    class Discrete(Space):
        def __init__(self, n):
            self.n, self.shape, self.dtype = n, (), np.int64

    class Box(Space):
        def __init__(self, low, high, shape, dtype):
            self.low, self.high = np.full(shape, low, dtype), np.full(shape, high, dtype)
            self.shape, self.dtype = shape, dtype

    class Tuple(Space):
        def __init__(self, spaces):
            self.spaces = tuple(spaces)

    class Dict(Space):
        def __init__(self, spaces):
            self.spaces = dict(sorted(spaces.items()))

    return Discrete, Box, Tuple, Dict


class OldGymCorridor:
    """Ray 0.7's SimpleCorridor on old gym spaces and the old reset/step API."""

    def __init__(self, config) -> None:
        Discrete, Box, Tuple, Dict = _old_gym_spaces()
        self.action_space = gym.spaces.Discrete(2)
        self.kind = config["kind"]
        pos, extra = Discrete(6), Box(0.0, 1.0, (2,), np.float32)
        self.observation_space = (Tuple([pos, extra]) if self.kind == "tuple"
                                  else Dict({"pos": pos, "extra": extra}))

    def _obs(self):
        extra = np.array([0.5, 0.25], np.float32)
        return (self.pos, extra) if self.kind == "tuple" else {"pos": self.pos, "extra": extra}

    def reset(self):
        self.pos = 0
        return self._obs()

    def step(self, action):
        self.pos = min(5, self.pos + 1) if action == 1 else max(0, self.pos - 1)
        done = self.pos >= 5
        return self._obs(), 1.0 if done else -0.1, done, {}


def test_old_gym_tuple_and_dict_observation_spaces_are_flattened():
    from hpc_ray.rllib.models.preprocessors import get_preprocessor
    for kind in ("tuple", "dict"):
        env = OldGymCorridor({"kind": kind})
        prep = get_preprocessor(env.observation_space)(env.observation_space)
        env.reset()
        env.pos = 3
        flat = prep.transform(env._obs())
        # Dict keys in order ("extra", "pos"); Discrete one-hot.
        expected = ([0, 0, 0, 1, 0, 0, 0.5, 0.25] if kind == "tuple"
                    else [0.5, 0.25, 0, 0, 0, 1, 0, 0])
        assert flat.tolist() == expected
        trainer = pg.PGTrainer(env=OldGymCorridor, config={
            "num_workers": 0, "env_config": {"kind": kind}, "train_batch_size": 40,
            "sample_batch_size": 40, "model": {"fcnet_hiddens": [8]}})
        assert trainer.train()["timesteps_total"] == 40
        assert trainer.compute_action(env._obs()) in (0, 1)
        trainer.stop()


# --- custom models under DQN and DDPG ---------------------------------------------------


class CountingModel(TorchModel):
    forwards = 0

    def __init__(self, obs_space, num_outputs, options) -> None:
        TorchModel.__init__(self, obs_space, num_outputs, options)
        self.hidden = nn.Linear(int(np.prod(obs_space.shape)), 6)
        self.out = nn.Linear(6, num_outputs)

    def _forward(self, input_dict, hidden_state):
        CountingModel.forwards += 1
        features = torch.relu(self.hidden(input_dict["obs_flat"]))
        return self.out(features), features, features.sum(-1), hidden_state


def test_dqn_uses_the_custom_model_as_its_feature_network_and_ddpg_refuses_it():
    from hpc_ray.rllib.agents import ddpg, dqn
    ModelCatalog.register_custom_model("test_counting_model", CountingModel)
    trainer = dqn.DQNTrainer(env="CartPole-v0", config={
        "num_workers": 0, "seed": 0, "timesteps_per_iteration": 100, "learning_starts": 50,
        "train_batch_size": 16, "buffer_size": 1000, "hiddens": [4],
        "model": {"custom_model": "test_counting_model"}})
    policy = trainer.get_policy()
    assert isinstance(policy.model.custom, CountingModel)
    assert isinstance(policy.target_model.custom, CountingModel)
    assert policy.model.advantage[0].in_features == 6  # the Q head reads its features
    before = CountingModel.forwards
    assert trainer.train()["timesteps_total"] >= 100
    assert CountingModel.forwards > before + 100
    trainer.stop()
    with pytest.raises(ValueError, match="custom_model.*test_counting_model"):
        ddpg.DDPGTrainer(env="Pendulum-v0", config={
            "num_workers": 0, "model": {"custom_model": "test_counting_model"}})


def test_exploration_fraction_zero_gives_the_final_epsilon_at_once():
    from hpc_ray.rllib.agents import dqn
    trainer = dqn.DQNTrainer(env="CartPole-v0", config={
        "num_workers": 0, "timesteps_per_iteration": 50, "learning_starts": 1000,
        "exploration_fraction": 0, "exploration_final_eps": 0.05, "hiddens": [8],
        "model": {"fcnet_hiddens": [8]}})
    trainer.train()
    assert trainer.get_policy().epsilon == pytest.approx(0.05)
    trainer.stop()
    with pytest.raises(ValueError, match=r"exploration_fraction'\] must be in \[0, 1\]"):
        dqn.DQNTrainer(env="CartPole-v0", config={"num_workers": 0,
                                                  "exploration_fraction": -0.1})


def test_export_policy_checkpoint_honours_filename_prefix(tmp_path):
    trainer = pg.PGTrainer(env="CartPole-v0", config={"num_workers": 0,
                                                       "model": {"fcnet_hiddens": [8]}})
    trainer.export_policy_checkpoint(str(tmp_path), filename_prefix="my_policy")
    trainer.export_policy_checkpoint(str(tmp_path / "default"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default", "my_policy.pt"]
    assert [p.name for p in (tmp_path / "default").iterdir()] == ["model.pt"]
    state = torch.load(tmp_path / "my_policy.pt", weights_only=False)
    weights = trainer.get_policy().get_weights()
    assert all(np.array_equal(state["weights"][k], v) for k, v in weights.items())
    trainer.stop()


# --- soft_horizon ----------------------------------------------------------------------------


def test_soft_horizon_ends_episodes_without_resetting_the_env():
    out = {}
    for soft in (False, True):
        worker = RolloutWorker(lambda c: CountEnv({"length": 1000}), CounterPolicy,
                               batch_steps=12, episode_horizon=4, soft_horizon=soft)
        batch = worker.sample()
        out[soft] = (worker.env.resets, batch["obs"][:, 0].tolist(), batch["dones"].tolist(),
                     [m.episode_length for m in worker.get_metrics()],
                     len(set(batch["eps_id"].tolist())))
        # The RNN state is kept across a soft reset, restarted at a real one.
        assert batch["state_in_0"][:, 0].tolist() == (list(range(12)) if soft
                                                      else [0, 1, 2, 3] * 3)
    resets, obs, dones, lengths, episodes = out[False]
    assert resets == 4 and obs == [0, 1, 2, 3] * 3 and dones == [False, False, False, True] * 3
    assert lengths == [4, 4, 4] and episodes == 3
    resets, obs, dones, lengths, episodes = out[True]
    assert resets == 1 and obs == list(range(12)) and not any(dones)
    assert lengths == [4, 4, 4] and episodes == 3


# --- SampleBatchBuilder ---------------------------------------------------------------------


def test_docs_external_experiences_example_writes_batches_json_reader_reads(tmp_path):
    # The docs' "Converting external experiences to batch format", shortened.
    from hpc_ray.rllib.evaluation.sample_batch_builder import SampleBatchBuilder
    from hpc_ray.rllib.models.preprocessors import get_preprocessor
    from hpc_ray.rllib.offline.json_reader import JsonReader
    from hpc_ray.rllib.offline.json_writer import JsonWriter
    batch_builder = SampleBatchBuilder()
    writer = JsonWriter(str(tmp_path))
    env = CountEnv({"length": 3})
    prep = get_preprocessor(env.observation_space)(env.observation_space)
    for eps_id in range(2):
        obs, _ = env.reset()
        prev_action, prev_reward, done, t = 0, 0.0, False, 0
        while not done:
            action = 1
            new_obs, rew, done, _, info = env.step(action)
            batch_builder.add_values(
                t=t, eps_id=eps_id, agent_index=0, obs=prep.transform(obs), actions=action,
                action_prob=1.0, rewards=rew, prev_actions=prev_action,
                prev_rewards=prev_reward, dones=done, infos=info,
                new_obs=prep.transform(new_obs))
            obs, prev_action, prev_reward, t = new_obs, action, rew, t + 1
        writer.write(batch_builder.build_and_reset())
    writer.close()
    first, second = JsonReader(str(tmp_path)).next(), JsonReader(str(tmp_path)).next()
    assert first.count == second.count == 3
    batch = first if first["eps_id"][0] == 0 else second
    assert batch["rewards"].tolist() == [1, 2, 3] and batch["t"].tolist() == [0, 1, 2]
    assert batch["prev_rewards"].tolist() == [0, 1, 2] and batch["dones"].tolist()[-1]
    assert [i["t"] for i in batch["infos"]] == [1, 2, 3]


def test_multi_agent_builder_postprocesses_per_agent_and_returns_per_policy():
    from hpc_ray.rllib.evaluation import (MultiAgentSampleBatchBuilder, PolicyGraph,
                                          TorchPolicyGraph)
    from hpc_ray.rllib.policy import TorchPolicy

    class Marking(CounterPolicy):
        def postprocess_trajectory(self, batch, other_agent_batches=None, episode=None):
            batch["seen_others"] = np.full(batch.count, len(other_agent_batches))
            return batch

    space = CountEnv.observation_space
    policies = {"a": Marking(space, CountEnv.action_space, {}),
                "b": Marking(space, CountEnv.action_space, {})}
    builder = MultiAgentSampleBatchBuilder(policies, clip_rewards=True)
    for t in range(2):
        builder.add_values("x", "a", obs=[t], rewards=-5.0)
        builder.add_values("y", "b", obs=[t], rewards=3.0)
        builder.count += 1
    out = builder.build_and_reset()
    assert out.count == 2 and sorted(out.policy_batches) == ["a", "b"]
    assert out.policy_batches["a"]["rewards"].tolist() == [-1, -1]
    assert out.policy_batches["b"]["seen_others"].tolist() == [1, 1]
    assert not builder.has_pending_agent_data() and builder.total() == 0
    assert PolicyGraph is Policy and TorchPolicyGraph is TorchPolicy


# --- MultiAgentEpisode ----------------------------------------------------------------------


def test_episode_accessors_have_ray_07_semantics_and_extra_batches_join_the_sample():
    from hpc_ray.rllib.evaluation import MultiAgentSampleBatchBuilder
    seen = []

    def on_episode_step(info):
        ep = info["episode"]
        seen.append((ep.last_raw_obs_for().tolist(), ep.last_observation_for().tolist(),
                     int(ep.last_action_for()), int(ep.prev_action_for()),
                     ep.prev_reward_for(), ep.rnn_state_for()[0].tolist(),
                     sorted(ep.last_pi_info_for()), ep.policy_for()))

    def on_episode_start(info):
        ep = info["episode"]
        assert int(ep.last_action_for()) == 0 and ep.rnn_state_for()[0].tolist() == [0.0]
        assert isinstance(ep.new_batch_builder(), MultiAgentSampleBatchBuilder)
        assert isinstance(ep.batch_builder, MultiAgentSampleBatchBuilder)

    def on_postprocess_traj(info):
        info["episode"].add_extra_batch(info["post_batch"].copy())

    worker = RolloutWorker(lambda c: CountEnv(c), CounterPolicy, batch_steps=5, callbacks={
        "on_episode_step": on_episode_step, "on_episode_start": on_episode_start,
        "on_postprocess_traj": on_postprocess_traj})
    batch = worker.sample()
    assert batch.count == 10  # the 5 sampled rows and their copy
    assert batch["rewards"].tolist() == [1, 2, 3, 4, 5] * 2
    assert [s[0] for s in seen] == [[1.0], [2.0], [3.0], [4.0], [5.0]]
    assert [s[1] for s in seen] == [[1.0], [2.0], [3.0], [4.0], [5.0]]
    assert [s[2] for s in seen] == [0, 1, 0, 1, 0]  # last action
    assert [s[3] for s in seen] == [0, 0, 1, 0, 1]  # the one before
    assert [s[4] for s in seen] == [0, 1, 2, 3, 4]  # the reward before the last
    assert [s[5] for s in seen] == [[1.0], [2.0], [3.0], [4.0], [5.0]]
    assert seen[0][6] == ["custom_col", "state_in_0", "state_out_0"]
    assert {s[7] for s in seen} == {"default_policy"}
