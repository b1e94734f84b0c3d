"""SGD replicas and Tune trials spread over two nodes (run on 4 ranks, two per node).

    train_two_nodes.py

Each replica and each trial reports the node it ran on as the runtime numbers
it (``node-<i>``, the ``NodeID`` ray.nodes() shows) and its rank. Prints
``RESULT key=<json>`` lines: the nodes, where the SGD replicas ran, their loss
before and after and whether their weights agree, and every trial's node,
rank and final value.
"""
import faulthandler
import os
import time

faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", 120)) - 5,
                                  exit=True)

import numpy as np
from _harness import mark_started, ok, poll_for, report, section, started

import hpc_ray as ray
from hpc_ray import tune
from hpc_ray.runtime import context
from hpc_ray.sgd import DistributedSGD, MLPModel
from hpc_ray.sgd.data import load_digits, shard_bounds

W = 3           # one replica per worker rank: rank 1 on node A, ranks 2 and 3 on B
STEPS = 30
(X_TRAIN, Y_TRAIN), _ = load_digits()


def where():
    ctx = context.current()
    return [f"node-{ctx.node}", ctx.rank]


def creator(worker_index, device_index):
    lo, hi = shard_bounds(len(X_TRAIN), W)[worker_index]
    return MLPModel([64, 32, 10], X_TRAIN[lo:hi], Y_TRAIN[lo:hi], batch_size=32, lr=0.05,
                    seed=worker_index, data_seed=worker_index)


def sgd_on_both_nodes(in_rank):
    sgd = DistributedSGD(creator, W, strategy="allreduce", in_rank=in_rank)
    places = sgd.foreach_worker(lambda w: where())
    first = sgd.step(fetch_stats=True)
    for _ in range(STEPS - 2):
        sgd.step()
    last = sgd.step(fetch_stats=True)
    weights = sgd.foreach_model(lambda m: m.get_weights())
    same = all(all(np.array_equal(a, b) for a, b in zip(weights[0], w)) for w in weights[1:])
    steps = sgd.foreach_model(lambda m: m.steps)
    sgd.shutdown()
    return {"places": places, "first_loss": first["loss"], "last_loss": last["loss"],
            "samples": first["num_samples"], "same_weights": same, "steps": steps}


def trial(config, reporter):
    node, rank = where()
    # The first three meet (up to 30 s), so that they hold every worker rank at
    # once however slowly each starts; the later ones find them there.
    mark_started("trial")
    poll_for(lambda: started("trial") >= 3, 30)
    for i in range(1, 4):
        time.sleep(0.2)
        reporter(value=config["k"] * i, node=node, rank=rank, training_iteration=i)


def main():
    ray.init()
    report("nodes", [[n["NodeID"], n["Ranks"]] for n in ray.nodes()])
    for in_rank in (False, True):
        with section(f"sgd in_rank={in_rank}"):
            report(f"sgd_in_rank_{in_rank}", sgd_on_both_nodes(in_rank))
    with section("tune"):
        trials = tune.run(trial, name="two_nodes", verbose=0,
                          local_dir=os.environ["HPC_RAY_TEST_TMPDIR"],
                          config={"k": tune.grid_search([1, 2, 3, 4, 5, 6])})
        report("trials", sorted([t.config["k"], t.last_result["value"], t.status,
                                 t.last_result["node"], t.last_result["rank"]]
                                for t in trials))
    ray.shutdown()
    ok("train_two_nodes")


if __name__ == "__main__":
    main()
