"""Ray 0.7's policy serving (ExternalEnv, PolicyServer, PolicyClient) is not in
hpc_ray.rllib: its modules import ``missing`` so that importing them says so
(see the README's RLlib section)."""


def missing(module: str) -> None:
    raise ImportError(
        f"{module} is not provided by hpc_ray.rllib: ExternalEnv, PolicyServer and "
        f"PolicyClient (Ray 0.7's policy serving over HTTP) are not implemented. Write the "
        f"environment as a gym env, MultiAgentEnv, VectorEnv or BaseEnv (poll/send_actions) "
        f"that the rollout workers step themselves")
