"""The built-in fully connected network (``fcnet_hiddens``, ``fcnet_activation``)."""
from __future__ import annotations

import numpy as np
import torch.nn as nn

from .model import TorchModel, normc_init

__all__ = ["FullyConnectedNetwork"]

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "linear": nn.Identity}


def _mlp(in_size: int, hiddens: list[int], activation: str) -> tuple[nn.Module, int]:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"unknown fcnet_activation {activation!r} (known: {sorted(_ACTIVATIONS)})")
    layers: list[nn.Module] = []
    for size in hiddens:
        linear = nn.Linear(in_size, size)
        normc_init(1.0)(linear.weight)
        nn.init.zeros_(linear.bias)
        layers += [linear, _ACTIVATIONS[activation]()]
        in_size = size
    return nn.Sequential(*layers), in_size


class FullyConnectedNetwork(TorchModel):
    """Hidden layers for the policy and, unless ``vf_share_layers``, a separate
    value branch of the same shape; linear heads on top."""

    def __init__(self, obs_space, num_outputs: int, options: dict) -> None:
        super().__init__(obs_space, num_outputs, options)
        hiddens = list(options.get("fcnet_hiddens", [256, 256]))
        activation = options.get("fcnet_activation", "tanh")
        in_size = int(np.prod(obs_space.shape))
        self.hidden, out = _mlp(in_size, hiddens, activation)
        self.logits = nn.Linear(out, num_outputs)
        normc_init(0.01)(self.logits.weight)
        nn.init.zeros_(self.logits.bias)
        self.vf_share_layers = bool(options.get("vf_share_layers", False))
        if self.vf_share_layers:
            self.value_hidden = None
            vf_in = out
        else:
            self.value_hidden, vf_in = _mlp(in_size, hiddens, activation)
        self.value = nn.Linear(vf_in, 1)
        normc_init(1.0)(self.value.weight)
        nn.init.zeros_(self.value.bias)
        self.free_log_std = bool(options.get("free_log_std", False))

    def _forward(self, input_dict, hidden_state):
        obs = input_dict["obs_flat"]
        features = self.hidden(obs)
        logits = self.logits(features)
        vf_in = features if self.value_hidden is None else self.value_hidden(obs)
        value = self.value(vf_in).squeeze(-1)
        return logits, features, value, hidden_state
