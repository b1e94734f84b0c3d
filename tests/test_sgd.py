"""Issue 6 distributed SGD without torch: gradient fusion, HDF5 shards and
checkpoints, the numpy model (pure, no MPI); DistributedSGD with the "simple",
"ps" and "allreduce" strategies (tests/mpi_scripts/sgd_distributed.py); the
digits example with the numpy framework under mpiexec."""
from __future__ import annotations


import numpy as np
import pytest

from conftest import REPO_ROOT, assert_digits_example_ran
from hpc_ray.sgd import DistributedSGD, MLPModel, PyTorchTrainer
from hpc_ray.sgd.checkpoint import load_checkpoint, save_checkpoint
from hpc_ray.sgd.data import ArrayDataset, H5Dataset, write_h5
from hpc_ray.sgd.fusion import FusionPlan, shard_bounds

# --- pure -------------------------------------------------------------------------------


def test_shard_bounds():
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_bounds(2, 3) == [(0, 1), (1, 2), (2, 2)]
    assert shard_bounds(0, 2) == [(0, 0), (0, 0)]
    for n in range(0, 30):
        for k in range(1, 6):
            b = shard_bounds(n, k)
            assert b[0][0] == 0 and b[-1][1] == n
            assert all(b[i][1] == b[i + 1][0] for i in range(k - 1))
            assert max(hi - lo for lo, hi in b) - min(hi - lo for lo, hi in b) <= 1
    with pytest.raises(ValueError, match="num_shards"):
        shard_bounds(3, 0)


def test_fusion_plan_round_trip():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in
              [(30, 20), (20,), (20, 10), (10,), (500,)]]
    arrays.append(np.arange(6, dtype=np.int64).reshape(2, 3))
    plan = FusionPlan.for_arrays(arrays, threshold_bytes=3000)
    # Buckets never mix dtypes, never split a tensor, respect the threshold
    # (except a single larger tensor), and keep model order.
    flat = [i for bucket in plan.buckets for i in bucket]
    assert flat == list(range(len(arrays)))
    for bucket, buf in zip(plan.buckets, plan.buffers):
        assert {arrays[i].dtype for i in bucket} == {buf.dtype}
        assert buf.nbytes <= 3000 or len(bucket) == 1
    assert len(plan.buckets) >= 3
    buffers = plan.pack(arrays)
    assert sum(b.size for b in buffers) == sum(a.size for a in arrays)
    for b in buffers:
        b *= 2
    out = [np.zeros_like(a) for a in arrays]
    plan.unpack(out)
    for a, o in zip(arrays, out):
        np.testing.assert_array_equal(o, a * 2)
    views = plan.split()
    assert all(v.base is not None for v in views)          # views, not copies
    assert [v.shape for v in views] == [a.shape for a in arrays]
    with pytest.raises(ValueError, match="shape"):
        plan.pack([np.zeros(3)] + arrays[1:])
    with pytest.raises(ValueError, match="expected 6"):
        plan.pack(arrays[:2])


def test_fusion_default_is_one_buffer():
    plan = FusionPlan([(100, 10), (10,)], np.float32)
    assert len(plan.buffers) == 1 and plan.nbytes == 4 * 1010


def test_h5_dataset_shards_read_only_their_rows(tmp_path):
    x = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    y = np.arange(50)
    path = write_h5(tmp_path / "d.h5", {"train": {"x": x, "y": y}})
    full = H5Dataset(path, "train")
    assert len(full) == 50 and full.reads == []
    shards = [full.shard(r, 4) for r in range(4)]
    for r, shard in enumerate(shards):
        lo, hi = shard_bounds(50, 4)[r]
        assert shard.indices == range(lo, hi)
        sx, sy = shard.arrays()
        shard.arrays()                       # cached: still one read
        np.testing.assert_array_equal(sx, x[lo:hi])
        np.testing.assert_array_equal(sy, y[lo:hi])
        assert shard.reads == [(lo, hi)]
        assert shard[0][1] == lo and shard[-1][1] == hi - 1
    # Row by row, still only inside the shard.
    lazy = H5Dataset(path, "train", in_memory=False).shard(1, 4)
    assert [int(lazy[i][1]) for i in range(len(lazy))] == list(range(13, 26))
    assert all(13 <= lo and hi <= 26 for lo, hi in lazy.reads)
    lazy.close()
    # A shard pickles as a description (no rows, no open file).
    import pickle
    copy = pickle.loads(pickle.dumps(shards[2]))
    assert copy.reads == [] and copy.indices == shards[2].indices
    with pytest.raises(KeyError, match="no group 'test'"):
        H5Dataset(path, "test")
    with pytest.raises(ValueError, match="rank"):
        full.shard(4, 4)


def test_array_dataset_shard():
    data = ArrayDataset(np.zeros((10, 2)), np.arange(10))
    shard = data.shard(1, 3)
    assert shard.indices == range(4, 7) and list(shard.arrays()[1]) == [4, 5, 6]


def test_checkpoint_tree_round_trip(tmp_path):
    model = {"layer/weight": np.ones((2, 3), np.float32), "bias": np.zeros(3),
             "count": np.array(7)}
    optimizer = {"state": {0: {"momentum_buffer": np.full((2, 3), 0.5), "step": 3.0},
                           1: {"momentum_buffer": None}},
                 "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "nesterov": False,
                                   "foreach": None, "name": "main", "params": [0, 1]}]}
    path = save_checkpoint(tmp_path / "c.h5", model, optimizer, {"epoch": 4})
    got_model, got_opt, meta = load_checkpoint(path)
    assert list(got_model) == list(model) and meta == {"epoch": 4}
    for k in model:
        np.testing.assert_array_equal(got_model[k], model[k])
        assert got_model[k].dtype == model[k].dtype
    assert set(got_opt["state"]) == {0, 1}                 # int keys come back as ints
    np.testing.assert_array_equal(got_opt["state"][0]["momentum_buffer"], 0.5)
    assert got_opt["state"][0]["step"] == 3.0 and got_opt["state"][1] == {
        "momentum_buffer": None}
    assert got_opt["param_groups"] == optimizer["param_groups"]
    assert isinstance(got_opt["param_groups"][0]["betas"], tuple)
    assert not list(tmp_path.glob("*.tmp-*"))
    with pytest.raises(TypeError, match="cannot store"):
        save_checkpoint(tmp_path / "bad.h5", model, {"x": object()})
    write_h5(tmp_path / "other.h5", {"train": {"x": np.zeros(2)}})
    with pytest.raises(ValueError, match="not an hpc_ray.sgd checkpoint"):
        load_checkpoint(tmp_path / "other.h5")


def test_mlp_gradients_match_finite_differences():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 5))
    y = rng.integers(0, 3, 8)
    model = MLPModel([5, 4, 3], x, y, batch_size=8, dtype=np.float64, seed=2)
    loss, grads = model.loss_and_gradients(x, y)
    eps = 1e-6
    for w, g in zip(model.weights, grads):
        for idx in [tuple(rng.integers(0, s) for s in w.shape) for _ in range(4)]:
            old = w[idx]
            w[idx] = old + eps
            up, _ = model.loss_and_gradients(x, y)
            w[idx] = old - eps
            down, _ = model.loss_and_gradients(x, y)
            w[idx] = old
            assert abs((up - down) / (2 * eps) - g[idx]) < 1e-6


def test_mlp_trains_alone():
    from hpc_ray.sgd.data import load_digits
    (xt, yt), (xv, yv) = load_digits()
    model = MLPModel([64, 32, 10], xt, yt, lr=0.05)
    for _ in range(300):
        grads, stats = model.compute_gradients()
        model.apply_gradients(grads)
    assert stats["num_samples"] == 32
    assert model.evaluate(xv, yv)["accuracy"] > 0.9


def test_bad_arguments_fail_before_any_actor():
    with pytest.raises(ValueError, match="unknown strategy 'ring'"):
        DistributedSGD(lambda w, d: None, 2, strategy="ring")
    with pytest.raises(ValueError, match="num_workers"):
        DistributedSGD(lambda w, d: None, 0)
    with pytest.raises(ValueError, match="backend=nccl"):
        PyTorchTrainer(lambda c: None, lambda c: None, backend="nccl")
    with pytest.raises(ValueError, match="batch_size"):
        PyTorchTrainer(lambda c: None, lambda c: None, batch_size=0)
    with pytest.raises(ValueError, match="use_gpu=True"):
        PyTorchTrainer(lambda c: None, lambda c: None, use_gpu=True)


def test_local_mode_refuses_an_allreduce_group():
    import hpc_ray as ray
    ray.init(local_mode=True)
    try:
        with pytest.raises(ValueError, match="local_mode"):
            DistributedSGD(lambda w, d: None, 2, strategy="allreduce")
    finally:
        ray.shutdown()


# --- under MPI ------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 4)])
def test_distributed_sgd(run, mode, n):
    values = run("sgd_distributed.py", n, mode=mode, timeout=150).assert_ok(
        "sgd_distributed")
    assert values["allreduce_accuracy"] > 0.9
    assert values["ps_shards"] >= 3


@pytest.mark.mpi
def test_digits_example_numpy_under_mpiexec(run):
    result = run(REPO_ROOT / "examples" / "sgd_digits.py", 3, "--framework", "numpy",
                 "--epochs", "6", mode="mpiexec", timeout=120)
    assert_digits_example_ran(result, "numpy: 2 replicas", 6)
