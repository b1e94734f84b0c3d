"""``OutputWriter``: where a rollout worker's experiences are saved."""
from __future__ import annotations

__all__ = ["OutputWriter", "NoopOutput"]


class OutputWriter:
    """The output API: ``write(batch)`` saves one batch of experiences. Subclass it
    and return the subclass from a function given as ``config["output"]``."""

    def write(self, sample_batch) -> None:
        raise NotImplementedError


class NoopOutput(OutputWriter):
    """Saves nothing."""

    def write(self, sample_batch) -> None:
        pass
