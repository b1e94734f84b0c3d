"""The model interface of ``DistributedSGD`` and a reference numpy model.

``Model`` is framework free: weights and gradients are lists of numpy arrays
in a fixed order, and the model owns its input pipeline (as in Ray SGD, where
each replica reads its own data). ``MLPModel`` implements it with a
fully-connected network, softmax cross-entropy and momentum SGD in plain numpy,
for tests, the digits example and the benchmarks.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["MLPModel", "Model"]


class Model:
    """What ``DistributedSGD`` needs from a model replica.

    Subclass it (or duck-type it). Gradients and weights are lists of numpy
    arrays, in the same order and shapes every call and on every replica.
    """

    def get_weights(self) -> list[np.ndarray]:
        raise NotImplementedError

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        raise NotImplementedError

    def compute_gradients(self) -> tuple[list[np.ndarray], dict]:
        """Gradients of the loss on the model's next batch, and stats (``loss``
        at least; ``num_samples`` is summed across replicas when present)."""
        raise NotImplementedError

    def apply_gradients(self, gradients: Sequence[np.ndarray]) -> None:
        """Update the weights with (averaged) gradients."""
        raise NotImplementedError

    def get_metrics(self) -> dict:
        """Extra values for ``step(fetch_stats=True)``; none by default."""
        return {}


class MLPModel(Model):
    """A fully-connected classifier (ReLU hidden layers, softmax output).

    Args:
        layer_sizes: ``[inputs, hidden..., classes]``.
        x, y: this replica's training rows (features, integer labels).
        batch_size: rows per gradient.
        lr, momentum: SGD settings.
        seed: the weights' initial values (equal seeds, equal weights).
        data_seed: the order in which this replica draws its batches.
        dtype: float32 (default) or float64.
    """

    def __init__(self, layer_sizes: Sequence[int], x: np.ndarray, y: np.ndarray, *,
                 batch_size: int = 32, lr: float = 0.1, momentum: float = 0.9,
                 seed: int = 0, data_seed: int = 0, dtype=np.float32) -> None:
        if len(layer_sizes) < 2:
            raise ValueError(f"layer_sizes needs inputs and outputs, got {layer_sizes!r}")
        if len(x) == 0:
            raise ValueError("a replica needs at least one training row")
        self.dtype = np.dtype(dtype)
        rng = np.random.default_rng(seed)
        self.weights: list[np.ndarray] = []
        for fan_in, fan_out in zip(layer_sizes[:-1], layer_sizes[1:]):
            scale = np.sqrt(2.0 / fan_in)
            self.weights.append((rng.standard_normal((fan_in, fan_out)) * scale)
                                .astype(self.dtype))
            self.weights.append(np.zeros(fan_out, dtype=self.dtype))
        self.velocity = [np.zeros_like(w) for w in self.weights]
        self.x = np.ascontiguousarray(x, dtype=self.dtype)
        self.y = np.asarray(y, dtype=np.int64)
        self.batch_size = int(batch_size)
        self.lr = float(lr)
        self.momentum = float(momentum)
        self._rng = np.random.default_rng(data_seed)
        self._order = np.empty(0, dtype=np.int64)
        self._pos = 0
        self.steps = 0

    # --- Model interface ------------------------------------------------------------

    def get_weights(self) -> list[np.ndarray]:
        return [w.copy() for w in self.weights]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        if len(weights) != len(self.weights):
            raise ValueError(f"expected {len(self.weights)} arrays, got {len(weights)}")
        for mine, new in zip(self.weights, weights):
            np.copyto(mine, new)

    def compute_gradients(self) -> tuple[list[np.ndarray], dict]:
        idx = self._next_batch()
        loss, grads = self.loss_and_gradients(self.x[idx], self.y[idx])
        return grads, {"loss": loss, "num_samples": len(idx)}

    def apply_gradients(self, gradients: Sequence[np.ndarray]) -> None:
        for w, v, g in zip(self.weights, self.velocity, gradients):
            v *= self.momentum
            v += g
            w -= self.lr * v
        self.steps += 1

    def get_optimizer_state(self) -> dict:
        return {"velocity": [v.copy() for v in self.velocity], "steps": self.steps}

    def set_optimizer_state(self, state: dict) -> None:
        for mine, new in zip(self.velocity, state["velocity"]):
            np.copyto(mine, new)
        self.steps = int(state["steps"])

    # --- numerics -------------------------------------------------------------------

    def _next_batch(self) -> np.ndarray:
        if self._pos + self.batch_size > len(self._order):
            self._order = self._rng.permutation(len(self.x))
            if len(self._order) < self.batch_size:  # tiny shards: sample with repeats
                self._order = self._rng.integers(0, len(self.x), self.batch_size)
            self._pos = 0
        idx = self._order[self._pos:self._pos + self.batch_size]
        self._pos += self.batch_size
        return idx

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits, and the activations each layer saw (for the backward pass)."""
        acts = [x]
        h = x
        n_layers = len(self.weights) // 2
        for i in range(n_layers):
            h = h @ self.weights[2 * i] + self.weights[2 * i + 1]
            if i < n_layers - 1:
                h = np.maximum(h, 0)
                acts.append(h)
        return h, acts

    def loss_and_gradients(self, x: np.ndarray, y: np.ndarray
                           ) -> tuple[float, list[np.ndarray]]:
        logits, acts = self.forward(x)
        logits = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        probs = exp / exp.sum(axis=1, keepdims=True)
        n = len(x)
        loss = float(-np.log(probs[np.arange(n), y] + 1e-12).mean())
        delta = probs
        delta[np.arange(n), y] -= 1
        delta /= n
        grads: list[np.ndarray] = [None] * len(self.weights)  # type: ignore[list-item]
        for i in reversed(range(len(self.weights) // 2)):
            grads[2 * i] = acts[i].T @ delta
            grads[2 * i + 1] = delta.sum(axis=0)
            if i > 0:
                delta = (delta @ self.weights[2 * i].T) * (acts[i] > 0)
        return loss, [g.astype(self.dtype, copy=False) for g in grads]

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> dict:
        """Mean loss and accuracy on ``(x, y)``."""
        logits, _ = self.forward(np.asarray(x, dtype=self.dtype))
        logits = logits - logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        y = np.asarray(y)
        return {"loss": float(-logp[np.arange(len(y)), y].mean()),
                "accuracy": float((logits.argmax(axis=1) == y).mean())}
