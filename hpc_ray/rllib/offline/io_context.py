"""``IOContext``: what an input reader or output writer knows about its worker."""
from __future__ import annotations

import os
from typing import Any

__all__ = ["IOContext"]


class IOContext:
    """Attributes passed to input/output creators (``config["input"]`` or
    ``config["output"]`` given as functions).

    Args:
        log_dir: the trainer's log directory (where ``"output": "logdir"`` writes).
        config: the trainer's config.
        worker_index: 0 for the local worker, 1.. for remote ones.
        worker: the ``RolloutWorker`` (its sampler backs ``default_sampler_input``).
    """

    def __init__(self, log_dir: str | None = None, config: dict | None = None,
                 worker_index: int = 0, worker: Any = None) -> None:
        self.log_dir = log_dir or os.getcwd()
        self.config = config or {}
        self.worker_index = worker_index
        self.worker = worker

    def default_sampler_input(self):
        """The worker's own sampler as an ``InputReader`` (the "sampler" input)."""
        from .input_reader import SamplerInput
        if self.worker is None:
            raise ValueError("default_sampler_input() needs the IOContext's worker")
        return SamplerInput(self.worker.sampler)
