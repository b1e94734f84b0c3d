"""One interface over the kinds of env a rollout worker steps.

Every kind — a list of gym/gymnasium envs, a list of ``MultiAgentEnv``, a
``VectorEnv`` — is seen as ``num_envs`` slots that return dicts keyed by agent
id (a single-agent env has one agent, ``"agent0"``), so the sampler has one loop.
"""
from __future__ import annotations

from typing import Callable

from .gym_compat import GymCompat
from .multi_agent_env import MultiAgentEnv
from .vector_env import VectorEnv

__all__ = ["BaseEnv", "to_base_env", "DUMMY_AGENT_ID"]

#: The agent id of a single-agent env.
DUMMY_AGENT_ID = "agent0"


class BaseEnv:
    """``num_envs`` slots, each reset and stepped with dicts keyed by agent id."""

    num_envs: int
    observation_space = None
    action_space = None
    multi_agent = False

    def reset_at(self, index: int) -> dict:
        raise NotImplementedError

    def step_all(self, actions: list[dict]) -> tuple[list, list, list, list]:
        """Step every slot; per slot ``obs, rewards, dones (with "__all__"), infos``."""
        raise NotImplementedError

    def get_unwrapped(self) -> list:
        return []

    # Ray 0.7's interface of a BaseEnv of one's own (``_PollingEnv`` drives it):
    # poll() -> (obs, rewards, dones, infos, off_policy_actions), each a dict
    # env id -> agent id -> value; send_actions({env id: {agent id: action}});
    # try_reset(env id) -> that env's observations.

    def poll(self):
        raise NotImplementedError

    def send_actions(self, action_dict: dict) -> None:
        raise NotImplementedError

    def try_reset(self, env_id):
        return None

    @staticmethod
    def to_base_env(env, make_env=None, num_envs: int = 1, remote_envs: bool = False):
        """Ray 0.7's converter: ``env`` (a gym env, ``MultiAgentEnv``,
        ``VectorEnv`` or ``BaseEnv``) as a ``BaseEnv``; ``make_env(i)`` makes
        the other ``num_envs - 1`` copies."""
        return to_base_env(lambda i: env if i == 0 else make_env(i), num_envs, None)

    def stop(self) -> None:
        for env in self.get_unwrapped():
            close = getattr(env, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass


class _SingleAgentEnvs(BaseEnv):
    def __init__(self, envs: list) -> None:
        self.envs = envs
        self.num_envs = len(envs)
        self.observation_space = envs[0].observation_space
        self.action_space = envs[0].action_space

    def reset_at(self, index):
        return {DUMMY_AGENT_ID: self.envs[index].reset()}

    def step_all(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for env, act in zip(self.envs, actions):
            o, r, d, i = env.step(act[DUMMY_AGENT_ID])
            obs.append({DUMMY_AGENT_ID: o})
            rewards.append({DUMMY_AGENT_ID: r})
            dones.append({DUMMY_AGENT_ID: d, "__all__": d})
            infos.append({DUMMY_AGENT_ID: i})
        return obs, rewards, dones, infos

    def get_unwrapped(self):
        return [getattr(e, "env", e) for e in self.envs]


class _MultiAgentEnvs(BaseEnv):
    multi_agent = True

    def __init__(self, envs: list) -> None:
        self.envs = envs
        self.num_envs = len(envs)
        self.observation_space = getattr(envs[0], "observation_space", None)
        self.action_space = getattr(envs[0], "action_space", None)

    def reset_at(self, index):
        out = self.envs[index].reset()
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict) \
                and isinstance(out[0], dict):
            return out[0]
        return out

    def step_all(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for env, act in zip(self.envs, actions):
            out = env.step(act)
            if len(out) == 5:  # gymnasium-style multi-agent: terminateds, truncateds
                o, r, term, trunc, i = out
                d = {k: bool(term.get(k, False) or trunc.get(k, False))
                     for k in set(term) | set(trunc)}
            else:
                o, r, d, i = out
            if "__all__" not in d:
                raise ValueError(f"{type(env).__name__}.step() must return dones with an "
                                 f"'__all__' key, got keys {sorted(d)}")
            obs.append(o)
            rewards.append(r)
            dones.append(d)
            infos.append(i or {})
        return obs, rewards, dones, infos

    def get_unwrapped(self):
        return self.envs


class _VectorEnvAdapter(BaseEnv):
    def __init__(self, venv: VectorEnv) -> None:
        self.venv = venv
        self.num_envs = venv.num_envs
        self.observation_space = venv.observation_space
        self.action_space = venv.action_space
        self._started = False

    def reset_at(self, index):
        if not self._started:
            self._started = True
            self._initial = self.venv.vector_reset()
        if self._initial is not None and index < len(self._initial):
            o = self._initial[index]
            if index == len(self._initial) - 1:
                self._initial = None
            return {DUMMY_AGENT_ID: o}
        return {DUMMY_AGENT_ID: self.venv.reset_at(index)}

    def step_all(self, actions):
        o, r, d, i = self.venv.vector_step([a[DUMMY_AGENT_ID] for a in actions])
        return ([{DUMMY_AGENT_ID: x} for x in o], [{DUMMY_AGENT_ID: x} for x in r],
                [{DUMMY_AGENT_ID: x, "__all__": x} for x in d],
                [{DUMMY_AGENT_ID: x} for x in i])

    def get_unwrapped(self):
        return self.venv.get_unwrapped()


class _PollingEnv(BaseEnv):
    """A user's BaseEnv with Ray 0.7's poll/send_actions/try_reset, seen as
    slots: slot i is the i-th env id of its first poll."""

    def __init__(self, env: BaseEnv) -> None:
        self.env = env
        self.observation_space = getattr(env, "observation_space", None)
        self.action_space = getattr(env, "action_space", None)
        obs, _rewards, _dones, _infos, _off = env.poll()
        self.ids = sorted(obs, key=repr)
        self.num_envs = len(self.ids)
        self.multi_agent = any(set(o) != {DUMMY_AGENT_ID} for o in obs.values())
        self._initial = dict(obs)

    def reset_at(self, index):
        env_id = self.ids[index]
        if env_id in self._initial:
            return self._initial.pop(env_id)
        obs = self.env.try_reset(env_id)
        if obs is None:
            raise NotImplementedError(
                f"{type(self.env).__name__}.try_reset({env_id!r}) returned None: hpc_ray's "
                f"sampler resets an env when its episode ends and needs its observations")
        return obs

    def step_all(self, actions):
        self.env.send_actions({env_id: a for env_id, a in zip(self.ids, actions)})
        got: list = [{}, {}, {}, {}]
        while any(env_id not in got[0] for env_id in self.ids):
            for part, values in zip(got, self.env.poll()[:4]):
                part.update(values)
        return tuple([part[env_id] for env_id in self.ids] for part in got)

    def get_unwrapped(self):
        return []


def to_base_env(make_env: Callable[[int], object], num_envs: int, seed: int | None) -> BaseEnv:
    """``num_envs`` envs from ``make_env(vector_index)`` as one ``BaseEnv``."""
    first = make_env(0)
    if isinstance(first, BaseEnv):
        if type(first).poll is not BaseEnv.poll:
            return _PollingEnv(first)
        return first
    if isinstance(first, VectorEnv):
        return _VectorEnvAdapter(first)
    envs = [first] + [make_env(i) for i in range(1, num_envs)]
    if isinstance(first, MultiAgentEnv):
        return _MultiAgentEnvs(envs)
    return _SingleAgentEnvs([GymCompat(e, None if seed is None else seed + i)
                             for i, e in enumerate(envs)])
