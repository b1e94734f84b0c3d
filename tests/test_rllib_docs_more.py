"""More of Ray 0.7's RLlib docs, taken as a user would: a BaseEnv of one's own
(poll/send_actions/try_reset, "Advanced Integrations"), a trainer used outside
Tune logging to its results directory ("Trainers"), export_formats,
``log_level`` and ``monitor``, ``RolloutWorker.as_remote`` (the custom-workflow
example), 0.6-era module paths, and the messages of offline input without the
columns a loss needs. Real gymnasium envs and real training iterations.
"""
from __future__ import annotations

import json
import logging
import os

import gymnasium as gym
import numpy as np
import pytest

from hpc_ray.rllib.agents.a3c import A2CTrainer
from hpc_ray.rllib.agents.pg import PGTrainer
from hpc_ray.rllib.env import BaseEnv
from hpc_ray.rllib.evaluation import RolloutWorker
from hpc_ray.rllib.offline.json_writer import JsonWriter
from hpc_ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from hpc_ray.tune.registry import register_env
from hpc_ray.tune.trial import ExportFormat

SMALL = {"num_workers": 0, "seed": 0, "train_batch_size": 200, "sample_batch_size": 100}


class TwoCartPoles(BaseEnv):
    """Two CartPoles behind Ray 0.7's low-level interface; counts its calls."""

    def __init__(self, config=None):
        self.envs = {"left": gym.make("CartPole-v1"), "right": gym.make("CartPole-v1")}
        self.observation_space = self.envs["left"].observation_space
        self.action_space = self.envs["left"].action_space
        self.calls = {"poll": 0, "send_actions": 0, "try_reset": 0}
        self.pending = {k: self._ready(e.reset(seed=0)[0], 0.0, False)
                        for k, e in self.envs.items()}

    @staticmethod
    def _ready(obs, reward, done):
        return ({"agent0": obs}, {"agent0": reward}, {"agent0": done, "__all__": done},
                {"agent0": {}})

    def poll(self):
        self.calls["poll"] += 1
        out = ({}, {}, {}, {}, {})
        for env_id, parts in self.pending.items():
            for whole, part in zip(out, parts):
                whole[env_id] = part
        self.pending = {}
        return out

    def send_actions(self, action_dict):
        self.calls["send_actions"] += 1
        for env_id, actions in action_dict.items():
            obs, reward, terminated, truncated, _ = self.envs[env_id].step(actions["agent0"])
            self.pending[env_id] = self._ready(obs, reward, terminated or truncated)

    def try_reset(self, env_id):
        self.calls["try_reset"] += 1
        return {"agent0": self.envs[env_id].reset()[0]}


def test_a_base_env_of_ones_own_is_polled_and_trains():
    made = []
    register_env("two_cartpoles", lambda c: made.append(TwoCartPoles(c)) or made[-1])
    trainer = PGTrainer(env="two_cartpoles", config=SMALL)
    result = trainer.train()
    trainer.stop()
    # 200 steps over two envs: both stepped, episodes ended and were reset.
    assert result["timesteps_total"] >= 200 and result["episodes_this_iter"] > 2
    calls = made[0].calls
    assert calls["send_actions"] >= 100 and calls["poll"] > calls["send_actions"]
    assert calls["try_reset"] >= result["episodes_this_iter"]
    converted = BaseEnv.to_base_env(gym.make("CartPole-v1"))
    assert converted.num_envs == 1 and isinstance(converted, BaseEnv)


def test_a_trainer_outside_tune_logs_to_its_results_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_RESULT_DIR", str(tmp_path))
    trainer = PGTrainer(env="CartPole-v1", config=dict(SMALL, model={"fcnet_hiddens": [8]}))
    logdir = trainer.logdir
    assert os.path.dirname(logdir) == str(tmp_path)
    assert os.path.basename(logdir).startswith("PG_CartPole-v1_")
    trainer.train()
    trainer.train()
    checkpoint = trainer.save()
    trainer.stop()
    with open(os.path.join(logdir, "result.json")) as f:
        assert [json.loads(line)["training_iteration"] for line in f] == [1, 2]
    # The params beside the checkpoint: `rllib rollout` rebuilds the trainer from them.
    assert os.path.isfile(os.path.join(os.path.dirname(os.path.dirname(checkpoint)),
                                       "params.pkl"))
    from hpc_ray.rllib.rollout import rollout
    assert len(rollout(checkpoint, "PG", steps=300)) >= 1     # env and model from there
    with pytest.raises(ValueError, match="does not fit a DQN trainer"):
        rollout(checkpoint, "DQN", steps=10)
    assert os.listdir(tmp_path) == [os.path.basename(logdir)]  # a replay logs nothing
    exported = PGTrainer(env="CartPole-v1", config=SMALL).export_model(
        [ExportFormat.MODEL, ExportFormat.CHECKPOINT], str(tmp_path / "export"))
    assert exported == {"model": str(tmp_path / "export" / "model"),
                        "checkpoint": str(tmp_path / "export" / "checkpoint")}
    assert os.listdir(exported["model"]) == ["model.pt"]
    assert os.listdir(exported["checkpoint"]) == ["model.pt"]


def test_log_level_sets_rllibs_loggers_and_monitor_warns(monkeypatch, tmp_path):
    monkeypatch.setenv("TUNE_RESULT_DIR", str(tmp_path))
    for name in ("hpc_ray.rllib", "ray.rllib"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    PGTrainer(env="CartPole-v1", config=dict(SMALL, log_level="DEBUG")).stop()
    assert logging.getLogger("hpc_ray.rllib").level == logging.DEBUG
    assert logging.getLogger("ray.rllib").level == logging.DEBUG
    with pytest.raises(ValueError, match="log_level"):
        PGTrainer(env="CartPole-v1", config=dict(SMALL, log_level="LOUD"))
    with pytest.warns(UserWarning, match="'monitor'.*no effect") as record:
        PGTrainer(env="CartPole-v1", config=dict(SMALL, monitor=True)).stop()
    assert record[0].filename == __file__


def test_rolloutworker_as_remote_and_the_06_module_paths():
    actor_class = RolloutWorker.as_remote(num_cpus=1)
    assert callable(actor_class.remote)
    from hpc_ray.rllib import PolicyGraph  # noqa: F401 - 0.7's top-level export
    from hpc_ray.rllib.evaluation.policy_evaluator import PolicyEvaluator
    from hpc_ray.rllib.evaluation.sample_batch import SampleBatch as OldSampleBatch
    assert PolicyEvaluator is RolloutWorker and OldSampleBatch is SampleBatch
    with pytest.raises(ImportError, match="PolicyServer.*not implemented"):
        from hpc_ray.rllib.utils.policy_server import PolicyServer  # noqa: F401


def _episodes(out: str, multi_agent: bool = False) -> None:
    """Random CartPole episodes in the docs' offline format (no advantages)."""
    env = gym.make("CartPole-v1")
    writer = JsonWriter(out)
    obs, _ = env.reset(seed=0)
    rows = {k: [] for k in ("obs", "actions", "rewards", "dones", "new_obs", "eps_id",
                            "action_prob")}
    for t in range(60):
        action = env.action_space.sample()
        new_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, terminated or truncated, new_obs,
                                     0, 0.5)):
            rows[key].append(value)
        obs = new_obs if not (terminated or truncated) else env.reset()[0]
    batch = SampleBatch({k: np.array(v) for k, v in rows.items()})
    writer.write(MultiAgentBatch({"default_policy": batch}, batch.count) if multi_agent
                 else batch)
    writer.close()


def test_offline_input_without_postprocessed_columns_names_the_fix(tmp_path):
    data = str(tmp_path / "data")
    _episodes(data)
    with pytest.raises(KeyError, match="no column 'advantages'.*postprocess_inputs"):
        PGTrainer(env="CartPole-v1", config=dict(SMALL, input=data,
                                                 input_evaluation=[])).train()
    with pytest.raises(ValueError, match="vf_preds.*offline data"):
        A2CTrainer(env="CartPole-v1", config=dict(SMALL, input=data, input_evaluation=[],
                                                  postprocess_inputs=True)).train()
    multi = str(tmp_path / "multi")
    _episodes(multi, multi_agent=True)
    with pytest.raises(ValueError, match="multi-agent batches.*input_evaluation"):
        PGTrainer(env="CartPole-v1", config=dict(SMALL, input=multi,
                                                 postprocess_inputs=True)).train()
