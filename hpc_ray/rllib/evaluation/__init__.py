"""Rollout workers, worker sets, episodes, postprocessing, metrics."""
from ..policy.policy import Policy
from ..policy.sample_batch import MultiAgentBatch, SampleBatch
from ..policy.torch_policy import TorchPolicy
from .episode import MultiAgentEpisode
from .interface import EvaluatorInterface
from .metrics import collect_metrics
from .postprocessing import Postprocessing, compute_advantages
from .rollout_worker import PolicyEvaluator, RolloutWorker
from .sample_batch_builder import MultiAgentSampleBatchBuilder, SampleBatchBuilder
from .sync_async_sampler import AsyncSampler, SyncSampler
from .worker_set import WorkerSet

#: Ray 0.6's names of Policy and TorchPolicy, still exported by 0.7.
PolicyGraph = Policy
TorchPolicyGraph = TorchPolicy

__all__ = ["EvaluatorInterface", "RolloutWorker", "PolicyEvaluator", "SyncSampler",
           "AsyncSampler", "WorkerSet", "MultiAgentEpisode",
           "SampleBatch", "MultiAgentBatch", "SampleBatchBuilder",
           "MultiAgentSampleBatchBuilder", "PolicyGraph", "TorchPolicyGraph",
           "Postprocessing", "compute_advantages", "collect_metrics"]
