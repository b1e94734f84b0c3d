"""``ray.rllib.evaluation.policy_evaluator`` (Ray 0.6's module, kept by 0.7)."""
from .rollout_worker import PolicyEvaluator

__all__ = ["PolicyEvaluator"]
