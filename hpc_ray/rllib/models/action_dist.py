"""Action distributions over a model's output vector (PyTorch)."""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["ActionDistribution", "TorchCategorical", "TorchDiagGaussian",
           "TorchDeterministic", "TorchDirichlet", "Categorical", "DiagGaussian",
           "Deterministic", "Dirichlet"]


class ActionDistribution:
    """The policy's action distribution, parameterized by ``inputs`` (the logits).

    Args:
        inputs: a ``[batch, dist_dim]`` tensor from the model.
    """

    def __init__(self, inputs: torch.Tensor) -> None:
        self.inputs = inputs

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def deterministic_sample(self) -> torch.Tensor:
        raise NotImplementedError

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, other: "ActionDistribution") -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def required_model_output_shape(action_space, model_config) -> int:
        raise NotImplementedError

    @classmethod
    def sample_with_logp(cls, inputs: torch.Tensor, explore: bool = True,
                         rng: np.random.Generator | None = None):
        """Actions and their log-probabilities as numpy arrays (for acting)."""
        dist = cls(inputs)
        actions = dist.sample() if explore else dist.deterministic_sample()
        return actions.cpu().numpy(), dist.logp(actions).cpu().numpy()


class TorchCategorical(ActionDistribution):
    """Categorical distribution for ``Discrete`` actions."""

    def __init__(self, inputs: torch.Tensor) -> None:
        super().__init__(inputs)
        # No argument validation: it costs more than the forward pass of a small net.
        self.dist = torch.distributions.Categorical(logits=inputs, validate_args=False)

    def sample(self):
        return self.dist.sample()

    def deterministic_sample(self):
        return self.inputs.argmax(dim=-1)

    def logp(self, x):
        return self.dist.log_prob(x.long())

    def entropy(self):
        return self.dist.entropy()

    def kl(self, other):
        return torch.distributions.kl_divergence(self.dist, other.dist)

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return int(action_space.n)

    @classmethod
    def sample_with_logp(cls, inputs, explore=True, rng=None):
        # In numpy: for the few logits of one step, torch's per-op overhead
        # (logsumexp, multinomial) costs more than the network's forward pass.
        logits = inputs.detach().cpu().numpy().astype(np.float64)
        if explore:
            gumbel = -np.log(-np.log((rng or np.random).random(logits.shape)))
            actions = np.argmax(logits + gumbel, axis=-1)
        else:
            actions = np.argmax(logits, axis=-1)
        top = logits.max(axis=-1, keepdims=True)
        log_norm = top[..., 0] + np.log(np.exp(logits - top).sum(axis=-1))
        logp = np.take_along_axis(logits, actions[..., None], -1)[..., 0] - log_norm
        return actions, logp.astype(np.float32)


class TorchDiagGaussian(ActionDistribution):
    """A Gaussian per action dimension: the first half of ``inputs`` are the
    means, the second half the log standard deviations."""

    def __init__(self, inputs: torch.Tensor) -> None:
        super().__init__(inputs)
        mean, log_std = torch.chunk(inputs, 2, dim=-1)
        self.mean, self.log_std = mean, log_std
        self.dist = torch.distributions.Normal(mean, torch.exp(log_std), validate_args=False)

    def sample(self):
        return self.dist.sample()

    def deterministic_sample(self):
        return self.mean

    def logp(self, x):
        return self.dist.log_prob(x.float()).sum(-1)

    def entropy(self):
        return self.dist.entropy().sum(-1)

    def kl(self, other):
        return torch.distributions.kl_divergence(self.dist, other.dist).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return int(np.prod(action_space.shape)) * 2


class TorchDeterministic(ActionDistribution):
    """The inputs themselves as the action: a ``DiagGaussian`` with standard
    deviation zero (DDPG-style policies).

    As in Ray 0.7, the sampled action's log-probability is 0 (a point mass);
    entropy and KL are not defined.
    """

    def sample(self):
        return self.inputs

    def deterministic_sample(self):
        return self.inputs

    def logp(self, x):
        return torch.zeros(x.shape[:-1], dtype=self.inputs.dtype, device=self.inputs.device)

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return int(np.prod(action_space.shape))


class TorchDirichlet(ActionDistribution):
    """Dirichlet distribution for actions in [0, 1] that sum to 1 (an allocation
    of a resource, say).

    As in Ray 0.7, the concentration is ``exp(inputs) + 1e-7``, and ``self.inputs``
    is that concentration; ``logp`` clips ``x`` away from 0 and renormalizes it
    first, so that rounding errors in a sampled action do not give ``-inf``.
    """

    #: Keeps the concentration and ``logp``'s argument away from 0 (0.7's value).
    EPSILON = 1e-7

    def __init__(self, inputs: torch.Tensor) -> None:
        concentration = torch.exp(inputs) + self.EPSILON
        super().__init__(concentration)
        self.dist = torch.distributions.Dirichlet(concentration, validate_args=False)

    def sample(self):
        return self.dist.sample()

    def deterministic_sample(self):
        return self.dist.mean

    def logp(self, x):
        x = torch.clamp(x.to(self.inputs.dtype), min=self.EPSILON)
        return self.dist.log_prob(x / x.sum(-1, keepdim=True))

    def entropy(self):
        return self.dist.entropy()

    def kl(self, other):
        return torch.distributions.kl_divergence(self.dist, other.dist)

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return int(np.prod(action_space.shape))


# The 0.7 names (in 0.7 they were TF classes).
Categorical = TorchCategorical
DiagGaussian = TorchDiagGaussian
Deterministic = TorchDeterministic
Dirichlet = TorchDirichlet
