"""DDPG: deterministic policy gradients from replay, for continuous actions."""
from __future__ import annotations

from ..dqn.dqn import (DQNStateMixin, add_exploration_info, make_optimizer, setup_exploration,
                       update_target_if_needed, update_worker_explorations)
from ..config import refuse_use_lstm
from ..trainer import with_common_config
from ..trainer_template import build_trainer
from .ddpg_policy import DDPGTorchPolicy

__all__ = ["DDPGTrainer", "DEFAULT_CONFIG", "validate_ddpg_config"]

DEFAULT_CONFIG = with_common_config({
    # === Twin Delayed DDPG (TD3) and Soft Actor-Critic (SAC) tricks ===
    # TD3: https://spinningup.openai.com/en/latest/algorithms/td3.html
    # twin Q-net
    "twin_q": False,
    # delayed policy update
    "policy_delay": 1,
    # target policy smoothing
    # (this also replaces OU exploration noise with IID Gaussian exploration
    # noise, for now)
    "smooth_target_policy": False,
    # gaussian stddev of target action noise for smoothing
    "target_noise": 0.2,
    # target noise limit (bound)
    "target_noise_clip": 0.5,
    # === Evaluation ===
    # Evaluate with epsilon=0 every `evaluation_interval` training iterations.
    "evaluation_interval": None,
    # Number of episodes to run per evaluation period.
    "evaluation_num_episodes": 5,
    # === Model ===
    # Apply a state preprocessor with spec given by the "model" config option
    # (like other RL algorithms). This is mostly useful if you have a weird
    # observation shape, like an image. Disabled by default.
    "use_state_preprocessor": False,
    # Postprocess the policy network model output with these hidden layers.
    "actor_hiddens": [64, 64],
    # Hidden layers activation of the postprocessing stage of the policy network
    "actor_hidden_activation": "relu",
    # Postprocess the critic network model output with these hidden layers;
    # again, if use_state_preprocessor is True, then the state will be
    # preprocessed by the model specified with the "model" config option first.
    "critic_hiddens": [64, 64],
    # Hidden layers activation of the postprocessing state of the critic.
    "critic_hidden_activation": "relu",
    # N-step Q learning
    "n_step": 1,
    # === Exploration ===
    # Turns on annealing schedule for exploration noise. Exploration is
    # annealed from 1.0 to exploration_final_eps over schedule_max_timesteps
    # scaled by exploration_fraction. Original DDPG and TD3 papers do not
    # anneal noise, so this is False by default.
    "exploration_should_anneal": False,
    # Max num timesteps for annealing schedules.
    "schedule_max_timesteps": 100000,
    # Number of env steps to optimize for before returning
    "timesteps_per_iteration": 1000,
    # Fraction of entire training period over which the exploration rate is
    # annealed
    "exploration_fraction": 0.1,
    # Final scaling multiplier for action noise (initial is 1.0)
    "exploration_final_scale": 0.02,
    # valid values: "ou" (time-correlated, like original DDPG paper),
    # "gaussian" (IID, like TD3 paper)
    "exploration_noise_type": "ou",
    # OU-noise scale; this can be used to scale down magnitude of OU noise
    # before adding to actions (requires "exploration_noise_type" to be "ou")
    "exploration_ou_noise_scale": 0.1,
    # theta for OU
    "exploration_ou_theta": 0.15,
    # sigma for OU
    "exploration_ou_sigma": 0.2,
    # gaussian stddev of act noise for exploration (requires
    # "exploration_noise_type" to be "gaussian")
    "exploration_gaussian_sigma": 0.1,
    # If True parameter space noise will be used for exploration
    # See https://blog.openai.com/better-exploration-with-parameter-noise/
    "parameter_noise": False,
    # Until this many timesteps have elapsed, the agent's policy will be
    # ignored & it will instead take uniform random actions. Can be used in
    # conjunction with learning_starts (which controls when the first
    # optimization step happens) to decrease dependence of exploration &
    # optimization on initial policy parameters. Note that this will be
    # disabled when the action noise scale is set to 0 (e.g during evaluation).
    "pure_exploration_steps": 1000,
    # Update the target network every `target_network_update_freq` steps.
    "target_network_update_freq": 0,
    # Update the target by \tau * policy + (1-\tau) * target_policy
    "tau": 0.002,
    # === Replay buffer ===
    # Size of the replay buffer. Note that if async_updates is set, then
    # each worker will have a replay buffer of this size.
    "buffer_size": 50000,
    # If True prioritized replay buffer will be used.
    "prioritized_replay": True,
    # Alpha parameter for prioritized replay buffer.
    "prioritized_replay_alpha": 0.6,
    # Beta parameter for sampling from prioritized replay buffer.
    "prioritized_replay_beta": 0.4,
    # Fraction of entire training period over which the beta parameter is annealed
    "beta_annealing_fraction": 0.2,
    # Final value of beta
    "final_prioritized_replay_beta": 0.4,
    # Epsilon to add to the TD errors when updating priorities.
    "prioritized_replay_eps": 1e-6,
    # Whether to LZ4 compress observations (accepted; columns are stored raw).
    "compress_observations": False,
    # === Optimization ===
    # Learning rate for the critic (Q-function) optimizer.
    "critic_lr": 1e-3,
    # Learning rate for the actor (policy) optimizer.
    "actor_lr": 1e-3,
    # If True, use huber loss instead of squared loss for critic network
    # Conventionally, no need to clip gradients if using a huber loss
    "use_huber": False,
    # Threshold of a huber loss
    "huber_threshold": 1.0,
    # Weights for L2 regularization
    "l2_reg": 1e-6,
    # If not None, clip gradients during optimization at this value
    "grad_norm_clipping": None,
    # How many steps of the model to sample before learning starts.
    "learning_starts": 1500,
    # Update the replay buffer with this many samples at once. Note that this
    # setting applies per-worker if num_workers > 1.
    "sample_batch_size": 1,
    # Size of a batched sampled from replay buffer for training. Note that
    # if async_updates is set, then each worker returns gradients for a
    # batch of this size.
    "train_batch_size": 256,
    # === Parallelism ===
    # Number of workers for collecting samples with. This only makes sense
    # to increase if your environment is particularly slow to sample, or if
    # you're using the Async or Ape-X optimizers.
    "num_workers": 0,
    # Whether to use a distribution of epsilons across workers for exploration.
    "per_worker_exploration": False,
    # Whether to compute priorities on workers.
    "worker_side_prioritization": False,
    # Prevent iterations from going lower than this time span
    "min_iter_time_s": 1,
    # Use PyTorch as backend (hpc_ray.rllib: always).
    "use_pytorch": True,
})


def validate_ddpg_config(config: dict) -> None:
    """Reject DDPG/TD3 settings that cannot work, naming the fix."""
    refuse_use_lstm(config, "DDPG", "its actor and critic are feed-forward networks built "
                    "from actor_hiddens and critic_hiddens")
    if config["exploration_noise_type"] not in ("ou", "gaussian"):
        raise ValueError(f"config['exploration_noise_type'] must be 'ou' or 'gaussian', "
                         f"got {config['exploration_noise_type']!r}")
    if not isinstance(config["policy_delay"], int) or config["policy_delay"] < 1:
        raise ValueError(f"config['policy_delay'] must be an int >= 1, got "
                         f"{config['policy_delay']!r}")
    if not 0.0 < config["tau"] <= 1.0:
        raise ValueError(f"config['tau'] must be in (0, 1], got {config['tau']!r}")
    if not isinstance(config["n_step"], int) or config["n_step"] < 1:
        raise ValueError(f"config['n_step'] must be an int >= 1, got {config['n_step']!r}")
    if config["parameter_noise"]:
        raise ValueError("parameter_noise is not supported by hpc_ray.rllib's DDPG; use "
                         "exploration_noise_type 'ou' or 'gaussian'")
    if (config.get("model") or {}).get("custom_model"):
        raise ValueError(f"DDPG and TD3 build their actor and critic from actor_hiddens "
                         f"and critic_hiddens and do not use model.custom_model "
                         f"({config['model']['custom_model']!r}); drop it, or use PPO, PG, "
                         f"A2C or DQN (its feature network) for a custom model")
    if config["use_state_preprocessor"]:
        raise ValueError("use_state_preprocessor is not supported by hpc_ray.rllib's DDPG "
                         "(the actor and critic read flat observations)")
    if config["train_batch_size"] > config["buffer_size"]:
        raise ValueError(f"train_batch_size ({config['train_batch_size']}) must be <= "
                         f"buffer_size ({config['buffer_size']})")


DDPGTrainer = build_trainer(
    name="DDPG", default_policy=DDPGTorchPolicy, default_config=DEFAULT_CONFIG,
    validate_config=validate_ddpg_config, before_init=setup_exploration,
    make_policy_optimizer=make_optimizer, before_train_step=update_worker_explorations,
    after_optimizer_step=update_target_if_needed, after_train_result=add_exploration_info,
    mixins=[DQNStateMixin])
