"""``build_torch_policy``: a ``TorchPolicy`` class from functions (Ray 0.7's template)."""
from __future__ import annotations

import sys
from typing import Callable

from ..models.catalog import ModelCatalog, merged_model_config
from .torch_policy import TorchPolicy

__all__ = ["build_torch_policy"]


def build_torch_policy(name: str, loss_fn: Callable, get_default_config: Callable | None = None,
                       stats_fn: Callable | None = None, postprocess_fn: Callable | None = None,
                       extra_action_out_fn: Callable | None = None,
                       extra_grad_process_fn: Callable | None = None,
                       optimizer_fn: Callable | None = None,
                       before_init: Callable | None = None, after_init: Callable | None = None,
                       make_model_and_action_dist: Callable | None = None,
                       mixins: list | None = None) -> type:
    """Make a ``TorchPolicy`` subclass.

    Args:
        name: the class name (e.g. "PPOTorchPolicy").
        loss_fn: ``loss_fn(policy, batch_tensors) -> scalar tensor``.
        get_default_config: returns the defaults merged under the given config.
        stats_fn: ``stats_fn(policy, batch_tensors) -> dict`` of learner stats.
        postprocess_fn: ``postprocess_fn(policy, batch, other_agent_batches, episode)``.
        extra_action_out_fn: ``(policy, input_dict, state_batches, model_out) -> dict``
            of extra columns recorded while acting (``vf_preds``...).
        extra_grad_process_fn: ``(policy) -> dict`` after ``backward()`` (clipping).
        optimizer_fn: ``(policy, config) -> torch optimizer``.
        before_init, after_init: ``(policy, obs_space, action_space, config)``.
        make_model_and_action_dist: ``(policy, obs_space, action_space, config) ->
            (model, dist_class)``; the catalog's by default.
        mixins: classes placed before ``TorchPolicy`` in the new class's bases.

    Returns:
        the new policy class; ``.with_updates(**kw)`` makes a variant.
    """
    original_kwargs = dict(locals())
    base = type("_Base", tuple(mixins or []) + (TorchPolicy,), {})

    class policy_cls(base):
        def __init__(self, obs_space, action_space, config):
            if get_default_config:
                config = dict(get_default_config(), **config)
            self.config = config
            if before_init:
                before_init(self, obs_space, action_space, config)
            if make_model_and_action_dist:
                model, dist_class = make_model_and_action_dist(self, obs_space, action_space,
                                                               config)
            else:
                dist_class, logit_dim = ModelCatalog.get_action_dist(
                    action_space, config.get("model", {}), torch=True)
                model = ModelCatalog.get_torch_model(
                    obs_space, logit_dim, merged_model_config(config.get("model")),
                    action_space=action_space)
            TorchPolicy.__init__(self, obs_space, action_space, model, loss_fn, dist_class)
            if after_init:
                after_init(self, obs_space, action_space, config)

        def postprocess_trajectory(self, sample_batch, other_agent_batches=None,
                                   episode=None):
            if not postprocess_fn:
                return sample_batch
            return postprocess_fn(self, sample_batch, other_agent_batches, episode)

        def extra_action_out(self, input_dict, state_batches, model_out):
            if extra_action_out_fn:
                return extra_action_out_fn(self, input_dict, state_batches, model_out)
            return TorchPolicy.extra_action_out(self, input_dict, state_batches, model_out)

        def extra_grad_process(self):
            if extra_grad_process_fn:
                return extra_grad_process_fn(self)
            return TorchPolicy.extra_grad_process(self)

        def extra_grad_info(self, batch_tensors):
            if stats_fn:
                return stats_fn(self, batch_tensors)
            return TorchPolicy.extra_grad_info(self, batch_tensors)

        def optimizer(self):
            if optimizer_fn:
                return optimizer_fn(self, self.config)
            return TorchPolicy.optimizer(self)

    @staticmethod
    def with_updates(**overrides):
        new_cls = build_torch_policy(**dict(original_kwargs, **overrides))
        new_cls.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
        return new_cls

    policy_cls.with_updates = with_updates
    policy_cls.__name__ = name
    policy_cls.__qualname__ = name
    # Importable by name when assigned at module level (pickled by reference).
    policy_cls.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
    return policy_cls
