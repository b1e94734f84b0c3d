"""``LSTM``: ``"use_lstm": True`` wraps a model's features in an LSTM cell.

::

    obs ──inner model──▶ features ─┐
    prev action (one-hot), reward ─┴▶ (lstm_use_prev_action_reward) ──▶ LSTM(lstm_cell_size)
                                      ──▶ logits (linear), value (linear)

As Ray 0.7's ``models/lstm.py``: the inner model is the one the catalog would
have built (the fully connected network, or the ``custom_model``); its feature
layer (its second output) feeds the LSTM; the logits and the value function
are linear layers on the LSTM's output. The state is ``[c, h]``, each
``[lstm_cell_size]``, zeros at an episode's start.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..lstm import add_time_dimension
from .model import TorchModel, normc_init

__all__ = ["LSTM"]


class LSTM(TorchModel):
    """An LSTM cell on top of ``inner``'s features.

    Args:
        obs_space, num_outputs, options: as for every ``TorchModel``.
        inner: the feed-forward model whose features the LSTM reads.
        action_space: the action space (for ``lstm_use_prev_action_reward``).
    """

    def __init__(self, obs_space, num_outputs: int, options: dict, inner: TorchModel,
                 action_space=None) -> None:
        TorchModel.__init__(self, obs_space, num_outputs, options)
        if inner.state_init():
            raise ValueError(f"use_lstm wraps a feed-forward model, but {type(inner).__name__} "
                             "has RNN state of its own: drop use_lstm, or its state")
        self.inner = inner
        self.cell_size = int(options.get("lstm_cell_size", 256))
        self.use_prev_action_reward = bool(options.get("lstm_use_prev_action_reward"))
        self.action_space = action_space
        in_size = _feature_size(inner, obs_space)
        if self.use_prev_action_reward:
            in_size += _action_size(action_space) + 1
        self.lstm = nn.LSTM(in_size, self.cell_size, batch_first=True)
        self.logits = nn.Linear(self.cell_size, num_outputs)
        normc_init(0.01)(self.logits.weight)
        nn.init.zeros_(self.logits.bias)
        self.value = nn.Linear(self.cell_size, 1)
        normc_init(1.0)(self.value.weight)
        nn.init.zeros_(self.value.bias)

    def get_initial_state(self) -> list:
        weight = self.logits.weight
        return [weight.new_zeros(self.cell_size), weight.new_zeros(self.cell_size)]

    def forward(self, input_dict: dict, hidden_state: list, seq_lens=None):
        # The inner model prepares its own observations (Dict, Tuple, images).
        _, features, _, _ = self.inner({"obs": input_dict["obs"]}, [])
        inputs = self._lstm_inputs(input_dict, features)
        if seq_lens is None:  # acting: one step per row
            seq_lens = torch.ones(inputs.shape[0], dtype=torch.int64)
        x = add_time_dimension(inputs, seq_lens)
        c, h = hidden_state
        state = (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous())
        if x.shape[1] == 1:
            out, (h_n, c_n) = self.lstm(x, state)
        else:
            lens = torch.as_tensor(seq_lens, dtype=torch.int64).cpu()
            packed = pack_padded_sequence(x, lens, batch_first=True, enforce_sorted=False)
            out, (h_n, c_n) = self.lstm(packed, state)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        out = out.reshape(-1, self.cell_size)
        return self.logits(out), out, self.value(out).squeeze(-1), [c_n[0], h_n[0]]

    def _lstm_inputs(self, input_dict, features: torch.Tensor) -> torch.Tensor:
        if not self.use_prev_action_reward:
            return features
        rows = features.shape[0]
        prev_a = input_dict.get("prev_actions")
        prev_r = input_dict.get("prev_rewards")
        if prev_a is None:  # compute_action() without prev_action: an episode's start
            prev_a = torch.zeros((rows,) + tuple(self.action_space.shape),
                                 device=features.device)
        if prev_r is None:
            prev_r = torch.zeros(rows, device=features.device)
        if type(self.action_space).__name__ == "Discrete":
            prev_a = F.one_hot(prev_a.long().reshape(rows), int(self.action_space.n))
        return torch.cat([features, prev_a.reshape(rows, -1).float(),
                          prev_r.reshape(rows, 1).float()], dim=1)


def _feature_size(inner: TorchModel, obs_space) -> int:
    with torch.no_grad():
        probe = torch.zeros((1,) + tuple(obs_space.shape))
        features = inner({"obs": probe}, [])[1]
    if features is None or features.dim() != 2:
        raise ValueError(f"use_lstm reads the features (second output) of "
                         f"{type(inner).__name__}: they must be [B, n], got "
                         f"{None if features is None else tuple(features.shape)}")
    return int(features.shape[1])


def _action_size(action_space) -> int:
    name = type(action_space).__name__
    if name == "Discrete":
        return int(action_space.n)
    if name == "Box":
        return int(np.prod(action_space.shape))
    raise ValueError(f"lstm_use_prev_action_reward needs a Discrete or Box action space, "
                     f"got {action_space!r}")
