"""Policy optimizers: how samples and gradients move between workers."""
from .async_gradients import AsyncGradientsOptimizer
from .policy_optimizer import PolicyOptimizer
from .sync_samples import SyncSamplesOptimizer

__all__ = ["PolicyOptimizer", "SyncSamplesOptimizer", "AsyncGradientsOptimizer"]
