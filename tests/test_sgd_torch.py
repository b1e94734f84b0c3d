"""Issue 6 ``PyTorchTrainer`` (needs torch; skipped without it): convergence on
the digits from HDF5 with 2 and 3 replicas, identical weights, per-replica
slices, checkpoint round trip, 0.7.2's ``use_gpu``/``backend="gloo"``, counts
the job cannot hold refused at once (tests/mpi_scripts/sgd_trainer.py); the digits
example embedded; optimizer state through an HDF5 checkpoint (pure)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO_ROOT, assert_digits_example_ran

torch = pytest.importorskip("torch")


def test_replica_resources_in_every_documented_form():
    from hpc_ray.sgd.pytorch import Resources, _resources
    from hpc_ray.tune.resources import Resources as TuneResources

    want = Resources(2, 1, {"R": 1})
    assert _resources({"num_cpus": 2, "num_gpus": 1, "resources": {"R": 1}}) == want
    assert _resources(Resources(num_cpus=2, num_gpus=1, resources={"R": 1})) == want
    assert _resources(TuneResources(cpu=2, gpu=1, custom_resources={"R": 1})) == want
    with pytest.raises(TypeError, match="Tune's Resources"):
        _resources(3)


def test_optimizer_state_through_checkpoint(tmp_path):
    from hpc_ray.sgd.checkpoint import load_checkpoint, save_checkpoint
    from hpc_ray.sgd.pytorch import _to_numpy, _to_torch
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
    path = save_checkpoint(tmp_path / "c.h5", _to_numpy(model.state_dict()),
                           _to_numpy(opt.state_dict()))
    m, o, _ = load_checkpoint(path)
    model2 = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    model2.load_state_dict(_to_torch(m))
    opt2.load_state_dict(_to_torch(o))
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    assert opt2.param_groups[0]["lr"] == 0.01
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert set(s1) == set(s2)
    for k in s1:
        for name in s1[k]:
            assert torch.equal(torch.as_tensor(s1[k][name]), torch.as_tensor(s2[k][name]))


def test_local_mode_refuses_replicas_that_cannot_meet():
    import hpc_ray as ray
    from hpc_ray.sgd.pytorch import PyTorchTrainer
    ray.init(local_mode=True)
    try:
        with pytest.raises(ValueError, match="local_mode"):
            PyTorchTrainer(lambda c: torch.nn.Linear(2, 1), lambda c: ([], []),
                           num_replicas=2)
    finally:
        ray.shutdown()


@pytest.mark.mpi
@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 4)])
def test_pytorch_trainer(run, mode, n):
    values = run("sgd_trainer.py", n, mode=mode, timeout=180).assert_ok("sgd_trainer")
    assert values["history"][-1][1] > 0.9
    assert len(values["shards"]) == n - 1


@pytest.mark.mpi
def test_digits_example_embedded(run):
    result = run(REPO_ROOT / "examples" / "sgd_digits.py", 3, "--replicas", "2",
                 "--epochs", "5", mode="embedded", timeout=150)
    accuracy = assert_digits_example_ran(result, "torch: 2 replicas", 5)
    assert np.isfinite(accuracy)
