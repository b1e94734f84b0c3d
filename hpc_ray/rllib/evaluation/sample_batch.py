"""``ray.rllib.evaluation.sample_batch`` (Ray 0.6's module, kept by 0.7)."""
from ..policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch

__all__ = ["DEFAULT_POLICY_ID", "MultiAgentBatch", "SampleBatch"]
