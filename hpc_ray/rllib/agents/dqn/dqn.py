"""DQN (Rainbow options): replay, a target network, epsilon-greedy exploration."""
from __future__ import annotations

from ...optimizers.sync_replay import SyncReplayOptimizer, linear_schedule
from ..config import refuse_use_lstm
from ..trainer import with_common_config
from ..trainer_template import build_trainer
from .dqn_policy import DQNTorchPolicy

__all__ = ["DQNTrainer", "DEFAULT_CONFIG", "validate_dqn_config"]

DEFAULT_CONFIG = with_common_config({
    # === Model ===
    # Number of atoms for representing the distribution of return. When
    # this is greater than 1, distributional Q-learning is used.
    "num_atoms": 1,
    "v_min": -10.0,
    "v_max": 10.0,
    # Whether to use noisy network
    "noisy": False,
    # control the initial value of noisy nets
    "sigma0": 0.5,
    # Whether to use dueling dqn
    "dueling": True,
    # Whether to use double dqn
    "double_q": True,
    # Postprocess model outputs with these hidden layers to compute the
    # state and action values. See also the model config in catalog.py.
    "hiddens": [256],
    # N-step Q learning
    "n_step": 1,
    # === Exploration ===
    # Max num timesteps for annealing schedules. Exploration is annealed from
    # 1.0 to exploration_fraction over this number of timesteps scaled by
    # exploration_fraction
    "schedule_max_timesteps": 100000,
    # Minimum env steps to optimize for per train call. This value does
    # not affect learning, only the length of iterations.
    "timesteps_per_iteration": 1000,
    # Fraction of entire training period over which the exploration rate is
    # annealed
    "exploration_fraction": 0.1,
    # Final value of random action probability
    "exploration_final_eps": 0.02,
    # Update the target network every `target_network_update_freq` steps.
    "target_network_update_freq": 500,
    # Use softmax for sampling actions. Required for off policy estimation.
    "soft_q": False,
    # Softmax temperature. Q values are divided by this value prior to softmax.
    "softmax_temp": 1.0,
    # If True parameter space noise will be used for exploration (not supported:
    # use "noisy": True).
    "parameter_noise": False,
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
    # Fraction of entire training period over which the beta parameter is
    # annealed
    "beta_annealing_fraction": 0.2,
    # Final value of beta
    "final_prioritized_replay_beta": 0.4,
    # Epsilon to add to the TD errors when updating priorities.
    "prioritized_replay_eps": 1e-6,
    # Whether to LZ4 compress observations (accepted; columns are stored raw).
    "compress_observations": True,
    # === Optimization ===
    # Learning rate for adam optimizer
    "lr": 5e-4,
    # Learning rate schedule (not supported: a constant lr)
    "lr_schedule": None,
    # Adam epsilon hyper parameter
    "adam_epsilon": 1e-8,
    # If not None, clip gradients during optimization at this value
    "grad_norm_clipping": 40,
    # How many steps of the model to sample before learning starts.
    "learning_starts": 1000,
    # Update the replay buffer with this many samples at once. Note that
    # this setting applies per-worker if num_workers > 1.
    "sample_batch_size": 4,
    # Size of a batched sampled from replay buffer for training. Note that
    # if async_updates is set, then each worker returns gradients for a
    # batch of this size.
    "train_batch_size": 32,
    # === Parallelism ===
    # Number of workers for collecting samples with. This only makes sense
    # to increase if your environment is particularly slow to sample, or if
    # you"re using the Async or Ape-X optimizers.
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


def validate_dqn_config(config: dict) -> None:
    """Reject DQN settings that cannot work, naming the fix."""
    refuse_use_lstm(config, "DQN", "its Q-network is feed-forward and it learns from "
                    "replayed single steps")
    if config["num_atoms"] < 1 or not isinstance(config["num_atoms"], int):
        raise ValueError(f"config['num_atoms'] must be an int >= 1, got {config['num_atoms']!r}")
    if config["num_atoms"] > 1 and config["v_min"] >= config["v_max"]:
        raise ValueError(f"distributional DQN needs v_min < v_max, got v_min="
                         f"{config['v_min']!r}, v_max={config['v_max']!r}")
    if not isinstance(config["n_step"], int) or config["n_step"] < 1:
        raise ValueError(f"config['n_step'] must be an int >= 1, got {config['n_step']!r}")
    if not 0.0 <= config["exploration_final_eps"] <= 1.0:
        raise ValueError(f"config['exploration_final_eps'] must be in [0, 1], got "
                         f"{config['exploration_final_eps']!r}")
    # 0: the final epsilon from the first step (the docs' offline DQN config).
    if not 0.0 <= config["exploration_fraction"] <= 1.0:
        raise ValueError(f"config['exploration_fraction'] must be in [0, 1], got "
                         f"{config['exploration_fraction']!r}")
    if not isinstance(config["buffer_size"], int) or config["buffer_size"] < 1:
        raise ValueError(f"config['buffer_size'] must be an int >= 1, got "
                         f"{config['buffer_size']!r}")
    if config["train_batch_size"] > config["buffer_size"]:
        raise ValueError(f"train_batch_size ({config['train_batch_size']}) must be <= "
                         f"buffer_size ({config['buffer_size']})")
    if config["parameter_noise"]:
        raise ValueError("parameter_noise is not supported by hpc_ray.rllib; use "
                         "\"noisy\": True (noisy nets) for learned exploration")
    if config["lr_schedule"]:
        raise ValueError("lr_schedule is not supported by hpc_ray.rllib; use a constant lr")
    if config["soft_q"] and config["softmax_temp"] <= 0:
        raise ValueError(f"config['softmax_temp'] must be > 0, got {config['softmax_temp']!r}")


def make_optimizer(workers, config: dict) -> SyncReplayOptimizer:
    return SyncReplayOptimizer(
        workers, learning_starts=config["learning_starts"],
        buffer_size=config["buffer_size"], prioritized_replay=config["prioritized_replay"],
        prioritized_replay_alpha=config["prioritized_replay_alpha"],
        prioritized_replay_beta=config["prioritized_replay_beta"],
        schedule_max_timesteps=config["schedule_max_timesteps"],
        beta_annealing_fraction=config["beta_annealing_fraction"],
        final_prioritized_replay_beta=config["final_prioritized_replay_beta"],
        prioritized_replay_eps=config["prioritized_replay_eps"],
        train_batch_size=config["train_batch_size"],
        sample_batch_size=config["sample_batch_size"])


# --- exploration and the target network (trainer hooks) ----------------------------------


def setup_exploration(trainer) -> None:
    trainer.last_target_update_ts = 0
    trainer.num_target_updates = 0


def epsilon_at(config: dict, timestep: int, worker_index: int = 0,
               num_workers: int = 0) -> float:
    """Epsilon for a worker at ``timestep``: the annealed schedule, or with
    ``per_worker_exploration`` Ape-X's fixed ``0.4 ** (1 + 7 i / (N - 1))``."""
    if config["per_worker_exploration"] and worker_index > 0:
        if num_workers <= 1:
            return 0.4
        return 0.4 ** (1 + (worker_index - 1) / (num_workers - 1) * 7)
    if config["per_worker_exploration"]:
        return 0.0  # the local worker only learns
    if "exploration_final_scale" in config:  # DDPG/TD3: a noise scale
        if not config["exploration_should_anneal"]:
            return 1.0
        return linear_schedule(
            timestep, config["exploration_fraction"] * config["schedule_max_timesteps"],
            1.0, config["exploration_final_scale"])
    return linear_schedule(timestep,
                           config["exploration_fraction"] * config["schedule_max_timesteps"],
                           1.0, config["exploration_final_eps"])


def update_worker_explorations(trainer) -> None:
    cfg = trainer.config
    t = trainer.optimizer.num_steps_sampled
    remotes = trainer.workers.remote_workers()
    n = len(remotes)
    eps0 = epsilon_at(cfg, t, 0, n)
    trainer.workers.local_worker().foreach_trainable_policy(
        lambda p, _: p.set_epsilon(eps0))
    for i, w in enumerate(remotes, start=1):
        eps = epsilon_at(cfg, t, i, n)
        w.apply.remote(_set_epsilon, eps)
    trainer.cur_epsilon = eps0 if not cfg["per_worker_exploration"] else epsilon_at(cfg, t, 1, n)


def _set_epsilon(worker, eps: float) -> None:
    worker.foreach_trainable_policy(lambda p, _: p.set_epsilon(eps))


def update_target_if_needed(trainer, fetches) -> None:
    t = trainer.optimizer.num_steps_sampled
    if t - trainer.last_target_update_ts >= trainer.config["target_network_update_freq"]:
        trainer.workers.local_worker().foreach_trainable_policy(lambda p, _: p.update_target())
        trainer.last_target_update_ts = t
        trainer.num_target_updates += 1


def add_exploration_info(trainer, result: dict) -> None:
    result["info"]["min_exploration"] = result["info"]["max_exploration"] = getattr(
        trainer, "cur_epsilon", 1.0)
    result["info"]["num_target_updates"] = trainer.num_target_updates
    result["info"]["last_target_update_ts"] = trainer.last_target_update_ts


class DQNStateMixin:
    """Checkpoints carry the target-update counters beside the policies."""

    def __getstate__(self):
        state = super().__getstate__()
        state["dqn"] = (self.last_target_update_ts, self.num_target_updates)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if "dqn" in state:
            self.last_target_update_ts, self.num_target_updates = state["dqn"]


DQNTrainer = build_trainer(
    name="DQN", default_policy=DQNTorchPolicy, default_config=DEFAULT_CONFIG,
    validate_config=validate_dqn_config, before_init=setup_exploration,
    make_policy_optimizer=make_optimizer, before_train_step=update_worker_explorations,
    after_optimizer_step=update_target_if_needed, after_train_result=add_exploration_info,
    mixins=[DQNStateMixin])
