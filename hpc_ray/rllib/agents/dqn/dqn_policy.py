"""DQN's Q-network and loss in PyTorch, in one place to read (as CleanRL's ``dqn.py``).

Acting: epsilon-greedy over ``Q(s, .)`` (epsilon set by the trainer's schedule;
noisy layers add their own exploration). Postprocessing: n-step returns, then,
with worker-side prioritization, initial priorities from the TD errors.
Learning: the TD loss against a target network (double Q optional) weighted by
prioritized replay's importance weights, or the distributional (C51) cross
entropy when ``num_atoms > 1``; the new TD errors go back to the replay buffer.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...models.pytorch.fcnet import _mlp
from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy import TorchPolicy, _tensor

__all__ = ["DQNTorchPolicy", "QNetwork", "NoisyLinear", "adjust_nstep"]

PRIO_WEIGHTS = "weights"


# --- the network --------------------------------------------------------------------------


class NoisyLinear(nn.Module):
    """A linear layer with factorized Gaussian noise on its weights (Fortunato et al.)."""

    def __init__(self, in_size: int, out_size: int, sigma0: float) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_size)
        self.w_mu = nn.Parameter(torch.empty(out_size, in_size).uniform_(-bound, bound))
        self.b_mu = nn.Parameter(torch.empty(out_size).uniform_(-bound, bound))
        self.w_sigma = nn.Parameter(torch.full((out_size, in_size), sigma0 * bound))
        self.b_sigma = nn.Parameter(torch.full((out_size,), sigma0 * bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = lambda v: v.sign() * v.abs().sqrt()  # noqa: E731
        eps_in = f(torch.randn(self.w_mu.shape[1], device=self.w_mu.device))
        eps_out = f(torch.randn(self.w_mu.shape[0], device=self.w_mu.device))
        w = self.w_mu + self.w_sigma * torch.outer(eps_out, eps_in)
        b = self.b_mu + self.b_sigma * eps_out
        return F.linear(x, w, b)


def _head(in_size: int, hiddens: list[int], out: int, noisy: bool, sigma0: float) -> nn.Module:
    layers: list[nn.Module] = []
    for size in hiddens:
        layers += [NoisyLinear(in_size, size, sigma0) if noisy else nn.Linear(in_size, size),
                   nn.ReLU()]
        in_size = size
    layers.append(NoisyLinear(in_size, out, sigma0) if noisy else nn.Linear(in_size, out))
    return nn.Sequential(*layers)


class QNetwork(nn.Module):
    """Observations -> ``fcnet_hiddens`` (or the ``custom_model``'s features, as
    in Ray 0.7) -> a Q head with ``hiddens``, dueling (value and advantage
    streams) and distributional (``num_atoms`` per action) as configured.

    ``forward(obs)`` returns ``(q_values [B, A], atom_logits [B, A, atoms] or None)``.
    """

    def __init__(self, obs_dim: int, num_actions: int, config: dict,
                 obs_space=None) -> None:
        super().__init__()
        model = config.get("model", {})
        self.custom = None
        if model.get("custom_model"):
            self.custom, feat = _custom_features(obs_space, num_actions, model)
        else:
            self.base, feat = _mlp(obs_dim, list(model.get("fcnet_hiddens", [256, 256])),
                                   model.get("fcnet_activation", "tanh"))
        self.num_actions = num_actions
        self.num_atoms = int(config["num_atoms"])
        self.dueling = bool(config["dueling"])
        noisy, sigma0 = bool(config["noisy"]), float(config["sigma0"])
        hiddens = list(config["hiddens"])
        self.advantage = _head(feat, hiddens, num_actions * self.num_atoms, noisy, sigma0)
        if self.dueling:
            self.value = _head(feat, hiddens, self.num_atoms, noisy, sigma0)
        self.register_buffer("support", torch.linspace(
            float(config["v_min"]), float(config["v_max"]), self.num_atoms))

    def forward(self, obs: torch.Tensor):
        if self.custom is not None:
            x = self.custom({SampleBatch.CUR_OBS: obs}, [])[1]
        else:
            x = self.base(obs.reshape(obs.shape[0], -1).float())
        adv = self.advantage(x).view(-1, self.num_actions, self.num_atoms)
        if self.dueling:
            value = self.value(x).view(-1, 1, self.num_atoms)
            adv = value + adv - adv.mean(dim=1, keepdim=True)
        if self.num_atoms == 1:
            return adv.squeeze(-1), None
        q = (F.softmax(adv, dim=-1) * self.support).sum(-1)
        return q, adv


def _custom_features(obs_space, num_actions: int, model_config: dict):
    """The registered ``custom_model`` and the size of its features (the second
    output of a ``TorchModel``), which feed the Q head."""
    from ...models.catalog import ModelCatalog
    net = ModelCatalog.get_torch_model(obs_space, num_actions, model_config)
    if net.state_init():
        raise ValueError(f"custom_model {model_config['custom_model']!r} has RNN state; "
                         "DQN's Q-network is feed-forward (use a model without state_init)")
    with torch.no_grad():
        probe = torch.zeros((1,) + tuple(obs_space.shape))
        features = net({SampleBatch.CUR_OBS: probe}, [])[1]
    if features is None or features.dim() != 2:
        raise ValueError(f"custom_model {model_config['custom_model']!r} must return "
                         f"features of shape [B, n] as its second output (DQN's Q head "
                         f"reads them), got {None if features is None else tuple(features.shape)}")
    return net, int(features.shape[1])


# --- postprocessing -------------------------------------------------------------------------


def adjust_nstep(n_step: int, gamma: float, batch: SampleBatch) -> SampleBatch:
    """Rewrite one trajectory's rows as n-step transitions, in place:
    ``rewards[t] = sum_k gamma^k r[t+k]`` and ``new_obs[t] = new_obs[t+n-1]``
    (cut at the trajectory's end)."""
    n = batch.count
    rewards = np.asarray(batch[SampleBatch.REWARDS], np.float32)
    new_obs = np.array(batch[SampleBatch.NEXT_OBS])
    dones = np.array(batch[SampleBatch.DONES])
    out_r = rewards.copy()
    for k in range(1, n_step):
        out_r[:n - k] += (gamma ** k) * rewards[k:]
    last = np.minimum(np.arange(n) + n_step - 1, n - 1)
    # A done inside the window ends it there (the trajectory ends at its only done).
    batch[SampleBatch.REWARDS] = out_r
    batch[SampleBatch.NEXT_OBS] = new_obs[last]
    batch[SampleBatch.DONES] = dones[last]
    return batch


# --- the policy -------------------------------------------------------------------------------


class DQNTorchPolicy(TorchPolicy):
    """Q-learning with a target network (Ray 0.7 ``DQNTFPolicy``, in PyTorch).

    Args:
        observation_space: the (preprocessed) observation space.
        action_space: a ``Discrete`` space.
        config: the trainer's config (``DEFAULT_CONFIG`` of ``agents.dqn``).
    """

    def __init__(self, observation_space, action_space, config: dict) -> None:
        from .dqn import DEFAULT_CONFIG
        config = dict(DEFAULT_CONFIG, **config)
        if type(action_space).__name__ != "Discrete":
            raise ValueError(f"DQN needs a Discrete action space, got {action_space!r}; "
                             "use DDPG or TD3 for continuous actions")
        self.config = config
        obs_dim = int(np.prod(observation_space.shape))
        model = QNetwork(obs_dim, int(action_space.n), config, observation_space)
        self.target_model = QNetwork(obs_dim, int(action_space.n), config, observation_space)
        self.target_model.load_state_dict(model.state_dict())
        self.epsilon = 1.0
        TorchPolicy.__init__(self, observation_space, action_space, model,
                             DQNTorchPolicy._q_loss, None)
        self._rng = np.random.default_rng(config.get("seed"))

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=self.config["lr"],
                                eps=self.config["adam_epsilon"])

    # --- acting ---------------------------------------------------------------------

    def set_epsilon(self, epsilon: float) -> None:
        self.epsilon = float(epsilon)

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None,
                        explore: bool = True, **kwargs):
        with self.lock, torch.inference_mode():
            q, _ = self.model(_tensor(np.asarray(obs_batch), self.device))
            q = q.cpu().numpy()
        probs = self._probs(q, explore)
        if self.config["soft_q"] and explore:
            cum = np.cumsum(probs, -1)
            actions = np.minimum((cum < self._rng.random((len(q), 1))).sum(-1), q.shape[1] - 1)
        else:
            actions = q.argmax(-1)
            if explore and self.epsilon > 0:
                rand = self._rng.random(len(q)) < self.epsilon
                actions = np.where(rand, self._rng.integers(0, q.shape[1], len(q)), actions)
        # The behaviour probability of each action: what off-policy estimators need.
        prob = np.take_along_axis(probs, actions[:, None], -1)[:, 0].astype(np.float32)
        return actions.astype(np.int64), [], {"q_values": q, SampleBatch.ACTION_PROB: prob}

    def _probs(self, q: np.ndarray, explore: bool = True) -> np.ndarray:
        """Action probabilities: softmax(Q / temp) with soft_q, else epsilon-greedy."""
        if self.config["soft_q"] and explore:
            z = q / self.config["softmax_temp"]
            z = np.exp(z - z.max(-1, keepdims=True))
            return z / z.sum(-1, keepdims=True)
        eps = self.epsilon if explore else 0.0
        probs = np.full(q.shape, eps / q.shape[1])
        probs[np.arange(len(q)), q.argmax(-1)] += 1.0 - eps
        return probs

    def action_prob(self, batch) -> np.ndarray:
        """This policy's probability of each of ``batch``'s actions (for IS/WIS)."""
        with self.lock, torch.inference_mode():
            q, _ = self.model(_tensor(np.asarray(batch[SampleBatch.CUR_OBS]), self.device))
        probs = self._probs(q.cpu().numpy())
        return np.take_along_axis(probs, np.asarray(batch[SampleBatch.ACTIONS],
                                                    np.int64)[:, None], -1)[:, 0]

    # --- postprocessing --------------------------------------------------------------

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        if self.config["n_step"] > 1:
            adjust_nstep(self.config["n_step"], self.config["gamma"], sample_batch)
        if PRIO_WEIGHTS not in sample_batch:
            sample_batch[PRIO_WEIGHTS] = np.ones(sample_batch.count, np.float32)
        if self.config["worker_side_prioritization"]:
            td = self.compute_td_error(sample_batch)
            sample_batch["td_error"] = td
        return sample_batch

    # --- learning -------------------------------------------------------------------

    def _q_loss(self, t: dict) -> torch.Tensor:
        cfg = self.config
        obs, new_obs = t[SampleBatch.CUR_OBS], t[SampleBatch.NEXT_OBS]
        actions = t[SampleBatch.ACTIONS].long()
        rewards = t[SampleBatch.REWARDS].float()
        not_done = 1.0 - t[SampleBatch.DONES].float()
        weights = t.get(PRIO_WEIGHTS, torch.ones_like(rewards))
        discount = cfg["gamma"] ** cfg["n_step"]
        q, logits = self.model(obs)
        with torch.no_grad():
            q_tp1, logits_tp1 = self.target_model(new_obs)
            if cfg["double_q"]:
                best = self.model(new_obs)[0].argmax(-1)
            else:
                best = q_tp1.argmax(-1)
        if logits is None:
            q_t = q.gather(1, actions[:, None]).squeeze(1)
            target = rewards + discount * not_done * q_tp1.gather(1, best[:, None]).squeeze(1)
            td = q_t - target
            loss = (weights * _huber(td)).mean()
            q_d = q_t.detach()
            self._stats = {"mean_q": q_d.mean(), "min_q": q_d.min(), "max_q": q_d.max()}
        else:
            support = self.model.support
            atoms = support.shape[0]
            with torch.no_grad():
                rows = torch.arange(len(best), device=best.device)
                p_tp1 = F.softmax(logits_tp1[rows, best], -1)
                tz = (rewards[:, None] + discount * not_done[:, None] * support[None]).clamp(
                    cfg["v_min"], cfg["v_max"])
                delta = (cfg["v_max"] - cfg["v_min"]) / max(1, atoms - 1)
                b = (tz - cfg["v_min"]) / delta
                lo, hi = b.floor().long(), b.ceil().long()
                # b exactly on an atom: give the whole mass to it.
                lo[(hi > 0) & (lo == hi)] -= 1
                hi[(lo < atoms - 1) & (lo == hi)] += 1
                m = torch.zeros_like(p_tp1)
                m.scatter_add_(1, lo, p_tp1 * (hi.float() - b))
                m.scatter_add_(1, hi, p_tp1 * (b - lo.float()))
            rows = torch.arange(len(actions), device=actions.device)
            log_p = F.log_softmax(logits[rows, actions], -1)
            td = -(m * log_p).sum(-1)  # the cross entropy stands in for |TD| (priorities)
            loss = (weights * td).mean()
            q_t = q.gather(1, actions[:, None]).squeeze(1)
            q_d = q_t.detach()
            self._stats = {"mean_q": q_d.mean(), "min_q": q_d.min(), "max_q": q_d.max()}
        self._td_error = td.detach()
        self._stats["mean_td_error"] = td.detach().mean()
        return loss

    def learn_on_batch(self, postprocessed_batch) -> dict:
        with self.lock:
            loss = self._q_loss(self._lazy_tensors(postprocessed_batch))
            self._optimizer.zero_grad()
            loss.backward()
            if self.config["grad_norm_clipping"] is not None:
                nn.utils.clip_grad_norm_(self.model.parameters(),
                                         self.config["grad_norm_clipping"])
            self._optimizer.step()
            stats = {k: float(v) for k, v in self._stats.items()}
            stats.update(loss=float(loss.detach()), cur_lr=self.config["lr"])
            return {"learner_stats": stats, "td_error": self._td_error.cpu().numpy()}

    def compute_td_error(self, batch) -> np.ndarray:
        """The TD errors of ``batch``'s rows under the current networks (no update)."""
        with self.lock, torch.no_grad():
            self._q_loss(self._lazy_tensors(batch))
            return self._td_error.cpu().numpy().copy()

    def update_target(self) -> None:
        """Copy the Q-network's weights into the target network."""
        with self.lock:
            self.target_model.load_state_dict(self.model.state_dict())

    # --- state ----------------------------------------------------------------------

    def get_state(self) -> dict:
        state = TorchPolicy.get_state(self)
        state["target"] = {k: v.cpu().numpy().copy()
                           for k, v in self.target_model.state_dict().items()}
        state["epsilon"] = self.epsilon
        return state

    def set_state(self, state) -> None:
        TorchPolicy.set_state(self, state)
        if isinstance(state, dict) and "target" in state:
            self.target_model.load_state_dict(
                {k: torch.as_tensor(np.array(v), device=self.device)
                 for k, v in state["target"].items()})
            self.epsilon = state["epsilon"]


def _huber(x: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    return torch.where(x.abs() < delta, 0.5 * x.pow(2), delta * (x.abs() - 0.5 * delta))
