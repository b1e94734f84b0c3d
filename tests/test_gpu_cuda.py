"""GPUs found as Ray 0.7 finds them, and real CUDA work in tasks and actors.

The node_gpus tests run anywhere; the rest need a CUDA device (torch sees one)
and are skipped without it: they were run on an H100 node (see the closing note
of the stop that added them).
"""
from __future__ import annotations

import os

import pytest

from hpc_ray.runtime.launch import node_gpus

torch = pytest.importorskip("torch")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cuda_visible_devices_wins_over_the_machine(monkeypatch, tmp_path):
    (tmp_path / "0000:01:00.0").mkdir()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert node_gpus(str(tmp_path)) == [3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert node_gpus(str(tmp_path)) == []


def test_unset_cuda_visible_devices_counts_the_machines_gpus(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    proc = tmp_path / "gpus"
    proc.mkdir()
    for bus in ("0000:01:00.0", "0000:41:00.0"):
        (proc / bus).mkdir()
    assert node_gpus(str(proc)) == [0, 1]
    # No /proc/driver/nvidia (some containers): the device files count.
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    assert node_gpus(str(tmp_path / "absent"), str(dev)) == [0, 1, 2]
    assert node_gpus(str(tmp_path / "absent"), str(tmp_path / "absent")) == []


@needs_cuda
@pytest.mark.mpi
@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_tasks_and_actors_run_torch_on_the_nodes_gpu(run, mode, n):
    devices = torch.cuda.device_count()
    values = run("cuda_tasks.py", n, mode=mode, timeout=120,
                 env={"CUDA_VISIBLE_DEVICES": None}).assert_ok("cuda_tasks")
    assert values["gpus"] == devices
    ids, visible, seen, total = values["whole"]
    assert len(ids) == 1 and visible == str(ids[0]) and seen == 1 and total == 256.0 ** 3
    assert [(h[0], h[1], h[2]) for h in values["halves"]] == [([0], "0", 1)] * 2
    assert values["no_gpu"] == [[], ""]
    (ids1, dev1, sum1), (ids2, dev2, sum2) = values["actor"]
    assert ids1 == ids2 and len(ids1) == 1 and dev1 == dev2 == "cuda"
    assert (sum1, sum2) == (4.0, 8.0)
