"""Issue 38: a node's resources as one pool, as a user sees it: what actors hold
while they live and during method calls, and fractional requests packed as Ray
packs them (tests/mpi_scripts/node_pool.py, one worker rank of one CPU)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(180)   # (the launch's own limit, and its stack dump, first)
@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_actor_resources_and_fractional_packing(run, mode):
    values = run("node_pool.py", 2, mode=mode, timeout=150).assert_ok("node_pool")
    assert_node_pool(values)


def assert_node_pool(values: dict) -> None:
    """What ``mpi_scripts/node_pool.py`` reports with one worker rank of one CPU."""
    assert values["cluster_cpus"] == 1
    # A default actor takes no CPU for its lifetime: its method and a task run at once.
    assert values["default_available"] == 1
    assert values["default_and_task"] == [2, 2]
    # num_cpus=1: held while the actor lives (its calls take nothing more).
    assert values["one_cpu_available"] == 0 and values["one_cpu_driver_sees"] == 0
    assert values["one_cpu_task_waits"] is True
    assert values["one_cpu_task_after_kill"] == "ran" and values["one_cpu_back"] == 1
    assert values["custom_during_calls"] == [0, 0, 0]
    assert values["custom_cpu_during_calls"] == 1
    assert values["custom_back"] == 1
    # Four num_cpus=0.25 tasks at once on one CPU, not a fifth.
    assert values["quarters_at_once"] == [4, 4, 4, 4]
    assert values["quarters_of_five"] == [4, ["released"] * 5]
    # A whole CPU is not shared with fractions: each waits for the other.
    assert values["quarters_beside_whole"] == 0
    assert values["whole_beside_quarters"] == 0
    assert values["halves_at_once"] == [2, 2]
    assert values["halves_of_three"] == [2, ["released"] * 3]
