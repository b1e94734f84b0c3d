"""hpc_ray.rllib: Ray 0.7's RLlib on hpc_ray, in PyTorch.

    import hpc_ray as ray
    from hpc_ray.rllib.agents import ppo

    ray.init()
    trainer = ppo.PPOTrainer(env="CartPole-v0", config={"num_workers": 2})
    for _ in range(10):
        result = trainer.train()          # result["episode_reward_mean"], ...
    path = trainer.save()

Rollout workers are hpc_ray actors spread over the job's ranks; sample batches
travel through the node's object store. Every trainer is a Tune trainable
registered under its documented name: ``tune.run("PPO", config={"env": ...})``.
Only the PyTorch path of Ray 0.7 exists (``"use_pytorch": True`` is the default);
TensorFlow entry points raise an error that names the torch way.
"""
from __future__ import annotations

from .env.base_env import BaseEnv
from .env.multi_agent_env import MultiAgentEnv
from .env.vector_env import VectorEnv
from .evaluation import PolicyGraph
from .evaluation.rollout_worker import PolicyEvaluator, RolloutWorker
from .evaluation.worker_set import WorkerSet
from .policy.policy import Policy, TFPolicy
from .policy.sample_batch import MultiAgentBatch, SampleBatch
from .policy.torch_policy import TorchPolicy
from .policy.torch_policy_template import build_torch_policy

__all__ = ["BaseEnv", "MultiAgentEnv", "VectorEnv", "RolloutWorker", "PolicyEvaluator",
           "PolicyGraph",
           "WorkerSet", "Policy", "TFPolicy", "TorchPolicy", "build_torch_policy",
           "SampleBatch", "MultiAgentBatch", "register_env"]


def register_env(name: str, env_creator) -> None:
    """``hpc_ray.tune.register_env`` (the name RLlib's docs also import)."""
    from ..tune.registry import register_env as _register
    _register(name, env_creator)


def _register_all() -> None:
    """Register every trainer with Tune under its documented name (lazily loaded)."""
    from ..tune.registry import _TRAINABLES
    from .agents.registry import ALGORITHMS, get_agent_class
    for name in ALGORITHMS:
        if name not in _TRAINABLES:
            try:
                _TRAINABLES[name] = get_agent_class(name)
            except (ImportError, AttributeError):  # not built yet
                pass


_register_all()
