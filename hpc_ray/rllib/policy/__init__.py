"""Policies: the interface, the PyTorch base and template, sample batches."""
from .policy import Policy, TFPolicy, build_tf_policy
from .sample_batch import MultiAgentBatch, SampleBatch
from .torch_policy import TorchPolicy
from .torch_policy_template import build_torch_policy

__all__ = ["Policy", "TorchPolicy", "TFPolicy", "build_torch_policy", "build_tf_policy",
           "SampleBatch", "MultiAgentBatch"]
