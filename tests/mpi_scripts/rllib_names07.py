"""Ray 0.7's RLlib names on rollout workers (actors): the docs' PPO trainer with
``LocalMultiGPUOptimizer`` (and ``straggler_mitigation``) on two workers, then
``FilterManager.synchronize`` over those workers' ``MeanStdFilter``s and the
``EvaluatorInterface`` methods a worker actor has.
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import numpy as np
from _harness import check, init_kwargs, ok, report, section

import hpc_ray as ray
from hpc_ray.rllib.agents import ppo
from hpc_ray.rllib.optimizers import LocalMultiGPUOptimizer
from hpc_ray.rllib.utils import FilterManager

ray.init(**init_kwargs())


def remote_stats(workers):
    return [[f.rs.n, f.rs.mean.tolist(), f.buffer.n]
            for f in (d["default_policy"] for d in
                      ray.get([w.get_filters.remote() for w in workers]))]


with section("ppo"):
    trainer = ppo.PPOTrainer(env="CartPole-v0", config={
        "num_workers": 2, "seed": 0, "observation_filter": "MeanStdFilter",
        "train_batch_size": 200, "sample_batch_size": 50, "sgd_minibatch_size": 100,
        "num_sgd_iter": 2, "straggler_mitigation": True})
    check(isinstance(trainer.optimizer, LocalMultiGPUOptimizer), type(trainer.optimizer))
    results = [trainer.train()]
    report("ppo", [[r["episode_reward_mean"], r["timesteps_total"],
                    r["info"]["learner"]["default_policy"]["kl"]] for r in results])

with section("filters"):
    local = trainer.workers.local_worker()
    remotes = trainer.workers.remote_workers()
    ray.get([w.sample.remote() for w in remotes])  # new observations on each worker
    before_local = local.filters["default_policy"].rs.n
    before = remote_stats(remotes)
    # update_remote=False: the local filters take the workers' buffers, the workers keep theirs.
    FilterManager.synchronize(local.filters, remotes, update_remote=False)
    merged_n = local.filters["default_policy"].rs.n
    kept = remote_stats(remotes)
    ray.get([w.sample.remote() for w in remotes])
    FilterManager.synchronize(local.filters, remotes)
    f = local.filters["default_policy"]
    after = remote_stats(remotes)
    report("filters", {"before_local": before_local, "before": before, "merged_n": merged_n,
                       "kept": kept, "local": [f.rs.n, f.rs.mean.tolist()], "after": after})

with section("interface"):
    w = remotes[0]
    host = ray.get(w.get_host.remote())
    batch = ray.get(w.sample.remote())
    grads, info = ray.get(w.compute_gradients.remote(batch))
    report("interface", {"host": host, "count": batch.count, "num_grads": len(grads),
                         "learn": sorted(ray.get(w.learn_on_batch.remote(batch)))})

trainer.stop()
ok("rllib_names07")
