"""Issue 3 resources: CPUs per worker rank (1, SLURM_CPUS_PER_TASK, num_cpus),
custom resources from init(resources=...), GPUs, and infeasible requests."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


def _assert_named(result, values, key, name):
    """An infeasible request fails or warns, and the message names the resource."""
    entry = values[key]
    where, _kind, message = entry["outcome"]
    assert where != "ran", entry
    if where == "pending":
        said = " ".join(entry["warnings"]) + result.stderr
        assert name in said, f"{key}: pending without a warning naming {name!r}\n" + (
            result.output())
    else:
        assert name in message, entry


@pytest.mark.parametrize("mode,n", [("mpiexec", 3), ("embedded", 3), ("module", 5)])
def test_custom_resources_and_infeasible(run, mode, n):
    result = run("resources.py", n, "custom", mode=mode, timeout=90)
    values = result.assert_ok("resources custom")
    workers = n - 1
    res = values["cluster_resources"]
    assert res["CPU"] == workers
    # The custom resources given to init() are the job's total (as in Ray), not
    # multiplied by the number of ranks.
    assert res["custom"] == 2
    assert res.get("GPU", 0) == 0
    assert values["custom_concurrent"] == 2
    assert values["custom_all_overlaps"] == 0
    assert values["wide_task_ran"] is True
    assert values["wide_task_beside"] == []
    assert values["wide_actor_answers"] is True
    assert values["wide_after_actor"] is True
    assert values["wide_inside_task"] is True
    _assert_named(result, values, "infeasible_custom", "custom")
    _assert_named(result, values, "infeasible_tpu", "TPU")
    _assert_named(result, values, "infeasible_cpu", "CPU")
    _assert_named(result, values, "infeasible_gpu", "GPU")


def test_slurm_cpus_per_task(run):
    result = run("resources.py", 3, "custom", mode="mpiexec", timeout=90,
                 env={"SLURM_CPUS_PER_TASK": "2"})
    values = result.assert_ok("resources custom")
    assert values["cluster_resources"]["CPU"] == 4
    # A 4-CPU task on two 2-CPU ranks: one hosts it, the other lends its two.
    assert values["wide_task_ran"] is True
    assert values["wide_task_beside"] == []
    assert values["wide_inside_task"] is True


def test_embedded_gpus(run):
    result = run("resources.py", 3, "gpus", mode="embedded", timeout=90,
                 env={"CUDA_VISIBLE_DEVICES": None})
    values = result.assert_ok("resources gpus")
    assert values["cluster_resources"]["GPU"] == 2
    tasks = values["gpu_tasks"]
    ids = [t[0] for t in tasks]
    assert all(len(i) == 1 for i in ids), tasks
    assert ids[0] != ids[1], tasks          # two tasks, two different GPUs
    for gpu_ids, visible in tasks:           # each task sees only its GPU
        assert visible == ",".join(gpu_ids), tasks


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 4)])
def test_zero_cpu_tasks_and_waiting_actors(run, mode, n):
    # No actor standby: the last check counts a rank's executors.
    result = run("zero_cpu.py", n, mode=mode, timeout=120,
                 env={"HPC_RAY_EXTRA_EXECUTOR_IDLE": "1", "HPC_RAY_ACTOR_STANDBY": "0"})
    values = result.assert_ok("zero_cpu")
    # 4 num_cpus=0 tasks ran at once, in 4 processes, while every CPU was held.
    assert values["zero_cpu_overlap"] == 4
    assert values["zero_cpu_waits"] == "ok"
    assert values["actor_keeps_cpu"] == "ok"
    assert values["extras_retired"] == "ok"


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_work_waiting_for_cpus_actors_hold_is_warned_of(run, mode):
    result = run("stalled.py", 3, mode=mode, timeout=90, env={"HPC_RAY_STALL_WARN_S": "1"})
    result.assert_ok("stalled")
    err = result.stderr
    warning = "actors hold all 2 of the job's"
    assert err.count(warning) == 1, result.output()
    # Not while tasks merely queued behind running ones.
    assert err.index("MARK backlog done") < err.index(warning), result.output()
