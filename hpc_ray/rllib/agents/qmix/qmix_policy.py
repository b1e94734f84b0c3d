"""QMIX (and VDN) for a group of agents, in PyTorch.

The group acts as one agent of the env made by ``MultiAgentEnv.with_agent_groups``:
its observation is the agents' observations side by side, its action one action
per agent, its reward the team's. Each agent picks greedily from a shared agent
network (its own observation plus a one-hot agent id); a mixing network turns the
agents' chosen Q-values into ``Q_tot``, monotonic in each (QMIX: hypernetworks on
the global state; VDN: their sum; None: independent Q-learning on the team reward).
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...policy.sample_batch import SampleBatch
from ...policy.torch_policy import TorchPolicy, _tensor
from ..dqn.dqn_policy import PRIO_WEIGHTS, DQNTorchPolicy

__all__ = ["QMixTorchPolicy"]


class _AgentNet(nn.Module):
    def __init__(self, obs_dim: int, n_agents: int, n_actions: int, hidden: int) -> None:
        super().__init__()
        self.n_agents = n_agents
        self.net = nn.Sequential(nn.Linear(obs_dim + n_agents, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [B, n_agents * obs_dim]`` -> Q-values ``[B, n_agents, n_actions]``."""
        b = obs.shape[0]
        per_agent = obs.float().reshape(b, self.n_agents, -1)
        ids = torch.eye(self.n_agents, device=obs.device).expand(b, -1, -1)
        return self.net(torch.cat([per_agent, ids], -1))


class _QMixer(nn.Module):
    def __init__(self, n_agents: int, state_dim: int, embed: int) -> None:
        super().__init__()
        self.n_agents, self.embed = n_agents, embed
        self.hyper_w1 = nn.Linear(state_dim, n_agents * embed)
        self.hyper_b1 = nn.Linear(state_dim, embed)
        self.hyper_w2 = nn.Linear(state_dim, embed)
        self.v = nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, qs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        w1 = self.hyper_w1(state).abs().view(-1, self.n_agents, self.embed)
        hidden = F.elu(torch.bmm(qs.unsqueeze(1), w1).squeeze(1) + self.hyper_b1(state))
        w2 = self.hyper_w2(state).abs()
        return (hidden * w2).sum(-1) + self.v(state).squeeze(-1)


class _QMixModel(nn.Module):
    def __init__(self, obs_dim, n_agents, n_actions, config) -> None:
        super().__init__()
        hidden = int(config["model"].get("lstm_cell_size", 64))
        self.agent = _AgentNet(obs_dim, n_agents, n_actions, hidden)
        self.mixer_kind = config["mixer"]
        self.mixer = (_QMixer(n_agents, obs_dim * n_agents, config["mixing_embed_dim"])
                      if config["mixer"] == "qmix" else None)

    def mix(self, qs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        if self.mixer_kind == "qmix":
            return self.mixer(qs, state)
        if self.mixer_kind == "vdn":
            return qs.sum(-1)
        return qs  # independent learners: one TD error per agent


class QMixTorchPolicy(DQNTorchPolicy):
    """QMIX's policy for one agent group.

    Args:
        observation_space: the group's (flattened) observation space.
        action_space: a ``Tuple`` of one ``Discrete`` space per agent.
        config: the trainer's config (``agents.qmix.DEFAULT_CONFIG``).
    """

    def __init__(self, observation_space, action_space, config: dict) -> None:
        from .qmix import DEFAULT_CONFIG
        config = dict(DEFAULT_CONFIG, **config)
        spaces = getattr(action_space, "spaces", None)
        if type(action_space).__name__ != "Tuple" or not all(
                type(s).__name__ == "Discrete" for s in spaces):
            raise ValueError("QMIX acts for a group of agents: its action space must be a "
                             "Tuple of Discrete spaces; group the agents with "
                             "env.with_agent_groups(groups, obs_space=Tuple([...]), "
                             f"act_space=Tuple([...])), got {action_space!r}")
        self.config = config
        self.n_agents = len(spaces)
        self.n_actions = int(spaces[0].n)
        flat = int(np.prod(observation_space.shape))
        if flat % self.n_agents:
            raise ValueError(f"QMIX needs agents with equal observation sizes: {flat} "
                             f"values do not split over {self.n_agents} agents")
        model = _QMixModel(flat // self.n_agents, self.n_agents, self.n_actions, config)
        self.target_model = copy.deepcopy(model)
        self.epsilon = 1.0
        TorchPolicy.__init__(self, observation_space, action_space, model,
                             QMixTorchPolicy._q_loss, None)
        self._rng = np.random.default_rng(config.get("seed"))

    def optimizer(self):
        return torch.optim.RMSprop(self.model.parameters(), lr=self.config["lr"],
                                   alpha=self.config["optim_alpha"],
                                   eps=self.config["optim_eps"])

    def compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None,
                        prev_reward_batch=None, info_batch=None, episodes=None,
                        explore: bool = True, **kwargs):
        with self.lock, torch.inference_mode():
            qs = self.model.agent(_tensor(np.asarray(obs_batch), self.device)).cpu().numpy()
        actions = qs.argmax(-1)
        if explore and self.epsilon > 0:
            rand = self._rng.random(actions.shape) < self.epsilon
            actions = np.where(rand, self._rng.integers(0, self.n_actions, actions.shape),
                               actions)
        return actions.astype(np.int64), [], {"q_values": qs}

    def postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None):
        if PRIO_WEIGHTS not in sample_batch:
            sample_batch[PRIO_WEIGHTS] = np.ones(sample_batch.count, np.float32)
        return sample_batch

    def _q_loss(self, t: dict) -> torch.Tensor:
        obs, new_obs = t[SampleBatch.CUR_OBS].float(), t[SampleBatch.NEXT_OBS].float()
        actions = t[SampleBatch.ACTIONS].long().reshape(len(obs), self.n_agents)
        rewards = t[SampleBatch.REWARDS].float()
        not_done = 1.0 - t[SampleBatch.DONES].float()
        qs = self.model.agent(obs).gather(-1, actions[..., None]).squeeze(-1)
        with torch.no_grad():
            q_next = self.target_model.agent(new_obs)
            if self.config["double_q"]:
                best = self.model.agent(new_obs).argmax(-1, keepdim=True)
            else:
                best = q_next.argmax(-1, keepdim=True)
            target_tot = self.target_model.mix(q_next.gather(-1, best).squeeze(-1), new_obs)
            if target_tot.dim() == 2:  # independent learners
                target = rewards[:, None] + self.config["gamma"] * not_done[:, None] * target_tot
            else:
                target = rewards + self.config["gamma"] * not_done * target_tot
        q_tot = self.model.mix(qs, obs)
        td = q_tot - target
        loss = 0.5 * td.pow(2).mean()
        td_d = td.detach()
        self._td_error = td_d if td_d.dim() == 1 else td_d.abs().mean(-1)
        self._stats = {"mean_q_tot": q_tot.detach().mean(), "mean_td_error": td_d.mean(),
                       "mean_target": target.mean()}
        return loss

    def action_prob(self, batch) -> np.ndarray:
        raise ValueError("QMIX's epsilon-greedy policy has no action probabilities for "
                         "off-policy estimation; set \"input_evaluation\": []")
