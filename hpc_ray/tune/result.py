"""Names of the auto-filled result fields (Ray 0.7's ``ray.tune.result``)."""
import os

#: Where experiments go unless ``local_dir`` says otherwise (``TUNE_RESULT_DIR``).
DEFAULT_RESULTS_DIR = os.path.expanduser(os.environ.get("TUNE_RESULT_DIR", "~/ray_results"))
DONE = "done"
HOSTNAME = "hostname"
NODE_IP = "node_ip"
PID = "pid"
EPISODE_REWARD_MEAN = "episode_reward_mean"
MEAN_LOSS = "mean_loss"
MEAN_ACCURACY = "mean_accuracy"
#: ``-mean_loss``, filled in when a result has ``mean_loss``.
NEG_MEAN_LOSS = "neg_mean_loss"
EPISODES_THIS_ITER = "episodes_this_iter"
EPISODES_TOTAL = "episodes_total"
TIMESTEPS_THIS_ITER = "timesteps_this_iter"
TIMESTEPS_TOTAL = "timesteps_total"
TIMESTEPS_SINCE_RESTORE = "timesteps_since_restore"
TIME_THIS_ITER_S = "time_this_iter_s"
TIME_TOTAL_S = "time_total_s"
TRAINING_ITERATION = "training_iteration"
TRIAL_ID = "trial_id"
EXPERIMENT_ID = "experiment_id"
#: The trial's config, in every result.
CONFIG = "config"
#: Marks the closing result of a function trainable: it repeats the last one.
RESULT_DUPLICATE = "__duplicate__"
#: Shown in the status table when a trial reports them.
DEFAULT_RESULT_KEYS = (TRAINING_ITERATION, TIME_TOTAL_S, TIMESTEPS_TOTAL, MEAN_ACCURACY,
                       MEAN_LOSS, EPISODE_REWARD_MEAN)
