"""The env loop of a rollout worker: act, step, record, postprocess.

::

    slots (BaseEnv) ──obs dicts──▶ preprocessor + filter per policy
        ▲                              │ one compute_actions call per policy,
        │ actions                      ▼ batched over every slot and agent
        └──────────────── policy.compute_actions ── extra columns (vf_preds, logp)
    the call also gets each agent's RNN state (``get_initial_state()`` at an
    episode's start, then the policy's last state out), previous action and
    reward, last info and episode, as Ray 0.7's sampler passes them;
    each step appends one row per acting agent to that agent's trajectory;
    an episode's end (or the batch's end, in "truncate_episodes" mode) runs
    policy.postprocess_trajectory on each trajectory (GAE and the like) and the
    rows go to that policy's part of the sample batch.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..env.base_env import BaseEnv
from ..policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from .episode import MultiAgentEpisode, RolloutMetrics, zero_action
from .sample_batch_builder import MultiAgentSampleBatchBuilder

__all__ = ["Sampler"]

_COLUMNS = (SampleBatch.CUR_OBS, SampleBatch.ACTIONS, SampleBatch.REWARDS,
            SampleBatch.DONES, SampleBatch.INFOS, SampleBatch.NEXT_OBS)


class _Trajectory:
    """One agent's rows since its last postprocessing."""

    __slots__ = ("agent_id", "policy_id", "agent_index", "rows", "extra", "prev_action",
                 "prev_reward")

    def __init__(self, agent_id, policy_id: str, agent_index: int, prev_action,
                 prev_reward: float) -> None:
        self.agent_id = agent_id
        self.policy_id = policy_id
        self.agent_index = agent_index
        #: The agent's action and reward before this trajectory's first row:
        #: ``prev_actions``/``prev_rewards`` are the columns shifted by one.
        self.prev_action = prev_action
        self.prev_reward = prev_reward
        self.rows: dict[str, list] = {k: [] for k in _COLUMNS}
        self.extra: dict[str, list] = {}

    def __len__(self) -> int:
        return len(self.rows[SampleBatch.REWARDS])

    def to_batch(self, eps_id: int, unroll_id: int) -> SampleBatch:
        n = len(self)
        cols = {k: np.asarray(v) for k, v in self.rows.items()}
        cols[SampleBatch.REWARDS] = rewards = cols[SampleBatch.REWARDS].astype(np.float32)
        actions = cols[SampleBatch.ACTIONS]
        prev_actions = np.empty_like(actions)
        prev_actions[0] = self.prev_action
        prev_actions[1:] = actions[:-1]
        cols[SampleBatch.PREV_ACTIONS] = prev_actions
        prev_rewards = np.empty_like(rewards)
        prev_rewards[0] = self.prev_reward
        prev_rewards[1:] = rewards[:-1]
        cols[SampleBatch.PREV_REWARDS] = prev_rewards
        infos = np.empty(n, object)  # dicts: np.asarray would try to broadcast them
        infos[:] = self.rows[SampleBatch.INFOS]
        cols[SampleBatch.INFOS] = infos
        cols.update({k: np.asarray(v) for k, v in self.extra.items()})
        cols[SampleBatch.EPS_ID] = np.full(n, eps_id, np.int64)
        cols[SampleBatch.AGENT_INDEX] = np.full(n, self.agent_index, np.int64)
        cols[SampleBatch.UNROLL_ID] = np.full(n, unroll_id, np.int64)
        return SampleBatch(cols)


class _Slot:
    """One sub-env: its episode, its agents' trajectories and filtered observations."""

    def __init__(self, episode: MultiAgentEpisode) -> None:
        self.episode = episode
        self.trajectories: dict[Any, _Trajectory] = {}
        self.obs: dict[Any, np.ndarray] = {}


class Sampler:
    """Steps a ``BaseEnv`` with a worker's policies and returns sample batches.

    Args:
        base_env: the worker's envs.
        policies: policy id -> ``Policy``.
        policy_mapping_fn: agent id -> policy id.
        preprocessors, obs_filters: policy id -> preprocessor / filter.
        batch_steps: steps per env per ``sample()`` call.
        batch_mode: "truncate_episodes" or "complete_episodes".
        horizon: steps after which an episode is ended (None: the env decides).
        soft_horizon: at the horizon, end the episode for metrics and
            postprocessing (rows not marked done) but go on stepping the env
            without a reset (Ray 0.7's ``soft_horizon``).
        clip_rewards: clip rewards to their sign.
        clip_actions: clip ``Box`` actions to the space's bounds.
        callbacks: the trainer's ``callbacks`` dict.
        worker: the rollout worker (passed to callbacks).
    """

    def __init__(self, base_env: BaseEnv, policies: dict, policy_mapping_fn: Callable,
                 preprocessors: dict, obs_filters: dict, batch_steps: int, batch_mode: str,
                 horizon: int | None, clip_rewards: bool, clip_actions: bool,
                 callbacks: dict, worker=None, soft_horizon: bool = False) -> None:
        self.env = base_env
        self.policies = policies
        self.policy_mapping_fn = policy_mapping_fn
        self.preprocessors = preprocessors
        self.obs_filters = obs_filters
        self.batch_steps = batch_steps
        self.complete_episodes = batch_mode == "complete_episodes"
        self.horizon = horizon or float("inf")
        self.soft_horizon = soft_horizon
        self.clip_rewards = clip_rewards
        self.clip_actions = clip_actions
        self.callbacks = callbacks or {}
        self.worker = worker
        self.metrics: list[RolloutMetrics] = []
        self._unroll_id = 0
        self._ready: dict[str, list[SampleBatch]] = {}
        self._ready_steps = 0
        self._slots: list[_Slot] = []
        #: What episodes gave ``add_extra_batch``: joins the next ``sample()``.
        self._extra_batches: list = []
        #: "truncate_episodes" ending a batch at an episode's end too (0.7's
        #: ``pack=False``); ``_episode_ended``: one ended in this ``collect()``.
        self._cut_at_episode_end = False
        self._episode_ended = False
        self._bounds = {}
        #: policy id -> its RNN state at an episode's start ([] for none).
        self._initial_state: dict[str, list] = {}
        #: policy id -> the previous action before an agent's first (zeros).
        self._zero_action: dict[str, Any] = {}
        for pid, policy in policies.items():
            space = policy.action_space
            if clip_actions and type(space).__name__ == "Box":
                self._bounds[pid] = (space.low, space.high)
            self._initial_state[pid] = list(policy.get_initial_state())
            self._zero_action[pid] = zero_action(space)

    # --- episodes -------------------------------------------------------------------

    def _start_episode(self, index: int) -> _Slot:
        slot = _Slot(MultiAgentEpisode(self.policies, self.policy_mapping_fn,
                                       self._new_batch_builder, self._extra_batches.append))
        self._callback("on_episode_start", env=self.env, episode=slot.episode)
        slot.obs = self._filter_obs(slot, self.env.reset_at(index))
        return slot

    def _filter_obs(self, slot: _Slot, raw: dict) -> dict:
        out = {}
        for agent_id, ob in raw.items():
            pid = slot.episode.policy_for(agent_id)
            out[agent_id] = self.obs_filters[pid](self.preprocessors[pid].transform(ob))
        slot.episode._last_raw_obs.update(raw)
        slot.episode._last_obs.update(out)
        return out

    def _flush(self, slot: _Slot, episode_done: bool) -> None:
        """Postprocess every trajectory of ``slot`` into the ready batches."""
        pre = {a: t.to_batch(slot.episode.episode_id, self._next_unroll())
               for a, t in slot.trajectories.items() if len(t)}
        for agent_id, batch in pre.items():
            traj = slot.trajectories[agent_id]
            policy = self.policies[traj.policy_id]
            others = {a: (self.policies[slot.trajectories[a].policy_id], b)
                      for a, b in pre.items() if a != agent_id}
            post = policy.postprocess_trajectory(batch, others, slot.episode)
            self._callback("on_postprocess_traj", agent_id=agent_id, episode=slot.episode,
                           pre_batch=(policy, batch), post_batch=post, all_pre_batches=others)
            self._ready.setdefault(traj.policy_id, []).append(post)
        slot.trajectories = {}

    def _new_batch_builder(self) -> MultiAgentSampleBatchBuilder:
        return MultiAgentSampleBatchBuilder(self.policies, self.clip_rewards,
                                            self.callbacks.get("on_postprocess_traj"))

    def _next_unroll(self) -> int:
        self._unroll_id += 1
        return self._unroll_id

    # --- the loop ---------------------------------------------------------------------

    def sample(self):
        """Step until ``batch_steps * num_envs`` env steps are ready; return them,
        followed by the episodes' extra batches."""
        out = self.collect()
        extra = self.take_extra_batches()
        if extra:
            out = _with_extra(out, extra)
        self._callback("on_sample_end", worker=self.worker, samples=out)
        return out

    def collect(self):
        """The next ``batch_steps * num_envs`` env steps (whole episodes in
        "complete_episodes" mode; with ``_cut_at_episode_end``, fewer when an
        episode ends first), without the extra batches."""
        if not self._slots:
            self._slots = [self._start_episode(i) for i in range(self.env.num_envs)]
        target = self.batch_steps * self.env.num_envs
        steps_open = 0
        self._episode_ended = False
        while self._ready_steps < target:
            steps_open += self._step()
            if not self.complete_episodes and (
                    self._ready_steps + steps_open >= target
                    or (self._cut_at_episode_end and self._episode_ended)):
                for slot in self._slots:
                    self._flush(slot, episode_done=False)
                self._ready_steps += steps_open
                steps_open = 0
                if self._episode_ended:
                    break
        ready, count = self._ready, self._ready_steps
        self._ready, self._ready_steps = {}, 0
        batches = {pid: SampleBatch.concat_samples(bs) for pid, bs in ready.items()}
        return MultiAgentBatch.wrap_as_needed(batches, count)

    def take_extra_batches(self) -> list:
        """The batches episodes gave ``add_extra_batch`` since the last call."""
        # Emptied in place: running episodes hold this list's ``append``.
        extra = list(self._extra_batches)
        self._extra_batches.clear()
        return extra

    def _step(self) -> int:
        """One step of every slot; return the env steps it adds to the open
        trajectories ("truncate_episodes"; "complete_episodes" counts whole
        episodes into ``_ready_steps`` as they end)."""
        # Act: one batched forward pass per policy over every slot and agent.
        slots = self._slots
        by_policy: dict[str, list[tuple[int, Any]]] = {}
        for i, slot in enumerate(slots):
            for agent_id in slot.obs:
                by_policy.setdefault(slot.episode.policy_for(agent_id), []).append(
                    (i, agent_id))
        actions: list[dict] = [{} for _ in slots]
        for pid, where in by_policy.items():
            self._act(pid, where, actions)
        env_actions = actions
        if self._bounds:
            env_actions = [{a: self._clip(self._slots[i].episode.policy_for(a), x)
                            for a, x in acts.items()} for i, acts in enumerate(actions)]
        obs, rewards, dones, infos = self.env.step_all(env_actions)
        # Record one row per acting agent.
        counted = 0
        clip_rewards = self.clip_rewards
        for i, slot in enumerate(slots):
            ep = slot.episode
            ep.length += 1
            ep._add_rewards(rewards[i])
            ep._last_infos.update(infos[i])
            env_done = bool(dones[i].get("__all__"))
            all_done = env_done or ep.length >= self.horizon
            soft = all_done and not env_done and self.soft_horizon
            row_done = all_done and not soft
            new_obs = self._filter_obs(slot, obs[i])
            last_actions, prev_actions = ep._last_actions, ep._prev_actions
            pi_info = ep._last_pi_info
            for agent_id, act in actions[i].items():
                prev_act = last_actions.get(agent_id)
                if prev_act is not None:
                    prev_actions[agent_id] = prev_act
                last_actions[agent_id] = act
                traj = slot.trajectories.get(agent_id)
                if traj is None:
                    traj = self._new_trajectory(slot, agent_id, prev_act)
                rew = float(rewards[i].get(agent_id, 0.0))
                if clip_rewards:
                    rew = float(np.sign(rew))
                rows = traj.rows
                rows[SampleBatch.CUR_OBS].append(slot.obs[agent_id])
                rows[SampleBatch.ACTIONS].append(act)
                rows[SampleBatch.REWARDS].append(rew)
                rows[SampleBatch.DONES].append(row_done or bool(dones[i].get(agent_id, False)))
                rows[SampleBatch.INFOS].append(infos[i].get(agent_id) or {})
                rows[SampleBatch.NEXT_OBS].append(new_obs.get(agent_id, slot.obs[agent_id]))
                for k, v in pi_info[agent_id].items():
                    traj.extra.setdefault(k, []).append(v)
            self._callback("on_episode_step", env=self.env, episode=ep)
            slot.obs = {a: o for a, o in new_obs.items()
                        if not dones[i].get(a, False) and not row_done}
            if all_done:
                self._episode_ended = True
                self._flush(slot, episode_done=True)
                self._callback("on_episode_end", env=self.env, episode=ep)
                self.metrics.append(ep._metrics())
                length = ep.length
                if soft:
                    ep.soft_reset()  # the env goes on from its current observation
                else:
                    self._slots[i] = self._start_episode(i)
                if self.complete_episodes:
                    self._ready_steps += length
                    continue
            if not self.complete_episodes:
                counted += 1
        return counted

    def _new_trajectory(self, slot: _Slot, agent_id, prev_action) -> _Trajectory:
        ep = slot.episode
        pid = ep.policy_for(agent_id)
        prev_reward = ep._prev_rewards.get(agent_id, 0.0)
        if self.clip_rewards:
            prev_reward = float(np.sign(prev_reward))
        traj = slot.trajectories[agent_id] = _Trajectory(
            agent_id, pid, len(slot.trajectories),
            self._zero_action[pid] if prev_action is None else prev_action, prev_reward)
        return traj

    def _act(self, pid: str, where: list[tuple[int, Any]], actions: list[dict]) -> None:
        """``compute_actions`` of policy ``pid`` for the agents ``where`` (slot
        index, agent id), with Ray 0.7's arguments; fills ``actions`` and each
        episode's last policy info (extra columns, RNN state in and out)."""
        slots = self._slots
        zero = self._zero_action[pid]
        episodes, obs, prev_actions, prev_rewards, infos = [], [], [], [], []
        for i, a in where:
            slot = slots[i]
            ep = slot.episode
            episodes.append(ep)
            obs.append(slot.obs[a])
            prev_actions.append(ep._last_actions.get(a, zero))
            prev_rewards.append(ep._last_rewards.get(a, 0.0))
            infos.append(ep._last_infos.get(a) or {})
        obs = np.stack(obs)
        if self.clip_rewards:
            prev_rewards = np.sign(prev_rewards).tolist()
        initial = self._initial_state[pid]
        if initial:
            per_agent = [ep._rnn_state.get(a) or initial for ep, (_, a) in zip(episodes, where)]
            state_in = [np.asarray([s[j] for s in per_agent]) for j in range(len(initial))]
        else:
            state_in = []
        acts, state_out, extra = self.policies[pid].compute_actions(
            obs, state_in, prev_action_batch=prev_actions, prev_reward_batch=prev_rewards,
            info_batch=infos, episodes=episodes)
        if len(state_out or ()) != len(initial):
            raise ValueError(
                f"policy {pid!r}: compute_actions returned {len(state_out or ())} RNN state "
                f"outputs for {len(initial)} inputs (get_initial_state() has "
                f"{len(initial)}); return the new state of each")
        if initial:
            extra = dict(extra)
            for j in range(len(initial)):
                extra[f"state_in_{j}"] = state_in[j]
                extra[f"state_out_{j}"] = state_out[j]
        for row, (ep, (i, agent_id)) in enumerate(zip(episodes, where)):
            actions[i][agent_id] = acts[row]
            ep._last_pi_info[agent_id] = {k: v[row] for k, v in extra.items()}
            if initial:
                ep._rnn_state[agent_id] = [s[row] for s in state_out]

    def _clip(self, pid: str, action):
        bounds = self._bounds.get(pid)
        return action if bounds is None else np.clip(action, bounds[0], bounds[1])

    def _callback(self, name: str, **info) -> None:
        fn = self.callbacks.get(name)
        if fn is not None:
            fn(info)

    def get_metrics(self) -> list[RolloutMetrics]:
        out, self.metrics = self.metrics, []
        return out


def _with_extra(out, extra: list):
    """``out`` followed by the episodes' extra batches: one ``SampleBatch`` when
    all are the default policy's, else a ``MultiAgentBatch``."""
    parts = [out] + extra
    if all(isinstance(b, SampleBatch) for b in parts):
        keys = set(out.keys())
        for b in extra:
            if set(b.keys()) != keys:
                raise ValueError(f"add_extra_batch: a batch with columns {sorted(b.keys())} "
                                 f"cannot join the sampled ones {sorted(keys)}; give it "
                                 f"the same columns")
        return SampleBatch.concat_samples(parts)
    return MultiAgentBatch.concat_samples(
        [b if isinstance(b, MultiAgentBatch) else MultiAgentBatch({DEFAULT_POLICY_ID: b}, b.count)
         for b in parts])



def __getattr__(name: str):
    # 0.7's path, ``ray.rllib.evaluation.sampler.SyncSampler``; they live in
    # sync_async_sampler.py, which imports this module.
    if name in ("SyncSampler", "AsyncSampler"):
        from . import sync_async_sampler
        return getattr(sync_async_sampler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
