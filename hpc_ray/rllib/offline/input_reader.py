"""``InputReader``: where a rollout worker's experiences come from."""
from __future__ import annotations

__all__ = ["InputReader", "SamplerInput"]


class InputReader:
    """The input API: ``next()`` returns the next ``SampleBatch`` (or
    ``MultiAgentBatch``) of experiences. Subclass it and return the subclass
    from a function given as ``config["input"]``."""

    def next(self):
        """The next batch of experiences."""
        raise NotImplementedError


class SamplerInput(InputReader):
    """Experiences from simulation: the worker's sampler."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler

    def next(self):
        return self.sampler.sample()
