"""Issue 6 DistributedSGD (numpy, no torch): the "simple", "ps" and "allreduce"
strategies on the digits, identical weights on every replica, the strategies
agreeing with each other, convergence, several replicas per worker, sharded
parameter servers, foreach_*, HDF5 save/restore, bad arguments."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import numpy as np
from _harness import NUM_WORKERS, check, expect_raises, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray.sgd import STRATEGIES, DistributedSGD, MLPModel
from hpc_ray.sgd.data import load_digits, shard_bounds

ray.init(**init_kwargs())
W = NUM_WORKERS
(X_TRAIN, Y_TRAIN), (X_VAL, Y_VAL) = load_digits()


def creator(worker_index, device_index, devices=1):
    shard = worker_index * devices + device_index
    lo, hi = shard_bounds(len(X_TRAIN), W * devices)[shard]
    return MLPModel([64, 32, 10], X_TRAIN[lo:hi], Y_TRAIN[lo:hi], batch_size=32, lr=0.05,
                    seed=shard, data_seed=shard)


def two_devices(worker_index, device_index):
    return creator(worker_index, device_index, devices=2)


def all_equal(weight_lists):
    return all(all(np.array_equal(a, b) for a, b in zip(weight_lists[0], w))
               for w in weight_lists[1:])


def max_diff(a, b):
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


STEPS = 40
final = {}
# "allreduce" runs ordinary actors; "allreduce_in_rank" the same in their ranks.
for name in STRATEGIES + ("allreduce_in_rank",):
    strategy = name.replace("_in_rank", "")
    with section(name):
        sgd = DistributedSGD(creator, W, strategy=strategy, in_rank=name.endswith("_in_rank"))
        # Replicas start from worker 0's weights, whatever their own seeds were.
        check(all_equal(sgd.foreach_model(lambda m: m.get_weights())), f"{strategy} start")
        first = sgd.step(fetch_stats=True)
        check(sgd.step() is None, "step() without fetch_stats returns None")
        for _ in range(STEPS - 3):
            sgd.step()
        last = sgd.step(fetch_stats=True)
        check(first["num_samples"] == 32 * W, first)
        check(last["loss"] < first["loss"], f"{strategy}: loss {first} -> {last}")
        weights = sgd.foreach_model(lambda m: m.get_weights())
        check(len(weights) == W and all_equal(weights), f"{strategy}: replicas differ")
        check(sgd.foreach_worker(lambda w: w.worker_index) == list(range(W)),
              "foreach_worker")
        check(sgd.foreach_model(lambda m: m.steps) == [STEPS] * W, "foreach_model steps")
        final[name] = weights[0]
        sgd.shutdown()
        sgd.shutdown()   # twice is fine

with section("strategies agree"):
    diffs = {s: max_diff(final["simple"], final[s])
             for s in ("ps", "allreduce", "allreduce_in_rank")}
    report("strategy_diffs", diffs)
    check(all(d < 1e-4 for d in diffs.values()), diffs)

with section("convergence, checkpoint"):
    sgd = DistributedSGD(creator, W, strategy="allreduce")
    for _ in range(250):
        sgd.step()
    before = sgd.foreach_model(lambda m: m.evaluate(X_VAL, Y_VAL))
    report("allreduce_accuracy", before[0]["accuracy"])
    check(before[0]["accuracy"] > 0.9, before)
    check(all(b == before[0] for b in before), before)
    path = tmp_path("sgd_numpy.h5")
    sgd.save(path)
    for _ in range(20):
        sgd.step()
    check(sgd.foreach_model(lambda m: m.evaluate(X_VAL, Y_VAL))[0] != before[0],
          "training after the save changed nothing")
    sgd.restore(path)
    after = sgd.foreach_model(lambda m: m.evaluate(X_VAL, Y_VAL))
    check(after == before, f"restore: {before} -> {after}")
    check(sgd.steps == 250, sgd.steps)
    check(sgd.foreach_model(lambda m: m.steps) == [250] * W, "optimizer state restored")
    sgd.shutdown()

with section("two replicas per worker, sharded servers"):
    results = {}
    for strategy, kwargs in (("simple", {}),
                             ("ps", {"num_ps": 3, "grad_shard_bytes": 2048})):
        sgd = DistributedSGD(two_devices, W, devices_per_worker=2, strategy=strategy,
                             **kwargs)
        if strategy == "ps":
            report("ps_shards", sgd.num_shards)
            check(sgd.num_shards >= 3, sgd.num_shards)
        for _ in range(10):
            stats = sgd.step(fetch_stats=True)
        check(stats["num_samples"] == 2 * 32 * W, stats)
        weights = sgd.foreach_model(lambda m: m.get_weights())
        check(len(weights) == 2 * W and all_equal(weights), f"{strategy}: replicas differ")
        results[strategy] = weights[0]
        sgd.shutdown()
    check(max_diff(results["simple"], results["ps"]) < 1e-5, "sharded ps != simple")

class FailsOnWorker1(MLPModel):
    def compute_gradients(self):
        if self.worker_index == 1:
            raise ZeroDivisionError("worker 1 fails")
        return super().compute_gradients()


def failing_creator(worker_index, device_index):
    model = creator(worker_index, device_index)
    model.__class__ = FailsOnWorker1
    model.worker_index = worker_index
    return model


with section("an allreduce worker that fails while the others reduce"):
    sgd = DistributedSGD(failing_creator, W, strategy="allreduce")
    err = expect_raises(ZeroDivisionError, sgd.step)
    check("worker 1 fails" in str(err), err)
    err = expect_raises(ray.exceptions.RayError, sgd.step)
    check("workers were ended" in str(err), err)
    sgd.shutdown()

with section("bad arguments"):
    expect_raises(ValueError, DistributedSGD, creator, W, strategy="ring")
    expect_raises(ValueError, DistributedSGD, creator, 0)
    expect_raises(ValueError, DistributedSGD, creator, W, num_ps=0)
    # Workers the job cannot hold at once: an error, not a step that never ends.
    err = expect_raises(ValueError, DistributedSGD, creator, W + 1)
    check("CPU" in str(err), err)
    err = expect_raises(ValueError, DistributedSGD, creator, W, gpu=True)
    check("GPU" in str(err), err)

ray.shutdown()
ok("sgd_distributed")
