"""Policy optimizers: how samples and gradients move between workers."""
from .async_gradients import AsyncGradientsOptimizer
from .async_replay import AsyncReplayOptimizer
from .async_samples import AsyncSamplesOptimizer
from .multi_gpu_optimizer import LocalMultiGPUOptimizer
from .policy_optimizer import PolicyOptimizer
from .replay_buffer import PrioritizedReplayBuffer, ReplayBuffer
from .sync_batch_replay import SyncBatchReplayOptimizer
from .sync_replay import SyncReplayOptimizer
from .sync_samples import SyncSamplesOptimizer

__all__ = ["PolicyOptimizer", "SyncSamplesOptimizer", "AsyncGradientsOptimizer",
           "SyncReplayOptimizer", "SyncBatchReplayOptimizer", "AsyncReplayOptimizer",
           "AsyncSamplesOptimizer", "LocalMultiGPUOptimizer",
           "ReplayBuffer", "PrioritizedReplayBuffer"]
