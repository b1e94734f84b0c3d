"""Issue 6 PyTorchTrainer: convergence on the digits read from HDF5 with
NUM_WORKERS replicas, identical weights on every replica, each replica reading
only its own slice of the file, HDF5 checkpoint round trip, get_model, a plain
torch Dataset with Adam, bad arguments. Needs torch."""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import numpy as np
from _harness import NUM_WORKERS, check, expect_raises, init_kwargs, ok, report, section, tmp_path

import hpc_ray as ray
from hpc_ray.sgd import PyTorchTrainer, Resources
from hpc_ray.sgd.checkpoint import load_checkpoint
from hpc_ray.sgd.data import H5Dataset, shard_bounds, write_digits_h5

R = NUM_WORKERS
ray.init(**init_kwargs())
PATH = write_digits_h5(tmp_path("digits.h5"))


def model_creator(config):
    import torch
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


def data_creator(config):
    return H5Dataset(config["path"], "train"), H5Dataset(config["path"], "validation")


def optimizer_creator(model, config):
    import torch
    return (torch.nn.CrossEntropyLoss(),
            torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9))


def same_weights(replicas):
    return all(all(np.array_equal(replicas[0][k], r[k]) for k in replicas[0])
               for r in replicas[1:])


trainer = PyTorchTrainer(model_creator, data_creator, optimizer_creator,
                         config={"path": PATH, "lr": 0.05}, num_replicas=R,
                         resources_per_replica=Resources(num_cpus=1), batch_size=32)

with section("initial weights broadcast"):
    check(same_weights(trainer.get_replica_weights()), "replicas start apart")

history = []
with section("convergence"):
    for epoch in range(8):
        stats = trainer.train()
        val = trainer.validate()
        history.append((stats["train_loss"], val["validation_accuracy"]))
        check(same_weights(trainer.get_replica_weights()), f"replicas differ after {epoch}")
        if val["validation_accuracy"] > 0.93:
            break
    report("history", history)
    check(stats["epoch"] == len(history), stats)
    check({"train_loss", "num_samples", "num_steps"} <= set(stats), stats)
    check({"validation_loss", "validation_accuracy"} <= set(val), val)
    check(history[-1][0] < history[0][0], history)
    check(history[-1][1] > 0.9, history)

with section("sharding"):
    shards = trainer.apply_all_replicas(lambda runner: runner.shard_info())
    report("shards", shards)
    for split in ("train", "validation"):
        n = len(H5Dataset(PATH, split))
        rows = [tuple(s[f"{split}_rows"]) for s in shards]
        check(rows[0][0] == 0 and rows[-1][1] == n, f"{split} rows do not cover: {rows}")
        check(all(rows[i][1] == rows[i + 1][0] for i in range(R - 1)), rows)
        # Each replica read its own rows, with one read, and nothing else.
        for s, r in zip(shards, rows):
            check([tuple(x) for x in s[f"{split}_reads"]] == [r], f"{split} reads: {s}")

with section("checkpoint round trip"):
    ckpt = tmp_path("trainer.h5")
    check(trainer.save(ckpt) == ckpt, "save returns the path")
    before = trainer.validate()
    model, optimizer, meta = load_checkpoint(ckpt)
    check(sorted(model) == ["0.bias", "0.weight", "2.bias", "2.weight"], sorted(model))
    check(meta["epoch"] == len(history), meta)
    check(all("momentum_buffer" in st for st in optimizer["state"].values()), optimizer)
    trainer.train()
    changed = trainer.validate()
    trainer.restore(ckpt)
    after = trainer.validate()
    report("checkpoint", [before, changed, after])
    check(after["validation_accuracy"] == before["validation_accuracy"], (before, after))
    check(abs(after["validation_loss"] - before["validation_loss"]) < 1e-6, (before, after))
    check(same_weights(trainer.get_replica_weights()), "replicas differ after restore")

with section("get_model"):
    import torch
    local = trainer.get_model()
    x, y = H5Dataset(PATH, "validation").arrays()
    with torch.no_grad():
        acc = float((local(torch.from_numpy(x)).argmax(1).numpy() == y).mean())
    check(abs(acc - after["validation_accuracy"]) < 1e-9, (acc, after))

with section("zero-copy gradients"):
    copied = trainer.apply_all_replicas(lambda runner: runner.copied_steps)
    check(copied == [0] * R, f"steps that fell back to copying: {copied}")

trainer.shutdown()
trainer.shutdown()


def tensor_data(config):
    import torch
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 8, generator=g)
    y = (x.sum(dim=1) > 0).long()
    return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)


def adam(model, config):
    import torch
    return torch.nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters(), lr=0.01)


def small_model(config):
    import torch
    return torch.nn.Linear(8, 2)


with section("plain torch dataset, Adam checkpoint"):
    t2 = PyTorchTrainer(small_model, tensor_data, adam, num_replicas=R, batch_size=10,
                        backend="gloo", use_gpu=False)
    shards = t2.apply_all_replicas(lambda runner: runner.shard_info()["train_rows"])
    check(shards[0][0] == 0 and shards[-1][1] == 200, shards)
    first = t2.train()
    for _ in range(3):
        last = t2.train()
    check(last["train_loss"] < first["train_loss"], (first, last))
    check(same_weights(t2.get_replica_weights()), "replicas differ (Adam)")
    ckpt = tmp_path("adam.h5")
    t2.save(ckpt)
    before = t2.validate()
    t2.train()
    t2.restore(ckpt)
    state = t2.apply_all_replicas(lambda runner: runner.optimizer.state_dict())
    # 4 epochs when saved, each of the largest shard's batch count.
    steps = 4 * max(-(-(hi - lo) // 10) for lo, hi in shard_bounds(200, R))
    check(all(float(s["state"][0]["step"]) == steps for s in state),
          (steps, state[0]["state"][0]["step"]))
    check(t2.validate() == before, "Adam restore")
    t2.shutdown()
    err = expect_raises(ray.exceptions.RayError, t2.train)
    check("shut down" in str(err), err)

def rows_data(n):
    def data(config):
        import torch
        x = torch.arange(n * 8, dtype=torch.float32).reshape(n, 8) / (8 * n)
        y = (torch.arange(n) % 2).long()
        return torch.utils.data.TensorDataset(x, y), torch.utils.data.TensorDataset(x, y)
    return data


with section("uneven shards: the shorter ones padded, as DistributedSampler pads"):
    n = 10 * R + 1                 # one replica's shard is a sample longer
    t4 = PyTorchTrainer(small_model, rows_data(n), adam, num_replicas=R, batch_size=10)
    longest = max(hi - lo for lo, hi in shard_bounds(n, R))
    stats = t4.train()
    # Before, every replica took the shortest shard's step count: the longest
    # shard's last sample was never trained on.
    check(stats["num_steps"] == -(-longest // 10) and stats["num_samples"] == R * longest,
          (longest, stats))
    check(same_weights(t4.get_replica_weights()), "replicas differ (uneven shards)")
    t4.shutdown()

with section("a training set smaller than the replicas"):
    err = expect_raises(ValueError, PyTorchTrainer, small_model, rows_data(R - 1), adam,
                        num_replicas=R)
    check("fewer than num_replicas" in str(err), err)

with section("a replica that fails while the others allreduce"):
    t3 = PyTorchTrainer(small_model, tensor_data, adam, num_replicas=R)

    def fail_on_replica_1(runner):
        if runner.rank == 1:
            raise ZeroDivisionError("replica 1 fails")
        return runner._agree([1.0]).tolist()   # waits for replica 1 forever

    err = expect_raises(ZeroDivisionError, t3.apply_all_replicas, fail_on_replica_1)
    check("replica 1 fails" in str(err), err)
    err = expect_raises(ray.exceptions.RayError, t3.train)
    check("ended when one failed" in str(err), err)
    t3.shutdown()

with section("bad arguments"):
    expect_raises(ValueError, PyTorchTrainer, model_creator, data_creator, backend="nccl")
    expect_raises(ValueError, PyTorchTrainer, model_creator, data_creator, num_replicas=0)
    expect_raises(ValueError, PyTorchTrainer, model_creator, data_creator,
                  resources_per_replica={"cpus": 1})
    expect_raises(ValueError, PyTorchTrainer, model_creator, data_creator, use_gpu=True)
    # More replicas than worker ranks, or GPUs the job lacks: an error at once,
    # not a group that never forms.
    err = expect_raises(ValueError, PyTorchTrainer, small_model, tensor_data,
                        num_replicas=R + 1)
    check("worker ranks" in str(err), err)
    err = expect_raises(ValueError, PyTorchTrainer, small_model, tensor_data,
                        resources_per_replica=Resources(num_gpus=1))
    check("GPU" in str(err), err)

ray.shutdown()
ok("sgd_trainer")
