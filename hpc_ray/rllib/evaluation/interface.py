"""``EvaluatorInterface``: what a policy optimizer asks of a rollout worker (Ray 0.7).

``RolloutWorker`` implements it; a user's own evaluator (a simulator that is
not a gym env, a learner of another kind) can subclass it and be driven by the
same optimizers. ``learn_on_batch`` defaults to ``compute_gradients`` then
``apply_gradients``, so a subclass implements either the one or the pair.
"""
from __future__ import annotations

import socket
from typing import Any, Callable

__all__ = ["EvaluatorInterface"]


class EvaluatorInterface:
    """This is the interface between policy optimizers and policy evaluation.

    See also: ``RolloutWorker``.
    """

    def sample(self):
        """Returns a batch of experience sampled from this evaluator.

        Returns:
            a ``SampleBatch`` or ``MultiAgentBatch``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement sample()")

    def learn_on_batch(self, samples) -> dict:
        """Update policies based on the given batch: ``apply_gradients(
        compute_gradients(samples))`` unless overridden.

        Returns:
            the info dict from ``compute_gradients``.
        """
        grads, info = self.compute_gradients(samples)
        self.apply_gradients(grads)
        return info

    def compute_gradients(self, samples):
        """Returns ``(grads, info)``: gradients w.r.t. ``samples`` (by policy id
        for a multi-agent batch) and a dict of extra metadata."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement compute_gradients() and "
            f"apply_gradients(), or learn_on_batch()")

    def apply_gradients(self, grads) -> None:
        """Applies the given gradients to this evaluator's weights."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement compute_gradients() and "
            f"apply_gradients(), or learn_on_batch()")

    def get_weights(self):
        """Returns the model weights of this evaluator."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_weights()")

    def set_weights(self, weights) -> None:
        """Sets the model weights of this evaluator."""
        raise NotImplementedError(f"{type(self).__name__} must implement set_weights()")

    def compute_apply(self, samples) -> dict:
        """Deprecated in 0.7 (override ``learn_on_batch``): compute gradients on
        ``samples``, apply them, and return the info."""
        grads, info = self.compute_gradients(samples)
        self.apply_gradients(grads)
        return info

    def get_host(self) -> str:
        """The hostname of the process running this evaluator."""
        return socket.gethostname()

    def apply(self, func: Callable, *args) -> Any:
        """``func(self, *args)``."""
        return func(self, *args)
