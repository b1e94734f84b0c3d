"""``TorchModel``: the base class of PyTorch models (Ray 0.7 ``models/pytorch/model.py``)."""
from __future__ import annotations

import torch
import torch.nn as nn

from ..model import restore_original_dimensions

__all__ = ["TorchModel"]


class TorchModel(nn.Module):
    """A policy network: observations in; logits, features, values and state out.

    Subclasses implement ``_forward`` (Dict and Tuple observations arrive
    unflattened in ``input_dict["obs"]``, flat in ``input_dict["obs_flat"]``).
    Calling the model as
    ``model({"obs": obs}, state)`` returns ``(outputs, features, values, state)``
    of shapes ``[B, num_outputs]``, ``[B, feature_size]``, ``[B]``, and a list.

    Args:
        obs_space: the (preprocessed) observation space.
        num_outputs: the size of the action distribution's input.
        options: the trainer's ``model`` config.
    """

    def __init__(self, obs_space, num_outputs: int, options: dict) -> None:
        nn.Module.__init__(self)
        self.obs_space = obs_space
        self.num_outputs = num_outputs
        self.options = options

    def forward(self, input_dict: dict, hidden_state: list):
        """Call ``_forward`` with ``input_dict["obs_flat"]``, the observations
        as ``[B, -1]`` floats, and ``input_dict["obs"]``: the same, or for a Dict
        or Tuple observation space the dict or tuple of tensors it was (Ray 0.7's
        ``restore_original_dimensions``; ``obs_space.original_space`` is it)."""
        obs = input_dict["obs"]
        if obs.dim() > 2 and len(getattr(self.obs_space, "shape", ())) <= 1:
            obs = obs.reshape(obs.shape[0], -1)
        input_dict = input_dict.copy()  # a LazyInputDict stays lazy
        input_dict["obs_flat"] = obs = obs.float()
        input_dict["obs"] = restore_original_dimensions(obs, self.obs_space)
        return self._forward(input_dict, hidden_state)

    def _forward(self, input_dict: dict, hidden_state: list):
        """Return ``(outputs, features, values, state)``; see the class docstring."""
        raise NotImplementedError

    def state_init(self) -> list:
        """Initial RNN state (none for feed-forward models)."""
        return []


def normc_init(std: float = 1.0):
    """Rows of unit norm times ``std`` (the initializer RLlib's nets use)."""
    def init(weight: torch.Tensor) -> None:
        with torch.no_grad():
            weight.normal_(0, 1)
            weight *= std / torch.sqrt(weight.pow(2).sum(1, keepdim=True))
    return init
