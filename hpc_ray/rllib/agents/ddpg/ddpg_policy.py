"""DDPG and TD3 in PyTorch, in one place to read.

Acting: the actor's action plus exploration noise (Ornstein-Uhlenbeck or
Gaussian, scaled by the action range and by the trainer's exploration scale),
uniformly random for the first ``pure_exploration_steps``, clipped to the bounds.
Learning: the critic regresses on ``r + gamma^n * Q'(s', mu'(s'))`` (TD3: the
smaller of twin critics, target policy smoothing); the actor ascends ``Q(s, mu(s))``
every ``policy_delay`` critic updates; targets follow with rate ``tau``.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn as nn

from ...models.pytorch.fcnet import _mlp
from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy import TorchPolicy, _tensor, _to_cpu
from ..dqn.dqn_policy import PRIO_WEIGHTS, _huber, adjust_nstep

__all__ = ["DDPGTorchPolicy"]


class _Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hiddens, activation: str, low, high):
        super().__init__()
        self.body, out = _mlp(obs_dim, list(hiddens), activation)
        self.head = nn.Linear(out, act_dim)
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32))

    def forward(self, obs):
        squashed = torch.tanh(self.head(self.body(obs.reshape(obs.shape[0], -1).float())))
        return self.low + (squashed + 1.0) * 0.5 * (self.high - self.low)


class _Critic(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hiddens, activation: str):
        super().__init__()
        self.body, out = _mlp(obs_dim + act_dim, list(hiddens), activation)
        self.head = nn.Linear(out, 1)

    def forward(self, obs, act):
        x = torch.cat([obs.reshape(obs.shape[0], -1).float(), act.float()], -1)
        return self.head(self.body(x)).squeeze(-1)


class _ActorCritic(nn.Module):
    """The policy's ``model``: actor, critic and (TD3) twin critic together."""

    def __init__(self, obs_dim, act_dim, config, low, high):
        super().__init__()
        self.actor = _Actor(obs_dim, act_dim, config["actor_hiddens"],
                            config["actor_hidden_activation"], low, high)
        self.critic = _Critic(obs_dim, act_dim, config["critic_hiddens"],
                              config["critic_hidden_activation"])
        self.twin_critic = (_Critic(obs_dim, act_dim, config["critic_hiddens"],
                                    config["critic_hidden_activation"])
                            if config["twin_q"] else None)


class DDPGTorchPolicy(TorchPolicy):
    """Deterministic policy gradients with a replay buffer (DDPG, TD3).

    Args:
        observation_space: the (preprocessed) observation space.
        action_space: a ``Box`` space with finite bounds.
        config: the trainer's config (``agents.ddpg.DEFAULT_CONFIG``).
    """

    def __init__(self, observation_space, action_space, config: dict) -> None:
        from .ddpg import DEFAULT_CONFIG
        config = dict(DEFAULT_CONFIG, **config)
        if type(action_space).__name__ != "Box":
            raise ValueError(f"DDPG/TD3 need a Box action space, got {action_space!r}; "
                             "use DQN for discrete actions")
        low, high = np.asarray(action_space.low), np.asarray(action_space.high)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError("DDPG/TD3 need finite action bounds (the actor's tanh is "
                             f"scaled to them), got low={low}, high={high}")
        self.config = config
        obs_dim = int(np.prod(observation_space.shape))
        act_dim = int(np.prod(action_space.shape))
        model = _ActorCritic(obs_dim, act_dim, config, low, high)
        self.target_model = copy.deepcopy(model)
        self.low, self.high = low.astype(np.float32), high.astype(np.float32)
        self.exploration_scale = 1.0
        self.pure_steps_left = int(config["pure_exploration_steps"])
        self.ou_state = np.zeros(act_dim, np.float32)
        self.num_updates = 0
        self._last_actor_loss = float("nan")
        self._rng = np.random.default_rng(config.get("seed"))
        TorchPolicy.__init__(self, observation_space, action_space, model,
                             DDPGTorchPolicy._critic_loss, None)

    def optimizer(self):
        self._actor_opt = torch.optim.Adam(self.model.actor.parameters(),
                                           lr=self.config["actor_lr"])
        critics = list(self.model.critic.parameters())
        if self.model.twin_critic is not None:
            critics += list(self.model.twin_critic.parameters())
        return torch.optim.Adam(critics, lr=self.config["critic_lr"])

    # --- acting ---------------------------------------------------------------------

    def set_epsilon(self, scale: float) -> None:
        """The exploration noise scale (the trainer's schedule; 1.0 unannealed)."""
        self.exploration_scale = float(scale)

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None,
                        explore: bool = True, **kwargs):
        obs = np.asarray(obs_batch)
        n = len(obs)
        if explore and self.pure_steps_left > 0:
            self.pure_steps_left -= n
            acts = self._rng.uniform(self.low, self.high, (n,) + self.low.shape)
            return acts.astype(np.float32), [], {}
        with self.lock, torch.inference_mode():
            acts = self.model.actor(_tensor(obs, self.device)).cpu().numpy()
        if explore and self.exploration_scale > 0:
            cfg, span = self.config, self.high - self.low
            if cfg["exploration_noise_type"] == "ou":
                self.ou_state += (-cfg["exploration_ou_theta"] * self.ou_state
                                  + cfg["exploration_ou_sigma"]
                                  * self._rng.standard_normal(self.ou_state.shape))
                noise = cfg["exploration_ou_noise_scale"] * self.ou_state * span
            else:
                noise = (cfg["exploration_gaussian_sigma"] * span
                         * self._rng.standard_normal(acts.shape))
            acts = acts + self.exploration_scale * noise
        return np.clip(acts, self.low, self.high).astype(np.float32), [], {}

    # --- postprocessing --------------------------------------------------------------

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        if self.config["n_step"] > 1:
            adjust_nstep(self.config["n_step"], self.config["gamma"], sample_batch)
        if PRIO_WEIGHTS not in sample_batch:
            sample_batch[PRIO_WEIGHTS] = np.ones(sample_batch.count, np.float32)
        if self.config["worker_side_prioritization"]:
            with self.lock, torch.no_grad():
                self._critic_loss(self._lazy_tensors(sample_batch))
            sample_batch["td_error"] = self._td_error.cpu().numpy().copy()
        return sample_batch

    # --- learning -------------------------------------------------------------------

    def _critic_loss(self, t: dict) -> torch.Tensor:
        cfg, m, tm = self.config, self.model, self.target_model
        obs, new_obs = t[SampleBatch.CUR_OBS], t[SampleBatch.NEXT_OBS]
        actions = t[SampleBatch.ACTIONS].float().reshape(len(obs), -1)
        rewards = t[SampleBatch.REWARDS].float()
        not_done = 1.0 - t[SampleBatch.DONES].float()
        weights = t.get(PRIO_WEIGHTS, torch.ones_like(rewards))
        with torch.no_grad():
            a_tp1 = tm.actor(new_obs)
            if cfg["smooth_target_policy"]:
                span = tm.actor.high - tm.actor.low
                noise = (torch.randn_like(a_tp1) * cfg["target_noise"]).clamp(
                    -cfg["target_noise_clip"], cfg["target_noise_clip"])
                a_tp1 = torch.max(torch.min(a_tp1 + noise * span / 2, tm.actor.high),
                                  tm.actor.low)
            q_tp1 = tm.critic(new_obs, a_tp1)
            if tm.twin_critic is not None:
                q_tp1 = torch.min(q_tp1, tm.twin_critic(new_obs, a_tp1))
            target = rewards + cfg["gamma"] ** cfg["n_step"] * not_done * q_tp1
        q_t = m.critic(obs, actions)
        td = q_t - target
        errs = _huber(td, cfg["huber_threshold"]) if cfg["use_huber"] else 0.5 * td.pow(2)
        if m.twin_critic is not None:
            td2 = m.twin_critic(obs, actions) - target
            errs = errs + (_huber(td2, cfg["huber_threshold"]) if cfg["use_huber"]
                           else 0.5 * td2.pow(2))
        loss = (weights * errs).mean()
        if cfg["l2_reg"]:
            loss = loss + cfg["l2_reg"] * sum(
                p.pow(2).sum() for n, p in m.named_parameters()
                if "critic" in n and "weight" in n)
        self._td_error = td.detach()
        self._stats = {"mean_q": float(q_t.detach().mean()), "max_q": float(q_t.detach().max()),
                       "min_q": float(q_t.detach().min()), "critic_loss": float(loss.detach())}
        return loss

    def _clip(self, params) -> None:
        if self.config["grad_norm_clipping"] is not None:
            nn.utils.clip_grad_norm_(params, self.config["grad_norm_clipping"])

    def learn_on_batch(self, postprocessed_batch) -> dict:
        with self.lock:
            t = self._lazy_tensors(postprocessed_batch)
            loss = self._critic_loss(t)
            self._optimizer.zero_grad()
            loss.backward()
            self._clip([p for g in self._optimizer.param_groups for p in g["params"]])
            self._optimizer.step()
            self.num_updates += 1
            if self.num_updates % self.config["policy_delay"] == 0:
                obs = t[SampleBatch.CUR_OBS]
                actor_loss = -self.model.critic(obs, self.model.actor(obs)).mean()
                if self.config["l2_reg"]:
                    actor_loss = actor_loss + self.config["l2_reg"] * sum(
                        p.pow(2).sum() for n, p in self.model.actor.named_parameters()
                        if "weight" in n)
                self._actor_opt.zero_grad()
                actor_loss.backward()
                self._clip(list(self.model.actor.parameters()))
                self._actor_opt.step()
                self._last_actor_loss = float(actor_loss.detach())
            # TD3 updates the actor every policy_delay steps: report its latest loss.
            self._stats["actor_loss"] = self._last_actor_loss
            return {"learner_stats": dict(self._stats),
                    "td_error": self._td_error.cpu().numpy()}

    def update_target(self, tau: float | None = None) -> None:
        """Move the target networks toward the learned ones by ``tau`` (config's)."""
        tau = self.config["tau"] if tau is None else tau
        with self.lock, torch.no_grad():
            for p_t, p in zip(self.target_model.parameters(), self.model.parameters()):
                p_t.mul_(1.0 - tau).add_(p, alpha=tau)

    # --- state ----------------------------------------------------------------------

    def get_state(self) -> dict:
        state = TorchPolicy.get_state(self)
        state.update(target={k: v.cpu().numpy().copy()
                             for k, v in self.target_model.state_dict().items()},
                     actor_optimizer=_to_cpu(self._actor_opt.state_dict()),
                     num_updates=self.num_updates, pure_steps_left=self.pure_steps_left)
        return state

    def set_state(self, state) -> None:
        TorchPolicy.set_state(self, state)
        if isinstance(state, dict) and "target" in state:
            self.target_model.load_state_dict(
                {k: torch.as_tensor(np.array(v), device=self.device)
                 for k, v in state["target"].items()})
            self._actor_opt.load_state_dict(state["actor_optimizer"])
            self.num_updates = state["num_updates"]
            self.pure_steps_left = state["pure_steps_left"]
