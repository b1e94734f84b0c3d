"""RLlib on a GPU, as in Ray 0.7: a policy uses CUDA where torch sees a GPU and
``CUDA_VISIBLE_DEVICES`` names one, and the trainer's local (learner) worker
also with ``num_gpus`` > 0; rollout workers without GPUs stay on the CPU.

The device rule and CPU training run everywhere. The tests marked "needs a
CUDA device" train PPO (``init(num_gpus=1)``, one rollout worker, and through
``tune.run``), DQN and TD3 on the GPU; run them on a GPU node with
``python -m pytest tests/test_rllib_gpu.py -x -q``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hpc_ray.rllib.agents import dqn, ppo
from hpc_ray.rllib.agents.ddpg import TD3Trainer
from hpc_ray.rllib.policy.torch_policy import LEARNER_GPUS_KEY, _policy_device

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device")

#: PPO small enough to train a few iterations in seconds.
PPO_LOCAL = {"num_workers": 0, "seed": 0, "train_batch_size": 400, "sample_batch_size": 100,
             "sgd_minibatch_size": 100, "num_sgd_iter": 3}
DQN_LOCAL = {"num_workers": 0, "seed": 0, "min_iter_time_s": 0, "learning_starts": 200,
             "timesteps_per_iteration": 400, "train_batch_size": 32, "sample_batch_size": 4,
             "model": {"fcnet_hiddens": [64]}, "hiddens": [64]}
TD3_LOCAL = {"num_workers": 0, "seed": 0, "min_iter_time_s": 0, "learning_starts": 200,
             "pure_exploration_steps": 200, "timesteps_per_iteration": 400,
             "sample_batch_size": 4, "train_batch_size": 32, "actor_hiddens": [32],
             "critic_hiddens": [32]}


# --- the device rule ----------------------------------------------------------------------


@pytest.mark.parametrize("visible", [None, "", "0"], ids=["unset", "empty", "0"])
def test_no_cuda_means_cpu_whatever_the_config(monkeypatch, visible):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _policy_device({}).type == "cpu"
    assert _policy_device({LEARNER_GPUS_KEY: 1}).type == "cpu"


@pytest.mark.parametrize("visible, learner_gpus, expected", [
    (None, 0, "cpu"),     # a driver-side policy with no GPU asked for
    ("", 0, "cpu"),       # a task or actor that holds no GPU
    ("0", 0, "cuda"),     # one that holds GPU 0 (a Tune trial with num_gpus=1)
    (None, 1, "cuda"),    # the trainer's learner with num_gpus=1, in the driver
    (None, 0.5, "cuda"),
], ids=["unset", "empty", "holds-0", "learner", "learner-fraction"])
def test_device_rule_where_cuda_is_available(monkeypatch, visible, learner_gpus, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _policy_device({LEARNER_GPUS_KEY: learner_gpus}).type == expected


def test_only_the_local_worker_gets_the_trainers_num_gpus():
    trainer = ppo.PPOTrainer(env="CartPole-v1", config=dict(PPO_LOCAL, num_gpus=1))
    policy = trainer.get_policy()
    assert policy.config[LEARNER_GPUS_KEY] == 1
    assert LEARNER_GPUS_KEY not in trainer.config  # the user's config is untouched
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert policy.device.type == expected
    trainer.stop()


# --- training on the CPU with num_gpus asked for ---------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_ppo_with_num_gpus_learns_on_a_cpu_only_machine():
    trainer = ppo.PPOTrainer(env="CartPole-v1", config=dict(
        PPO_LOCAL, num_gpus=1, lr=1e-3, train_batch_size=1000, sgd_minibatch_size=128,
        num_sgd_iter=6))
    assert trainer.get_policy().device.type == "cpu"
    rewards = [trainer.train()["episode_reward_mean"] for _ in range(6)]
    assert rewards[-1] > rewards[0] + 5, rewards
    trainer.stop()


def test_checkpoint_state_is_on_the_cpu(tmp_path):
    trainer = dqn.DQNTrainer(env="CartPole-v1", config=dict(DQN_LOCAL, num_gpus=1))
    trainer.train()
    state = trainer.get_policy().get_state()
    tensors = [v for s in state["optimizer"]["state"].values() for v in s.values()
               if isinstance(v, torch.Tensor)]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert all(isinstance(v, np.ndarray) for v in state["target"].values())
    path = trainer.save(str(tmp_path / "ckpt"))
    trainer.stop()
    other = dqn.DQNTrainer(env="CartPole-v1", config=dict(DQN_LOCAL, num_gpus=1, seed=3))
    other.restore(path)
    other.train()
    other.stop()


# --- on a GPU -------------------------------------------------------------------------------


def _on_cuda(policy, *models) -> bool:
    return policy.device.type == "cuda" and all(
        p.device.type == "cuda" for m in models for p in m.parameters())


@needs_cuda
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_ppo_trains_on_the_gpu_with_a_cpu_rollout_worker(run):
    values = run("rllib_gpu.py", 3, "ppo", mode="embedded", timeout=180).assert_ok(
        "rllib_gpu")
    assert len(values["ppo_rewards"]) == 3
    assert all(math.isfinite(r) for r in values["ppo_rewards"])
    assert values["ppo_devices"] == ["cuda", "cpu"]  # the learner, the rollout worker


@needs_cuda
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_tune_run_ppo_with_num_gpus_terminates(run):
    values = run("rllib_gpu.py", 3, "tune", mode="embedded", timeout=180).assert_ok(
        "rllib_gpu")
    assert values["tune_status"] == "TERMINATED"
    assert values["tune_device"] == "cuda"


@needs_cuda
@pytest.mark.parametrize("options", [{}, {"num_atoms": 11, "v_min": 0.0, "v_max": 50.0},
                                     {"noisy": True}], ids=["dqn", "distributional", "noisy"])
def test_dqn_trains_on_the_gpu(options):
    trainer = dqn.DQNTrainer(env="CartPole-v1", config=dict(DQN_LOCAL, num_gpus=1,
                                                            **options))
    results = [trainer.train() for _ in range(2)]
    policy = trainer.get_policy()
    assert _on_cuda(policy, policy.model, policy.target_model)
    assert math.isfinite(results[-1]["info"]["learner"]["default_policy"]["mean_q"])
    assert results[-1]["info"]["num_target_updates"] >= 1
    q = trainer.compute_action(np.zeros(4, np.float32), full_fetch=True)[2]["q_values"]
    assert isinstance(q, np.ndarray) and q.shape == (2,)
    trainer.stop()


@needs_cuda
def test_td3_trains_on_the_gpu_and_restores(tmp_path):
    trainer = TD3Trainer(env="Pendulum-v1", config=dict(TD3_LOCAL, num_gpus=1))
    for _ in range(2):
        result = trainer.train()
    policy = trainer.get_policy()
    assert _on_cuda(policy, policy.model, policy.target_model)
    assert math.isfinite(result["info"]["learner"]["default_policy"]["mean_q"])
    obs = np.zeros(3, np.float32)
    expected = trainer.compute_action(obs, explore=False)
    assert isinstance(expected, np.ndarray) and -2.0 <= expected[0] <= 2.0
    path = trainer.save(str(tmp_path / "ckpt"))
    trainer.stop()
    other = TD3Trainer(env="Pendulum-v1", config=dict(TD3_LOCAL, num_gpus=1, seed=3))
    other.restore(path)
    assert np.array_equal(other.compute_action(obs, explore=False), expected)
    other.train()
    other.stop()
