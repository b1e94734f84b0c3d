"""Recurrent models in hpc_ray.rllib: ``"use_lstm": True`` and custom RNN models.

Sequences (0.7's ``chop_into_sequences``, ``add_time_dimension``), a model run
over padded sequences giving the outputs it gave while acting, PPO
minibatches of whole sequences, every policy-gradient trainer with
``use_lstm``, a custom step-wise GRU, ``compute_action`` with state,
save/restore, ``tune.run``, and the trainers that refuse ``use_lstm``. In the
pytest process (``num_workers=0`` or local mode). The learning run is in
tests/test_rllib_lstm_learning.py.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

import hpc_ray
from hpc_ray import tune
from hpc_ray.rllib import SampleBatch
from hpc_ray.rllib.agents import a3c, ddpg, dqn, impala, pg, ppo
from hpc_ray.rllib.agents.ppo import appo
from hpc_ray.rllib.models import ModelCatalog
from hpc_ray.rllib.models.lstm import (add_time_dimension, chop_into_sequences,
                                       sequence_lengths)
from hpc_ray.rllib.models.pytorch.lstm import LSTM
from hpc_ray.rllib.models.pytorch.model import TorchModel, from_batch
from hpc_ray.rllib.utils.sgd import minibatches

SMALL_LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 5, "fcnet_hiddens": [16]}
LOCAL = {"num_workers": 0, "seed": 0}


# --- sequences ---------------------------------------------------------------------------


def test_chop_into_sequences_pads_and_takes_each_sequences_first_state():
    eps = [1, 1, 1, 1, 1, 2, 2, 3, 3, 3]
    features = np.arange(10, 20)
    states = np.arange(100, 110)
    (padded,), (initial,), seq_lens = chop_into_sequences(
        eps, [0] * 10, [0] * 10, [features], [states], max_seq_len=3)
    assert seq_lens.tolist() == [3, 2, 2, 3]
    assert padded.tolist() == [10, 11, 12, 13, 14, 0, 15, 16, 0, 17, 18, 19]
    assert initial.tolist() == [100, 103, 105, 107]


def test_sequences_cut_where_unroll_or_agent_changes_and_max_len_without_dynamic_max():
    # Episode 7's rows come from two unrolls and two agents.
    lens = sequence_lengths([7, 7, 7, 7, 7, 7], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1], 20)
    assert lens.tolist() == [2, 2, 2]
    (padded,), _, seq_lens = chop_into_sequences(
        [1, 1, 2], [0, 0, 0], [0, 0, 0], [[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]], [], 4,
        dynamic_max=False)
    assert seq_lens.tolist() == [2, 1] and padded.shape == (8, 2)
    assert padded[:, 0].tolist() == [1, 2, 0, 0, 3, 0, 0, 0]
    timed = add_time_dimension(torch.as_tensor(padded), torch.as_tensor(seq_lens))
    assert tuple(timed.shape) == (2, 4, 2) and timed[1, 0, 0].item() == 3.0
    with pytest.raises(ValueError, match="max_seq_len must be >= 1"):
        sequence_lengths([1], [0], [0], 0)


def test_minibatches_of_a_recurrent_policy_hold_whole_sequences_in_order():
    n = 60
    batch = SampleBatch({"eps_id": np.repeat([5, 6, 7], 20), "unroll_id": np.zeros(n, int),
                         "agent_index": np.zeros(n, int), "obs": np.arange(n)})
    parts = list(minibatches(batch, 20, np.random.default_rng(0), max_seq_len=4))
    assert len(parts) == 3
    seen = np.sort(np.concatenate([p["obs"] for p in parts]))
    assert seen.tolist() == list(range(n))  # every row once
    for part in parts:
        # Cut again, each minibatch gives sequences of 4 consecutive rows of one episode.
        lens = sequence_lengths(part["eps_id"], part["unroll_id"], part["agent_index"], 4)
        starts = np.cumsum(lens) - lens
        for start, length in zip(starts, lens):
            rows = part["obs"][start:start + length].tolist()
            assert length == 4 and rows == list(range(rows[0], rows[0] + 4))
            assert rows[0] % 4 == 0
    shuffled = [p["obs"].tolist() for p in parts]
    assert shuffled != [list(range(i, i + 20)) for i in (0, 20, 40)]


# --- the model over padded sequences ------------------------------------------------------


def _policy_and_batch(model_config, trainer_cls=ppo.PPOTrainer, **config):
    trainer = trainer_cls(env="CartPole-v0", config=dict(
        LOCAL, train_batch_size=200, sample_batch_size=100, sgd_minibatch_size=100,
        num_sgd_iter=1, model=model_config, **config))
    batch = trainer.workers.local_worker().sample()
    return trainer, trainer.get_policy(), batch


@pytest.mark.parametrize("prev_action_reward", [False, True])
def test_use_lstm_on_padded_sequences_gives_the_logits_and_values_of_acting(
        prev_action_reward):
    model = dict(SMALL_LSTM, lstm_use_prev_action_reward=prev_action_reward)
    trainer, policy, batch = _policy_and_batch(model)
    assert isinstance(policy.model, LSTM)
    assert [s.shape for s in policy.get_initial_state()] == [(8,), (8,)]
    assert {"state_in_0", "state_in_1", "state_out_0", "state_out_1"} <= set(batch.keys())
    # 100 rows of several episodes, cut every 5 rows: padding in between.
    lens = sequence_lengths(batch["eps_id"], batch["unroll_id"], batch["agent_index"], 5)
    assert lens.max() == 5 and lens.min() < 5
    with torch.no_grad():
        logits, _, values, _ = from_batch(policy.model, policy._lazy_tensors(batch))
    assert logits.shape == (100, 2)
    np.testing.assert_allclose(logits.numpy(), batch["behaviour_logits"], atol=1e-5)
    np.testing.assert_allclose(values.numpy(), batch["vf_preds"], atol=1e-5)
    trainer.stop()


class StepGRU(TorchModel):
    """A custom recurrent torch model written one step at a time (the shape of
    0.7's torch ``_forward(input_dict, hidden_state)``)."""

    def __init__(self, obs_space, num_outputs, options):
        TorchModel.__init__(self, obs_space, num_outputs, options)
        size = options["custom_options"]["size"]
        self.size = size
        self.cell = nn.GRUCell(int(np.prod(obs_space.shape)), size)
        self.pi = nn.Linear(size, num_outputs)
        self.vf = nn.Linear(size, 1)

    def get_initial_state(self):
        return [torch.zeros(self.size)]

    def _forward(self, input_dict, hidden_state):
        h = self.cell(input_dict["obs"], hidden_state[0])
        return self.pi(h), h, self.vf(h).squeeze(-1), [h]


def test_a_custom_step_wise_recurrent_model_learns_on_sequences():
    ModelCatalog.register_custom_model("step_gru", StepGRU)
    model = {"custom_model": "step_gru", "custom_options": {"size": 6}, "max_seq_len": 4}
    trainer, policy, batch = _policy_and_batch(model)
    assert isinstance(policy.model, StepGRU)
    assert batch["state_in_0"].shape == (100, 6)
    with torch.no_grad():
        logits, _, values, _ = from_batch(policy.model, policy._lazy_tensors(batch))
    np.testing.assert_allclose(logits.numpy(), batch["behaviour_logits"], atol=1e-5)
    before = policy.get_weights()["cell.weight_hh"].copy()
    result = trainer.train()
    assert result["timesteps_total"] >= 200
    assert not np.array_equal(policy.get_weights()["cell.weight_hh"], before)
    trainer.stop()


def test_use_lstm_wraps_a_custom_feed_forward_model():
    class Tiny(TorchModel):
        def __init__(self, obs_space, num_outputs, options):
            TorchModel.__init__(self, obs_space, num_outputs, options)
            self.body = nn.Linear(int(np.prod(obs_space.shape)), 5)
            self.pi = nn.Linear(5, num_outputs)

        def _forward(self, input_dict, hidden_state):
            h = torch.tanh(self.body(input_dict["obs"]))
            return self.pi(h), h, h.sum(-1), hidden_state

    ModelCatalog.register_custom_model("tiny_ff", Tiny)
    trainer, policy, _ = _policy_and_batch(dict(SMALL_LSTM, custom_model="tiny_ff"))
    assert isinstance(policy.model, LSTM) and isinstance(policy.model.inner, Tiny)
    assert policy.model.lstm.input_size == 5
    trainer.stop()


# --- every policy-gradient trainer -------------------------------------------------------


@pytest.mark.parametrize("name, cls, config", [
    ("PG", pg.PGTrainer, {}),
    ("A2C", a3c.A2CTrainer, {"min_iter_time_s": 0}),
    ("A3C", a3c.A3CTrainer, {"min_iter_time_s": 0, "optimizer": {"grads_per_step": 2}}),
    ("PPO", ppo.PPOTrainer, {"sgd_minibatch_size": 50, "num_sgd_iter": 2}),
    ("IMPALA", impala.ImpalaTrainer, {"min_iter_time_s": 0}),
    ("APPO", appo.APPOTrainer, {"min_iter_time_s": 0}),
])
def test_every_policy_gradient_trainer_trains_its_lstm(name, cls, config):
    trainer = cls(env="CartPole-v0", config=dict(
        LOCAL, train_batch_size=100, sample_batch_size=50,
        model=dict(SMALL_LSTM, lstm_use_prev_action_reward=True), **config))
    policy = trainer.get_policy()
    before = policy.get_weights()["lstm.weight_hh_l0"].copy()
    result = trainer.train()
    assert result["timesteps_total"] >= 50
    after = policy.get_weights()
    assert all(np.isfinite(w).all() for w in after.values())
    assert not np.array_equal(after["lstm.weight_hh_l0"], before)
    trainer.stop()


@pytest.mark.parametrize("cls, config", [
    (dqn.DQNTrainer, {}), (ddpg.DDPGTrainer, {}), (ddpg.TD3Trainer, {})])
def test_trainers_without_recurrent_models_refuse_use_lstm(cls, config):
    env = "Pendulum-v0" if "DDPG" in cls.__name__ or "TD3" in cls.__name__ else "CartPole-v0"
    with pytest.raises(ValueError, match=r"does not support \"use_lstm\": True .*"
                                         r"recurrent models work with PG, A2C, A3C, PPO"):
        cls(env=env, config=dict(LOCAL, model={"use_lstm": True}, **config))


# --- serving, checkpoints, Tune --------------------------------------------------------------


def test_compute_action_with_state_returns_the_next_state():
    trainer = ppo.PPOTrainer(env="CartPole-v0", config=dict(
        LOCAL, model=dict(SMALL_LSTM, lstm_use_prev_action_reward=True)))
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    state = trainer.get_policy().get_initial_state()
    assert [s.tolist() for s in state] == [[0.0] * 8, [0.0] * 8]
    prev_action, prev_reward, states = 0, 0.0, []
    for _ in range(3):
        action, state, info = trainer.compute_action(obs, state=state, prev_action=prev_action,
                                                     prev_reward=prev_reward)
        assert action in (0, 1) and [s.shape for s in state] == [(8,), (8,)]
        assert set(info) >= {"vf_preds", "behaviour_logits", "action_logp"}
        states.append(state)
        obs, prev_reward, _, _, _ = env.step(action)
        prev_action = action
    assert not np.allclose(states[0][1], states[1][1])  # the memory changes
    # Without a state: the initial one, and only the action (as 0.7).
    assert trainer.compute_action(obs) in (0, 1)
    with pytest.raises(ValueError, match="has 2 RNN state tensors, got a state of 1"):
        trainer.compute_action(obs, state=[np.zeros(8)])
    trainer.stop()


def test_save_restore_keeps_the_lstm_weights(tmp_path):
    config = dict(LOCAL, train_batch_size=200, sgd_minibatch_size=100, num_sgd_iter=2,
                  model=SMALL_LSTM)
    trainer = ppo.PPOTrainer(env="CartPole-v0", config=config)
    trainer.train()
    path = trainer.save(str(tmp_path / "ckpt"))
    weights = trainer.get_policy().get_weights()["lstm.weight_ih_l0"]
    obs = [gym.make("CartPole-v1").reset(seed=s)[0] for s in range(5)]

    def rollout(t):
        state, out = t.get_policy().get_initial_state(), []
        for o in obs:
            action, state, info = t.compute_action(o, state=state, explore=False)
            out.append((int(action), info["behaviour_logits"].tolist()))
        return out

    expected = rollout(trainer)
    trainer.stop()
    other = ppo.PPOTrainer(env="CartPole-v0", config=dict(config, seed=1))
    assert not np.allclose(other.get_policy().get_weights()["lstm.weight_ih_l0"], weights)
    other.restore(path)
    np.testing.assert_array_equal(other.get_policy().get_weights()["lstm.weight_ih_l0"],
                                  weights)
    assert rollout(other) == expected
    other.stop()


@pytest.fixture
def local_mode(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    hpc_ray.init(local_mode=True, num_cpus=2)
    yield
    hpc_ray.shutdown()


def test_tune_run_ppo_with_use_lstm_and_a_rollout_worker(local_mode, tmp_path):
    trials = tune.run("PPO", config={
        "env": "CartPole-v0", "num_workers": 1, "train_batch_size": 200,
        "sample_batch_size": 100, "sgd_minibatch_size": 100, "num_sgd_iter": 2,
        "model": {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 10}},
        stop={"training_iteration": 2}, local_dir=str(tmp_path / "results"), verbose=0)
    result = trials[0].last_result
    assert result["training_iteration"] == 2 and result["timesteps_total"] >= 400
    assert result["episode_reward_mean"] > 0
