"""``TorchModel``: the base class of PyTorch models (Ray 0.7 ``models/pytorch/model.py``).

A recurrent model has RNN state: ``get_initial_state()`` returns its tensors.
Acting calls the model one step per row (``_forward(input_dict, state)``);
learning calls it on padded sequences (``_forward_sequences``, given
``seq_lens``; see ``models/lstm.py``), which by default steps ``_forward``
through time, so a step-wise model (a ``GRUCell``...) needs nothing more.
``from_batch`` does the padding and unpadding for a train batch.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from ..lstm import add_time_dimension, batch_sequence_lengths, padded_positions
from ..model import restore_original_dimensions

__all__ = ["TorchModel", "from_batch"]


class TorchModel(nn.Module):
    """A policy network: observations in; logits, features, values and state out.

    Subclasses implement ``_forward`` (Dict and Tuple observations arrive
    unflattened in ``input_dict["obs"]``, flat in ``input_dict["obs_flat"]``).
    Calling the model as
    ``model({"obs": obs}, state)`` returns ``(outputs, features, values, state)``
    of shapes ``[B, num_outputs]``, ``[B, feature_size]``, ``[B]``, and a list.

    A recurrent model also overrides ``get_initial_state()`` (a list of
    ``[h_size]`` tensors) and, to run whole sequences at once,
    ``_forward_sequences``. ``input_dict`` then also has ``prev_actions`` and
    ``prev_rewards`` (a_{t-1}, r_{t-1}).

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

    def forward(self, input_dict: dict, hidden_state: list, seq_lens=None):
        """Call ``_forward`` (``_forward_sequences`` when ``seq_lens`` is given) with ``input_dict["obs_flat"]``, the observations
        as ``[B, -1]`` floats, and ``input_dict["obs"]``: the same, or for a Dict
        or Tuple observation space the dict or tuple of tensors it was (Ray 0.7's
        ``restore_original_dimensions``; ``obs_space.original_space`` is it)."""
        obs = input_dict["obs"]
        if obs.dim() > 2 and len(getattr(self.obs_space, "shape", ())) <= 1:
            obs = obs.reshape(obs.shape[0], -1)
        input_dict = input_dict.copy()  # a LazyInputDict stays lazy
        input_dict["obs_flat"] = obs = obs.float()
        input_dict["obs"] = restore_original_dimensions(obs, self.obs_space)
        if seq_lens is None:
            return self._forward(input_dict, hidden_state)
        return self._forward_sequences(input_dict, hidden_state, seq_lens)

    def _forward(self, input_dict: dict, hidden_state: list):
        """Return ``(outputs, features, values, state)``; see the class docstring."""
        raise NotImplementedError

    def _forward_sequences(self, input_dict: dict, hidden_state: list, seq_lens):
        """Run padded sequences: ``input_dict``'s values are ``[B * T, ...]`` (B =
        ``len(seq_lens)``, zeros past each sequence's end; ``add_time_dimension``
        makes them ``[B, T, ...]``) and ``hidden_state`` is each sequence's
        initial state ``[B, h_size]``.

        Returns ``(outputs, features, values, state)``: the first three over
        all ``B * T`` padded rows (padding rows are dropped by the caller), the
        state after each sequence's last real step. This default steps
        ``_forward`` through time; override it to run a whole sequence at once.
        """
        seq_lens = torch.as_tensor(seq_lens)
        batch = len(seq_lens)
        time = _rows(input_dict) // batch
        lens = seq_lens.to(_device(input_dict))
        state = list(hidden_state)
        steps = []
        for t in range(time):
            step = {k: _time_step(v, batch, time, t) for k, v in _items(input_dict)}
            outputs, features, values, new_state = self._forward(step, state)
            alive = (t < lens)
            state = [torch.where(alive.reshape((-1,) + (1,) * (n.dim() - 1)), n, o)
                     for n, o in zip(new_state, state)]
            steps.append((outputs, features, values))
        return (*(_join_steps([s[i] for s in steps]) for i in range(3)), state)

    def get_initial_state(self) -> list:
        """Initial RNN state: a list of ``[h_size]`` tensors (none for a
        feed-forward model)."""
        return []

    def state_init(self) -> list:
        """``get_initial_state()`` (the name 0.7's models used)."""
        return self.get_initial_state()

    def from_batch(self, batch: dict, next_obs: bool = False):
        """``(outputs, features, values, state)`` for every row of a train batch;
        see ``from_batch``."""
        return from_batch(self, batch, next_obs)


# --- train batches through a model ---------------------------------------------------


def from_batch(model, batch: dict, next_obs: bool = False):
    """Run ``model`` on a train batch's tensors, one output row per batch row.

    A feed-forward model gets ``obs`` (and ``prev_actions``, ``prev_rewards``
    where the batch has them). A recurrent model gets the rows cut into
    sequences of at most ``max_seq_len`` (the model's options), padded, with
    the recorded ``state_in_N`` of each sequence's first row; its outputs come
    back unpadded, in the batch's row order, so a loss never sees padding.

    Args:
        next_obs: the model's outputs for ``new_obs`` instead (one step per
            row, from the recorded ``state_out_N``, with a_t and r_t as the
            previous action and reward): values to bootstrap from.
    """
    obs_key, prev = (("new_obs", ("actions", "rewards")) if next_obs
                     else ("obs", ("prev_actions", "prev_rewards")))
    input_dict = {"obs": batch[obs_key]}
    for src, dst in zip(prev, ("prev_actions", "prev_rewards")):
        if src in batch:
            input_dict[dst] = batch[src]
    state_init = getattr(model, "state_init", None)
    num_state = len(state_init()) if state_init is not None else 0
    if not num_state:
        return model(input_dict, [])
    key = "state_out_{}" if next_obs else "state_in_{}"
    missing = [key.format(i) for i in range(num_state) if key.format(i) not in batch]
    if missing:
        raise ValueError(f"a recurrent model learns from batches with its recorded state: "
                         f"the batch has no {missing} column (columns: {sorted(batch)})")
    state = [batch[key.format(i)] for i in range(num_state)]
    if next_obs:
        return model(input_dict, state)
    options = getattr(model, "options", None) or {}
    seq_lens = batch_sequence_lengths(batch, int(options.get("max_seq_len", 20)))
    positions, starts, max_len = padded_positions(seq_lens)
    device = batch[obs_key].device
    positions = torch.as_tensor(positions, device=device)
    starts = torch.as_tensor(starts, device=device)
    rows = len(seq_lens) * max_len
    padded = {k: _pad(v, positions, rows) for k, v in input_dict.items()}
    outputs, features, values, state_out = model(
        padded, [s[starts] for s in state], torch.as_tensor(seq_lens))
    return (outputs[positions], None if features is None else features[positions],
            values[positions], state_out)


def _pad(x: torch.Tensor, positions: torch.Tensor, rows: int) -> torch.Tensor:
    out = x.new_zeros((rows,) + tuple(x.shape[1:]))
    out[positions] = x
    return out


def _items(input_dict):
    return [(k, input_dict[k]) for k in list(input_dict.keys())]


def _rows(input_dict) -> int:
    value = input_dict["obs_flat"] if "obs_flat" in input_dict else input_dict["obs"]
    return int(value.shape[0])


def _device(input_dict):
    value = input_dict["obs_flat"] if "obs_flat" in input_dict else input_dict["obs"]
    return value.device


def _time_step(value, batch: int, time: int, t: int):
    """Step ``t`` of every sequence in a padded ``[B * T, ...]`` value (tensors,
    and dicts or tuples of them for Dict and Tuple observations)."""
    if isinstance(value, dict):
        return {k: _time_step(v, batch, time, t) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_time_step(v, batch, time, t) for v in value)
    if isinstance(value, torch.Tensor):
        return add_time_dimension(value, np.zeros(batch))[:, t]
    return value


def _join_steps(values: list):
    """``[B, ...]`` per step -> ``[B * T, ...]`` (sequence-major, as padded rows)."""
    if values[0] is None:
        return None
    return torch.stack(values, dim=1).reshape((-1,) + tuple(values[0].shape[1:]))


def normc_init(std: float = 1.0):
    """Rows of unit norm times ``std`` (the initializer RLlib's nets use)."""
    def init(weight: torch.Tensor) -> None:
        with torch.no_grad():
            weight.normal_(0, 1)
            weight *= std / torch.sqrt(weight.pow(2).sum(1, keepdim=True))
    return init
