"""``ModelCatalog``: models, preprocessors and action distributions for spaces."""
from __future__ import annotations

import copy
from typing import Any

from ..utils.registry import register_everywhere
from .preprocessors import Preprocessor, get_preprocessor

__all__ = ["ModelCatalog", "MODEL_DEFAULTS"]

#: The ``model`` config keys (Ray 0.7 ``models/catalog.py``), with their defaults.
MODEL_DEFAULTS: dict[str, Any] = {
    # === Built-in options ===
    "conv_filters": None,
    "conv_activation": "relu",
    "fcnet_activation": "tanh",
    "fcnet_hiddens": [256, 256],
    "free_log_std": False,
    "squash_to_range": False,
    "vf_share_layers": False,
    "use_lstm": False,
    "max_seq_len": 20,
    "lstm_cell_size": 256,
    "lstm_use_prev_action_reward": False,
    "framestack": True,
    "dim": 84,
    "grayscale": False,
    "zero_mean": True,
    # === Options for custom models ===
    "custom_preprocessor": None,
    "custom_model": None,
    "custom_action_dist": None,
    "custom_options": {},
}

_CUSTOM_MODELS: dict[str, type] = {}
_CUSTOM_PREPROCESSORS: dict[str, type] = {}
_CUSTOM_ACTION_DISTS: dict[str, type] = {}

_TF_ONLY = ("hpc_ray.rllib runs on PyTorch: use ModelCatalog.get_torch_model() with a "
            "TorchModel subclass (hpc_ray.rllib.models.pytorch.model.TorchModel) and "
            "register it with ModelCatalog.register_custom_model")


class ModelCatalog:
    """Registry of models, preprocessors and action distributions for envs.

    Example::

        prep = ModelCatalog.get_preprocessor_for_space(env.observation_space)
        dist_cls, dist_dim = ModelCatalog.get_action_dist(env.action_space, {})
        model = ModelCatalog.get_torch_model(prep.observation_space, dist_dim, {})
    """

    @staticmethod
    def get_action_dist(action_space, config: dict | None = None, dist_type=None,
                        torch: bool = True):
        """The action distribution class and its input size for ``action_space``.

        ``dist_type="deterministic"`` gives ``Deterministic`` for a ``Box`` (0.7's).

        Raises:
            NotImplementedError: for spaces without a torch distribution here.
        """
        from .action_dist import TorchCategorical, TorchDeterministic, TorchDiagGaussian
        config = config or {}
        custom = config.get("custom_action_dist")
        if custom:
            if custom not in _CUSTOM_ACTION_DISTS:
                raise ValueError(f"unknown custom_action_dist {custom!r} (registered: "
                                 f"{sorted(_CUSTOM_ACTION_DISTS)})")
            cls = _CUSTOM_ACTION_DISTS[custom]
            return cls, cls.required_model_output_shape(action_space, config)
        name = type(action_space).__name__
        if name == "Discrete":
            return TorchCategorical, int(action_space.n)
        if name == "Box" and dist_type == "deterministic":
            return TorchDeterministic, TorchDeterministic.required_model_output_shape(
                action_space, config)
        if name == "Box":
            return TorchDiagGaussian, TorchDiagGaussian.required_model_output_shape(
                action_space, config)
        raise NotImplementedError(f"no action distribution for {action_space!r} in "
                                  "hpc_ray.rllib (Discrete and Box are supported)")

    @staticmethod
    def get_torch_model(obs_space, num_outputs: int, options: dict | None = None,
                        default_model_cls=None, action_space=None):
        """The model for ``obs_space``: the registered ``custom_model`` if one is set,
        else ``default_model_cls`` or the fully connected network; with
        ``use_lstm``, that model's features go through an LSTM cell
        (``models.pytorch.lstm.LSTM``; ``action_space`` is needed for
        ``lstm_use_prev_action_reward``)."""
        from .pytorch.fcnet import FullyConnectedNetwork
        options = dict(MODEL_DEFAULTS, **(options or {}))
        custom = options.get("custom_model")
        if custom:
            if custom not in _CUSTOM_MODELS:
                raise ValueError(f"unknown custom_model {custom!r} (registered: "
                                 f"{sorted(_CUSTOM_MODELS)}); call "
                                 f"ModelCatalog.register_custom_model({custom!r}, cls) first")
            model = _CUSTOM_MODELS[custom](obs_space, num_outputs, options)
        else:
            cls = default_model_cls or FullyConnectedNetwork
            # Under the LSTM the inner net's own value branch would go unused.
            model = cls(obs_space, num_outputs,
                        dict(options, vf_share_layers=True) if options["use_lstm"] else options)
        if not options["use_lstm"]:
            return model
        from .pytorch.lstm import LSTM
        if options["lstm_use_prev_action_reward"] and action_space is None:
            raise ValueError("lstm_use_prev_action_reward needs the action space: pass "
                             "action_space= to ModelCatalog.get_torch_model")
        return LSTM(obs_space, num_outputs, options, model, action_space)

    @staticmethod
    def get_model(*args, **kwargs):
        """TensorFlow models are not available: see ``get_torch_model``."""
        raise NotImplementedError(_TF_ONLY)

    @staticmethod
    def get_model_v2(*args, **kwargs):
        raise NotImplementedError(_TF_ONLY)

    @staticmethod
    def get_action_placeholder(action_space):
        raise NotImplementedError("placeholders are TensorFlow graph inputs; hpc_ray.rllib "
                                  "runs on PyTorch, where actions are plain tensors")

    @staticmethod
    def get_preprocessor(env, options: dict | None = None) -> Preprocessor:
        """The preprocessor for ``env``'s observation space."""
        return ModelCatalog.get_preprocessor_for_space(env.observation_space, options)

    @staticmethod
    def get_preprocessor_for_space(observation_space, options: dict | None = None
                                   ) -> Preprocessor:
        """A preprocessor instance for ``observation_space``."""
        options = dict(MODEL_DEFAULTS, **(options or {}))
        custom = options.get("custom_preprocessor")
        if custom:
            if custom not in _CUSTOM_PREPROCESSORS:
                raise ValueError(f"unknown custom_preprocessor {custom!r} (registered: "
                                 f"{sorted(_CUSTOM_PREPROCESSORS)})")
            return _CUSTOM_PREPROCESSORS[custom](observation_space, options)
        return get_preprocessor(observation_space)(observation_space, options)

    @staticmethod
    def register_custom_model(model_name: str, model_class: type) -> None:
        """Register a ``TorchModel`` subclass for ``{"custom_model": model_name}``.

        The registration reaches every worker process of the job.
        """
        if not isinstance(model_class, type):
            raise TypeError(f"model_class must be a class, got {model_class!r}")

        def install(name=model_name, cls=model_class):
            _table("_CUSTOM_MODELS")[name] = cls
        register_everywhere(install)

    @staticmethod
    def register_custom_preprocessor(preprocessor_name: str, preprocessor_class: type) -> None:
        """Register a ``Preprocessor`` subclass for ``{"custom_preprocessor": name}``."""
        def install(name=preprocessor_name, cls=preprocessor_class):
            _table("_CUSTOM_PREPROCESSORS")[name] = cls
        register_everywhere(install)

    @staticmethod
    def register_custom_action_dist(action_dist_name: str, action_dist_class: type) -> None:
        """Register an ``ActionDistribution`` subclass for ``{"custom_action_dist": name}``."""
        def install(name=action_dist_name, cls=action_dist_class):
            _table("_CUSTOM_ACTION_DISTS")[name] = cls
        register_everywhere(install)


def _table(name: str) -> dict:
    # Through the module: a registration shipped to another process by
    # cloudpickle would otherwise fill a copy of the global dict.
    import importlib
    return getattr(importlib.import_module(__name__), name)


def merged_model_config(options: dict | None) -> dict:
    merged = copy.deepcopy(MODEL_DEFAULTS)
    merged.update(options or {})
    return merged
