"""Issue 37: value-based and off-policy RLlib: replay buffers, DQN and its options,
offline JSON output/input with IS/WIS estimates, MARWIL, in the pytest process.

DQN reaches Ray's CartPole regression threshold (150 within 50k timesteps) with a
small network sized for CI; the default-network run is benchmarks/rllib_offpolicy.py's.
Ape-X, DDPG/TD3 and multi-agent runs on workers are in tests/test_rllib_apex.py.
"""
from __future__ import annotations

import glob
import json
import os
import pickle

import gymnasium as gym
import numpy as np
import pytest

from hpc_ray.rllib import SampleBatch
from hpc_ray.rllib.agents import dqn, marwil, ppo
from hpc_ray.rllib.agents.registry import get_agent_class
from hpc_ray.rllib.offline import (IOContext, JsonReader, JsonWriter, MixedInput,
                                   WeightedImportanceSamplingEstimator)
from hpc_ray.rllib.optimizers.replay_buffer import PrioritizedReplayBuffer, ReplayBuffer

#: A DQN sized for a 2-core CI machine (Ray's tuned example uses n_step 3 as well).
FAST_DQN = {"num_workers": 0, "seed": 0, "n_step": 3, "min_iter_time_s": 0,
            "model": {"fcnet_hiddens": [64]}, "hiddens": [64], "lr": 1e-3,
            "target_network_update_freq": 250, "schedule_max_timesteps": 20000,
            "exploration_fraction": 0.5, "learning_starts": 500, "train_batch_size": 64,
            "sample_batch_size": 8}


def _transitions(n: int, start: int = 0) -> SampleBatch:
    i = np.arange(start, start + n)
    return SampleBatch(obs=np.stack([i, i], 1).astype(np.float32), actions=i % 2,
                       rewards=i.astype(np.float32), new_obs=np.stack([i, i], 1) + 1.0,
                       dones=np.zeros(n, bool))


# --- replay buffers ----------------------------------------------------------------------


def test_replay_buffer_is_a_ring_of_columns():
    buf = ReplayBuffer(5, seed=0)
    buf.add_batch(_transitions(3))
    buf.add_batch(_transitions(4, start=3))
    assert len(buf) == 5
    sample = buf.sample(100)
    # 0 and 1 were overwritten by 5 and 6: only the newest five remain.
    assert set(sample["rewards"].tolist()) == {2.0, 3.0, 4.0, 5.0, 6.0}
    assert sample["obs"].shape == (100, 2) and sample["obs"].dtype == np.float32
    assert buf.stats()["added_count"] == 7 and buf.stats()["sampled_count"] == 100
    with pytest.raises(ValueError, match="empty replay buffer"):
        ReplayBuffer(3).sample(1)
    with pytest.raises(ValueError, match="size must be an int >= 1"):
        ReplayBuffer(0)


def test_replay_buffer_keeps_the_extra_columns_every_source_has():
    # A sampler's batch has q_values; offline data in the docs' format has t and
    # action_prob instead: mixed, the buffer keeps the transitions.
    buf = ReplayBuffer(10, seed=0)
    sampled = _transitions(3)
    sampled["q_values"] = np.ones((3, 2), np.float32)
    offline = _transitions(3, start=3)
    offline["t"] = np.arange(3)
    buf.add_batch(sampled)
    buf.add_batch(offline)
    buf.add_batch(sampled)
    sample = buf.sample(50)
    assert sorted(sample.keys()) == ["actions", "batch_indexes", "dones", "new_obs", "obs",
                                     "rewards"]
    assert set(sample["rewards"].tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}
    no_dones = SampleBatch({k: v for k, v in _transitions(2).items() if k != "dones"})
    with pytest.raises(ValueError, match="lacks column 'dones'"):
        buf.add_batch(no_dones)


def test_prioritized_replay_samples_by_priority_with_importance_weights():
    buf = PrioritizedReplayBuffer(8, alpha=1.0, seed=0)
    idx = buf.add_batch(_transitions(4))
    buf.update_priorities(idx, [1.0, 1.0, 1.0, 97.0])
    sample = buf.sample(1000, beta=1.0)
    share = float(np.mean(sample["rewards"] == 3.0))
    assert 0.93 < share < 1.0
    # The rarest row weighs most; the weights are normalized to at most 1.
    w = sample["weights"]
    assert w.max() == pytest.approx(1.0)
    assert w[sample["rewards"] == 3.0].max() < w[sample["rewards"] != 3.0].min()
    assert set(sample["batch_indexes"].tolist()) <= {0, 1, 2, 3}
    # New rows enter at the highest priority seen.
    buf.add_batch(_transitions(1, start=4))
    assert np.mean(buf.sample(1000)["rewards"] == 4.0) > 0.3
    with pytest.raises(ValueError, match="prioritized_replay_eps"):
        buf.update_priorities([0], [0.0])


# --- DQN ------------------------------------------------------------------------------------


def test_dqn_reaches_ray_threshold_on_cartpole():
    trainer = dqn.DQNTrainer(env="CartPole-v0", config=FAST_DQN)
    result = {"episode_reward_mean": 0.0, "timesteps_total": 0}
    while result["episode_reward_mean"] < 150 and result["timesteps_total"] < 50_000:
        result = trainer.train()
    assert result["episode_reward_mean"] >= 150, result["timesteps_total"]
    info = result["info"]
    assert info["num_target_updates"] > 10
    assert info["min_exploration"] < 0.5
    assert info["learner"]["default_policy"]["mean_q"] > 5
    trainer.stop()


@pytest.mark.parametrize("options", [
    {"num_atoms": 11, "v_min": 0.0, "v_max": 50.0},
    {"noisy": True, "exploration_final_eps": 0.0},
    {"prioritized_replay": False, "dueling": False, "double_q": False},
    {"soft_q": True, "worker_side_prioritization": True},
], ids=["distributional", "noisy", "plain", "soft_q"])
def test_dqn_options_learn_something(options):
    trainer = dqn.DQNTrainer(env="CartPole-v0", config=dict(FAST_DQN, **options))
    rewards = [trainer.train()["episode_reward_mean"] for _ in range(8)]
    assert rewards[-1] > max(30.0, rewards[0]), rewards
    trainer.stop()


def test_dqn_save_restore_gives_the_same_actions(tmp_path):
    trainer = dqn.DQNTrainer(env="CartPole-v0", config=FAST_DQN)
    for _ in range(2):
        trainer.train()
    path = trainer.save(str(tmp_path / "ckpt"))
    obs = [gym.make("CartPole-v1").reset(seed=s)[0] for s in range(20)]
    expected = [trainer.compute_action(o, explore=False) for o in obs]
    updates = trainer.num_target_updates
    trainer.stop()
    other = dqn.DQNTrainer(env="CartPole-v0", config=dict(FAST_DQN, seed=5))
    other.restore(path)
    assert [other.compute_action(o, explore=False) for o in obs] == expected
    assert other.num_target_updates == updates
    q = other.compute_action(obs[0], full_fetch=True)[2]["q_values"]
    assert q.shape == (2,)
    other.stop()


def test_dqn_bad_configs_name_the_fix():
    for bad, match in (({"num_atoms": 0}, "num_atoms"),
                       ({"num_atoms": 5, "v_min": 1.0, "v_max": 1.0}, "v_min < v_max"),
                       ({"n_step": 0}, "n_step"),
                       ({"exploration_final_eps": 1.5}, "exploration_final_eps"),
                       ({"buffer_size": 16, "train_batch_size": 32}, "buffer_size"),
                       ({"parameter_noise": True}, "noisy"),
                       ({"input": {"sampler": 0.5}}, "sum to 1"),
                       ({"input_evaluation": ["dr"]}, "known")):
        with pytest.raises(ValueError, match=match):
            dqn.DQNTrainer(env="CartPole-v0", config=dict(FAST_DQN, **bad))
    with pytest.raises(ValueError, match="Discrete action space.*DDPG"):
        dqn.DQNTrainer(env="Pendulum-v0", config=FAST_DQN)


# --- offline data and MARWIL --------------------------------------------------------------


def test_json_writer_reader_round_trip(tmp_path):
    batch = _transitions(6)
    batch["infos"] = np.array([{"x": i} for i in range(6)], dtype=object)
    writer = JsonWriter(str(tmp_path), IOContext(worker_index=3), max_file_size=1)
    writer.write(batch)
    writer.write(batch)
    writer.close()
    files = sorted(glob.glob(str(tmp_path / "*.json")))
    assert len(files) == 2 and all("_worker-3_" in f for f in files)  # rolled over
    with open(files[0]) as f:
        line = json.loads(f.readline())
    assert line["type"] == "SampleBatch" and isinstance(line["obs"], str)  # compressed
    back = list(JsonReader(str(tmp_path / "*.json")).read_all_files())[0]
    for key in ("obs", "actions", "rewards", "new_obs", "dones"):
        assert np.array_equal(back[key], batch[key]), key
    assert back["infos"][2] == {"x": 2}
    with pytest.raises(ValueError, match="matches no JSON file"):
        JsonReader(str(tmp_path / "nothing-*.json"))


def test_dqn_output_then_mixed_input_and_estimates(tmp_path):
    quick = dict(FAST_DQN, timesteps_per_iteration=300, learning_starts=100)
    writer = dqn.DQNTrainer(env="CartPole-v0", config=dict(quick, output=str(tmp_path)))
    writer.train()
    writer.stop()
    assert glob.glob(str(tmp_path / "output-*_worker-0_0.json"))
    # Half simulation, half the files; "simulation" also reports real episodes.
    mixed = dqn.DQNTrainer(env="CartPole-v0", config=dict(
        quick, input={"sampler": 0.5, str(tmp_path): 0.5}, input_evaluation=["simulation"]))
    result = mixed.train()
    assert result["timesteps_total"] >= 300 and result["episodes_this_iter"] > 0
    mixed.stop()
    # The same with experiences written as the docs convert them (no q_values).
    docs_dir = str(tmp_path / "docs")
    _write_docs_experiences(docs_dir, episodes=10)
    mixed = dqn.DQNTrainer(env="CartPole-v0", config=dict(
        quick, seed=1, input={"sampler": 0.5, docs_dir: 0.5}))
    for _ in range(2):
        assert mixed.train()["timesteps_total"] >= 300
    mixed.stop()
    # DQN logs its behaviour probabilities: IS/WIS estimate the learned policy.
    offline = dqn.DQNTrainer(env="CartPole-v0", config=dict(
        quick, input=str(tmp_path), soft_q=True, shuffle_buffer_size=4))
    result = offline.train()
    assert set(result["off_policy_estimator"]) == {"is", "wis"}
    assert result["off_policy_estimator"]["is"]["V_prev"] > 0
    offline.stop()


def test_ppo_output_then_marwil_learns_cartpole_from_it(tmp_path):
    out = str(tmp_path / "cartpole-out")
    writer_cfg = {"num_workers": 0, "seed": 0, "output": out, "train_batch_size": 2000,
                  "sgd_minibatch_size": 128, "num_sgd_iter": 10, "lr": 3e-4,
                  "model": {"fcnet_hiddens": [64, 64]}}
    teacher = ppo.PPOTrainer(env="CartPole-v0", config=writer_cfg)
    for _ in range(15):
        teacher.train()
    teacher.stop()
    files = glob.glob(os.path.join(out, "output-*_worker-0_0.json"))
    assert files, os.listdir(out)

    config = {"input": out, "seed": 0, "lr": 1e-3, "train_batch_size": 500,
              "model": {"fcnet_hiddens": [64, 64]}, "evaluation_interval": 150,
              "evaluation_num_episodes": 20}
    student = marwil.MARWILTrainer(env="CartPole-v0", config=config)
    for _ in range(150):
        result = student.train()
    # Offline: no episodes of its own, but IS and WIS estimates of the policy.
    assert np.isnan(result["episode_reward_mean"])
    assert set(result["off_policy_estimator"]) == {"is", "wis"}
    assert result["off_policy_estimator"]["wis"]["V_prev"] > 0
    assert result["evaluation"]["episode_reward_mean"] >= 150, result["evaluation"]

    # The estimators' Python API, as documented.
    estimator = WeightedImportanceSamplingEstimator(student.get_policy(), gamma=0.99)
    batch = JsonReader(out).next()
    estimate = estimator.estimate(batch.split_by_episode()[0])
    assert estimate.estimator_name == "wis" and "V_gain_est" in estimate.metrics

    # Mixed input: a dict of sources with probabilities, simulation included.
    mixed = MixedInput({"sampler": 0.5, out: 0.5},
                       IOContext(config={"seed": 0}, worker=student.workers.local_worker()))
    assert all(mixed.next().count > 0 for _ in range(4))
    path = student.save(str(tmp_path / "ckpt"))
    obs = [gym.make("CartPole-v1").reset(seed=s)[0] for s in range(10)]
    expected = [student.compute_action(o, explore=False) for o in obs]
    student.stop()
    again = marwil.MARWILTrainer(env="CartPole-v0", config=dict(config, seed=9))
    again.restore(path)
    assert [again.compute_action(o, explore=False) for o in obs] == expected
    again.stop()


def test_offpolicy_trainers_are_registered_with_tune():
    from hpc_ray.tune.registry import get_trainable
    for name in ("DQN", "APEX", "DDPG", "TD3", "APEX_DDPG", "MARWIL", "QMIX"):
        cls = get_trainable(name)
        assert cls is get_agent_class(name) and cls._name == name
        assert pickle.loads(pickle.dumps(cls)) is cls


def _write_docs_experiences(out: str, episodes: int) -> None:
    """Random CartPole episodes, converted as the docs' "Working with Offline
    Datasets" example does (SampleBatchBuilder, JsonWriter)."""
    import gymnasium as gym
    from hpc_ray.rllib.evaluation.sample_batch_builder import SampleBatchBuilder
    from hpc_ray.rllib.offline.json_writer import JsonWriter

    builder, writer = SampleBatchBuilder(), JsonWriter(out)
    env = gym.make("CartPole-v1")
    for eps_id in range(episodes):
        obs, _ = env.reset(seed=eps_id)
        done, t = False, 0
        while not done:
            action = env.action_space.sample()
            new_obs, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            builder.add_values(t=t, eps_id=eps_id, agent_index=0, obs=obs, actions=action,
                               action_prob=0.5, rewards=reward, dones=done, new_obs=new_obs)
            obs, t = new_obs, t + 1
        writer.write(builder.build_and_reset())
