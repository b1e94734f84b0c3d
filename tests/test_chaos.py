"""Issue 33: processes killed at random under a workload with nested tasks, 1 MB
results, chains and restartable actors. Every value comes back right, nothing
hangs, the store is back to its start once the refs are dropped, and nothing is
left behind (the conftest fixture checks processes and /dev/shm).

The workload is ``benchmarks/chaos.py`` (its larger runs are the benchmark), here
sized for CI: a few seconds, a kill every 0.3-1 s.
"""
from __future__ import annotations

import json

import pytest

from conftest import REPO_ROOT

pytestmark = [pytest.mark.mpi, pytest.mark.faults]

CHAOS = REPO_ROOT / "benchmarks" / "chaos.py"


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_chaos_every_value_right_and_nothing_left(run, mode, tmp_path):
    counter = tmp_path / "executions"
    counter.touch()
    result = run(CHAOS, 4, "--tasks", "2500",
                 "--get-timeout", "60", mode=mode, timeout=110,
                 env={"HPC_RAY_CHAOS_COUNTER": str(counter)})
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("CHAOS "))
    report = json.loads(line[len("CHAOS "):])
    assert report["wrong"] == [] and report["lost"] == 0, report
    assert report["kills"] >= 1, report
    assert report["executions"] >= report["tasks"] >= 2500, report
    assert report["store_end"] == report["store_start"], report
    assert report["objects_left"] == 0, report
