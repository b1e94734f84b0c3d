"""``hpc-ray rllib rollout``: replay a checkpointed policy (Ray 0.7 ``rollout.py``).

    hpc-ray rllib rollout ~/ray_results/ppo/PPO_0/checkpoint_5/checkpoint-5 \\
        --run PPO --env CartPole-v0 --steps 10000 --out rollouts.pkl
"""
from __future__ import annotations

import json
import os
import pickle
import tempfile

__all__ = ["rollout"]


def _saved_config(checkpoint: str) -> dict:
    """The trial's config next to a Tune checkpoint (params.pkl), if any."""
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    for parent in (folder, os.path.dirname(folder)):
        path = os.path.join(parent, "params.pkl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                return pickle.load(f)
    return {}


def rollout(checkpoint: str, run: str, env: str | None = None, steps: int = 10000,
            config: str | None = None, out: str | None = None) -> list[float]:
    """Run the checkpoint's policy for ``steps`` env steps; return the reward of
    each episode that ended.

    ``out``: pickle the episodes there in Ray 0.7's format, a list of episodes,
    each a list of ``[obs, action, next_obs, reward, done]`` steps (the last
    episode may be cut short by ``steps``).

    Raises:
        ValueError: no env given and none saved with the checkpoint, or the
            checkpoint does not fit the trainer (another algorithm or model).
    """
    from ..tune.logger import NoopLogger
    from .agents.registry import get_agent_class
    from .env.gym_compat import GymCompat
    cfg = _saved_config(checkpoint)
    cfg.update(json.loads(config or "{}"))
    env_name = env or cfg.get("env")
    if not env_name:
        raise ValueError("no env: give --env (the checkpoint has no params.pkl beside it)")
    cfg["num_workers"] = 0
    cfg.pop("env", None)
    # (A replay logs no results: no new directory under ~/ray_results.)
    trainer = get_agent_class(run)(env=env_name, config=cfg, logger_creator=lambda c: NoopLogger(
        c, tempfile.gettempdir()))
    try:
        trainer.restore(checkpoint)
    except RuntimeError as exc:   # torch's load_state_dict: keys or shapes do not fit
        trainer.stop()
        first = str(exc).strip().splitlines()[0]
        raise ValueError(f"the checkpoint does not fit a {run} trainer with this config: was "
                         f"it written by another algorithm (--run), or with a model config "
                         f"its params.pkl would give (pass --config)? ({first})") from None
    env_obj = GymCompat(trainer.env_creator(cfg.get("env_config", {})))
    rewards, episodes, done, total, taken = [], [], True, 0.0, 0
    while taken < steps:
        if done:
            obs, total = env_obj.reset(), 0.0
            episodes.append([])
        action = trainer.compute_action(obs)
        next_obs, r, done, _ = env_obj.step(action)
        if out:
            episodes[-1].append([obs, action, next_obs, r, done])
        obs = next_obs
        total += float(r)
        taken += 1
        if done:
            rewards.append(total)
    trainer.stop()
    if out:
        with open(out, "wb") as f:
            pickle.dump(episodes, f)
    return rewards


if __name__ == "__main__":
    # ``python -m hpc_ray.rllib.rollout`` or ``python hpc_ray/rllib/rollout.py``, as Ray
    # 0.7's docs run ``python ray/rllib/rollout.py``: the same as ``hpc-ray rllib rollout``.
    from hpc_ray.cli import rllib_rollout
    rllib_rollout(prog_name="rllib rollout")
