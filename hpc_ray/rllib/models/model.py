"""``restore_original_dimensions``: a flattened Dict/Tuple observation as the
nested dict/tuple it was (Ray 0.7 ``models/model.py``).

The flatten preprocessor concatenates a Dict's values (in the space's key
order) or a Tuple's items: a ``Box`` as its flattened values, a ``Discrete(n)``
as a one-hot vector of n. Unflattening slices a ``[B, size]`` batch back into
``{key: [B, *box_shape]}`` (or ``[B, n]`` one-hot for ``Discrete``), nesting
as deep as the space does. Torch tensors and numpy arrays both work.
"""
from __future__ import annotations

from typing import Any

__all__ = ["restore_original_dimensions"]


def restore_original_dimensions(obs, obs_space, tensorlib: Any = None):
    """Unpack a flattened observation batch into the original space's structure.

    Args:
        obs: a ``[B, size]`` tensor or array (a preprocessed observation batch).
        obs_space: the preprocessed space: its ``original_space`` (set by the
            flatten preprocessor for Dict and Tuple spaces) is unpacked into;
            without one, ``obs`` is returned as it is.
        tensorlib: accepted for Ray 0.7's signature (``tf``); unused.

    Returns:
        a dict (Dict), tuple (Tuple) or ``obs`` itself.
    """
    original = getattr(obs_space, "original_space", None)
    if original is None:
        return obs
    return _unpack_obs(obs, original)


def _unpack_obs(obs, space):
    name = type(space).__name__
    if name not in ("Dict", "Tuple"):
        return obs
    import gymnasium as gym
    size = int(gym.spaces.flatdim(space))
    if len(obs.shape) != 2 or obs.shape[1] != size:
        raise ValueError(f"expected a flattened observation batch of shape [B, {size}] "
                         f"for {space!r}, got {tuple(obs.shape)}")
    items = space.spaces.items() if name == "Dict" else enumerate(space.spaces)
    out, offset = {}, 0
    for key, sub in items:
        n = int(gym.spaces.flatdim(sub))
        part = obs[:, offset:offset + n]
        offset += n
        if type(sub).__name__ == "Box":
            part = part.reshape((-1,) + tuple(sub.shape))
        out[key] = _unpack_obs(part, sub)
    return out if name == "Dict" else tuple(out.values())
