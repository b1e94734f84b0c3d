"""``Policy``: what an agent does, and how it learns (Ray 0.7 ``policy/policy.py``)."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Policy", "TFPolicy", "build_tf_policy", "TF_ONLY"]

#: The message of every TensorFlow-only entry point.
TF_ONLY = ("hpc_ray.rllib runs on PyTorch only (the docs' \"use_pytorch\": True path): "
           "define policies with hpc_ray.rllib.policy.build_torch_policy or subclass "
           "TorchPolicy, and models with TorchModel")


class Policy:
    """The interface a rollout worker and a trainer use to act and learn.

    Args:
        observation_space: the (preprocessed) observation space.
        action_space: the action space.
        config: the policy's config (the trainer's config merged with overrides).
    """

    def __init__(self, observation_space, action_space, config: dict) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None,
                        **kwargs) -> tuple[np.ndarray, list, dict]:
        """Actions for a batch of observations.

        Returns:
            ``(actions, state_outs, extra_fetches)``: actions ``[B, ...]``, RNN state
            outputs, and extra columns (such as ``vf_preds``) for the sample batch.
        """
        raise NotImplementedError

    def compute_single_action(self, obs, state=None, prev_action=None, prev_reward=None,
                              info=None, episode=None, clip_actions: bool = False,
                              **kwargs) -> tuple[Any, list, dict]:
        """``compute_actions`` for one observation.

        Args:
            clip_actions: clip a ``Box`` action to the space's bounds (what the
                sampler does before an env sees it).
        """
        actions, states, extra = self.compute_actions(
            np.asarray(obs)[None], [np.asarray(s)[None] for s in (state or [])],
            prev_action_batch=None if prev_action is None else [prev_action],
            prev_reward_batch=None if prev_reward is None else [prev_reward],
            info_batch=None if info is None else [info],
            episodes=None if episode is None else [episode], **kwargs)
        action = actions[0]
        space = self.action_space
        if clip_actions and type(space).__name__ == "Box":
            action = np.clip(action, space.low, space.high)
        return action, [s[0] for s in states], {k: v[0] for k, v in extra.items()}

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        """Add columns (advantages...) to one agent's trajectory; return it."""
        return sample_batch

    def learn_on_batch(self, samples) -> dict:
        """Compute and apply gradients on ``samples``; return learner stats."""
        grads, info = self.compute_gradients(samples)
        self.apply_gradients(grads)
        return info

    def compute_gradients(self, postprocessed_batch) -> tuple[Any, dict]:
        raise NotImplementedError

    def apply_gradients(self, gradients) -> None:
        raise NotImplementedError

    def get_weights(self) -> Any:
        raise NotImplementedError

    def set_weights(self, weights) -> None:
        raise NotImplementedError

    def get_initial_state(self) -> list:
        return []

    def get_state(self) -> Any:
        """Everything to checkpoint (the weights, unless overridden)."""
        return self.get_weights()

    def set_state(self, state) -> None:
        self.set_weights(state)

    def on_global_var_update(self, global_vars: dict) -> None:
        pass

    def export_model(self, export_dir: str) -> None:
        raise NotImplementedError

    def export_checkpoint(self, export_dir: str, filename_prefix: str = "model") -> None:
        raise NotImplementedError


class TFPolicy(Policy):
    """Not available: hpc_ray.rllib has no TensorFlow."""

    def __init__(self, *args, **kwargs) -> None:
        raise NotImplementedError(TF_ONLY)


def build_tf_policy(*args, **kwargs):
    """Not available: see ``build_torch_policy``."""
    raise NotImplementedError(TF_ONLY)
