"""``TorchPolicy``: a model, a loss and an action distribution in PyTorch.

Acting (``compute_actions``) runs under ``torch.no_grad()`` on the rollout
worker; learning (``learn_on_batch``, or ``compute_gradients`` then
``apply_gradients`` for async and allreduce algorithms) turns a sample batch's
numpy columns into tensors without copying them where the dtype allows.

Device (``_policy_device``), as in Ray 0.7: CUDA where torch sees a GPU and
``CUDA_VISIBLE_DEVICES`` names one (hpc_ray sets it to the ids a task or actor
holds, "" for none); also the trainer's local (learner) worker with
``num_gpus`` > 0, which runs in the driver where the variable may be unset.
Tensors leave the policy as numpy through ``.cpu()``.
"""
from __future__ import annotations

import os
import threading

import numpy as np
import torch

from .policy import Policy
from .sample_batch import SampleBatch

__all__ = ["TorchPolicy", "LazyInputDict"]

#: Set by ``WorkerSet`` in its local worker's policy config only: the trainer's
#: ``num_gpus``, so that the learner in the driver trains on the GPU.
LEARNER_GPUS_KEY = "_learner_num_gpus"


def _policy_device(config: dict | None = None) -> torch.device:
    """CUDA or CPU for a policy built with ``config`` in this process."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    if os.environ.get("CUDA_VISIBLE_DEVICES") or (config or {}).get(LEARNER_GPUS_KEY, 0) > 0:
        return torch.device("cuda")
    return torch.device("cpu")


class TorchPolicy(Policy):
    """A PyTorch policy: subclasses (or ``build_torch_policy``) supply the pieces.

    Args:
        observation_space: the (preprocessed) observation space.
        action_space: the action space.
        model: a ``TorchModel`` returning ``(logits, features, values, state)``.
        loss: ``loss(policy, batch_tensors) -> scalar tensor``.
        action_distribution_cls: the action distribution over the model's logits.
    """

    def __init__(self, observation_space, action_space, model, loss,
                 action_distribution_cls) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        if not hasattr(self, "config"):
            self.config = {}
        self.lock = threading.RLock()
        self.device = _policy_device(self.config)
        self.model = model.to(self.device)
        if isinstance(getattr(self, "target_model", None), torch.nn.Module):
            # DQN, DDPG/TD3, QMIX build their target network before calling this.
            self.target_model = self.target_model.to(self.device)
        self._loss = loss
        self.dist_class = action_distribution_cls
        self._optimizer = self.optimizer()

    # --- acting -----------------------------------------------------------------------

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None,
                        explore: bool = True, **kwargs):
        with self.lock, torch.inference_mode():
            input_dict = LazyInputDict(
                self.device, {SampleBatch.CUR_OBS: _tensor(np.asarray(obs_batch), self.device)})
            if prev_action_batch is not None:
                input_dict[SampleBatch.PREV_ACTIONS] = prev_action_batch
            if prev_reward_batch is not None:
                input_dict[SampleBatch.PREV_REWARDS] = prev_reward_batch
            state = [_tensor(np.asarray(s), self.device) for s in (state_batches or [])]
            model_out = self.model(input_dict, state)
            logits, _, _, state_out = model_out
            fast = getattr(self.dist_class, "sample_with_logp", None)
            if fast is not None:
                actions, logp = fast(logits, explore)
            else:  # a user's distribution without the numpy path
                dist = self.dist_class(logits)
                taken = dist.sample() if explore else dist.deterministic_sample()
                actions, logp = taken.cpu().numpy(), dist.logp(taken).cpu().numpy()
            extra = self.extra_action_out(input_dict, state, model_out)
            extra.setdefault(SampleBatch.ACTION_LOGP, logp)
            return actions, [s.cpu().numpy() for s in state_out], extra

    def extra_action_out(self, input_dict, state_batches, model_out) -> dict:
        """Extra columns from acting (``build_torch_policy``'s ``extra_action_out_fn``)."""
        return {}

    # --- learning ---------------------------------------------------------------------

    def learn_on_batch(self, postprocessed_batch) -> dict:
        with self.lock:
            loss = self._loss(self, self._lazy_tensors(postprocessed_batch))
            self._optimizer.zero_grad()
            loss.backward()
            grad_info = self.extra_grad_process()
            self._optimizer.step()
            return {"learner_stats": dict(self.extra_grad_info(postprocessed_batch),
                                          **grad_info)}

    def compute_gradients(self, postprocessed_batch) -> tuple[list[np.ndarray], dict]:
        with self.lock:
            loss = self._loss(self, self._lazy_tensors(postprocessed_batch))
            self._optimizer.zero_grad()
            loss.backward()
            grad_info = self.extra_grad_process()
            grads = [p.grad.detach().cpu().numpy().copy() if p.grad is not None
                     else np.zeros(p.shape, np.float32) for p in self.model.parameters()]
            info = {"learner_stats": dict(self.extra_grad_info(postprocessed_batch),
                                          **grad_info),
                    "batch_count": len(postprocessed_batch)}
            return grads, info

    def apply_gradients(self, gradients) -> None:
        with self.lock:
            for g, p in zip(gradients, self.model.parameters()):
                p.grad = torch.tensor(np.asarray(g), dtype=p.dtype, device=self.device)
            self._optimizer.step()

    def _lazy_tensors(self, batch) -> dict[str, torch.Tensor]:
        out = _Columns()
        for key, value in batch.items():
            if isinstance(value, np.ndarray) and value.dtype != object:
                out[key] = _tensor(value, self.device)
        return out

    # --- state ------------------------------------------------------------------------

    def get_weights(self) -> dict[str, np.ndarray]:
        with self.lock:
            return {k: v.detach().cpu().numpy().copy()
                    for k, v in self.model.state_dict().items()}

    def set_weights(self, weights: dict) -> None:
        with self.lock:
            self.model.load_state_dict(
                {k: torch.as_tensor(np.array(v), device=self.device)
                 for k, v in weights.items()})

    def get_state(self) -> dict:
        optimizer = self._optimizer.state_dict() if self._optimizer else None
        return {"weights": self.get_weights(), "optimizer": _to_cpu(optimizer)}

    def set_state(self, state) -> None:
        if isinstance(state, dict) and "weights" in state:
            self.set_weights(state["weights"])
            if state.get("optimizer") is not None and self._optimizer is not None:
                self._optimizer.load_state_dict(state["optimizer"])
        else:
            self.set_weights(state)

    def get_initial_state(self) -> list:
        # DQN's, DDPG's and QMIX's networks are plain nn.Modules, without state.
        state_init = getattr(self.model, "state_init", None)
        if state_init is None:
            return []
        return [s.detach().cpu().numpy() for s in state_init()]

    def export_model(self, export_dir: str) -> None:
        import os
        os.makedirs(export_dir, exist_ok=True)
        torch.save(self.model, os.path.join(export_dir, "model.pt"))

    def export_checkpoint(self, export_dir: str, filename_prefix: str = "model") -> None:
        """Write the policy's state (weights and optimizer) to
        ``<export_dir>/<filename_prefix>.pt`` (``torch.load`` reads it back)."""
        import os
        os.makedirs(export_dir, exist_ok=True)
        torch.save(self.get_state(), os.path.join(export_dir, f"{filename_prefix}.pt"))

    # --- hooks (build_torch_policy fills them) ------------------------------------------

    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer: Adam at ``config["lr"]`` unless overridden."""
        return torch.optim.Adam(self.model.parameters(), lr=self.config.get("lr", 1e-4))

    def extra_grad_process(self) -> dict:
        """Called after ``backward()`` (gradient clipping); returns stats."""
        return {}

    def extra_grad_info(self, batch) -> dict:
        """Learner stats after a loss computation."""
        return {}


class LazyInputDict(dict):
    """A model's ``input_dict`` whose values become tensors when first read
    (``d[key]`` or ``d.get(key)``), as Ray 0.7's ``UsageTrackingDict`` does: the
    sampler passes ``prev_actions``/``prev_rewards`` every step, and a model
    that never reads them should not pay for their conversion. ``items()`` and
    ``values()`` show values not read yet as given (lists or arrays).
    """

    def __init__(self, device, *args) -> None:
        super().__init__(*args)
        self._device = device

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        if not isinstance(value, torch.Tensor) and not isinstance(value, (dict, tuple)):
            value = _tensor(np.asarray(value), self._device)
            dict.__setitem__(self, key, value)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def copy(self) -> "LazyInputDict":
        return LazyInputDict(self._device, self)


def _to_cpu(obj):
    """``obj`` (an optimizer's state dict) with its tensors on the CPU, so that a
    checkpoint taken on a GPU restores anywhere (``load_state_dict`` moves the
    state to the parameters' device)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _tensor(array: np.ndarray, device) -> torch.Tensor:
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    elif array.dtype == np.bool_:
        array = array.astype(np.float32)
    if not array.flags.writeable:
        # Read-only views from the object store: torch warns on them, and no
        # op here writes in place, but copy to be safe for user losses.
        array = array.copy()
    return torch.from_numpy(array).to(device)


class _Columns(dict):
    """A training batch's tensors; a column the loss needs and the batch lacks
    (offline data not postprocessed, mostly) names the fix."""

    def __missing__(self, key):
        raise MissingColumn(
            f"the training batch has no column {key!r} (it has {sorted(self)}). With "
            f"offline input (\"input\"), set \"postprocess_inputs\": True to compute "
            f"postprocessed columns such as advantages, or write the column into the data")


class MissingColumn(KeyError):
    """A KeyError whose message reads as a sentence (KeyError's own quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0])
