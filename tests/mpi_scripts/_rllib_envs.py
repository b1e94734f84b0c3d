"""RLlib environments shared by the rank scripts (importable by their workers too:
the launch puts this folder on every process's PYTHONPATH)."""
from hpc_ray.rllib import MultiAgentEnv, register_env


class TwoCartPoles(MultiAgentEnv):
    """Agents 0 and 1, each with its own CartPole; ends when both have fallen."""

    def __init__(self, config):
        import gymnasium as gym
        self.envs = [gym.make("CartPole-v1") for _ in range(2)]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space

    def reset(self):
        self.dones = set()
        return {i: e.reset()[0] for i, e in enumerate(self.envs)}

    def step(self, action_dict):
        obs, rew, done = {}, {}, {}
        for i, action in action_dict.items():
            o, r, term, trunc, _ = self.envs[i].step(int(action))
            obs[i], rew[i], done[i] = o, r, term or trunc
            if done[i]:
                self.dones.add(i)
        done["__all__"] = len(self.dones) == 2
        return obs, rew, done, {}


def register_two_cartpoles() -> None:
    """``env="two_cartpoles"``: two agents, each with its own CartPole."""
    register_env("two_cartpoles", lambda config: TwoCartPoles(config))
