"""Rollout workers, worker sets, episodes, postprocessing, metrics."""
from ..policy.sample_batch import MultiAgentBatch, SampleBatch
from .episode import MultiAgentEpisode
from .metrics import collect_metrics
from .postprocessing import Postprocessing, compute_advantages
from .rollout_worker import PolicyEvaluator, RolloutWorker
from .worker_set import WorkerSet

__all__ = ["RolloutWorker", "PolicyEvaluator", "WorkerSet", "MultiAgentEpisode",
           "SampleBatch", "MultiAgentBatch", "Postprocessing", "compute_advantages",
           "collect_metrics"]
