"""Issue 4 actors: @remote classes and options, method calls in caller order,
num_returns on methods, handles passed to tasks and actors (the parameter-server
pattern), placement and resources (CPU, GPU, custom), an actor that cannot be
placed, named actors, kill and __ray_terminate__, exceptions in methods, and the
clean-up of an actor's process when it ends.

The rank scripts are tests/mpi_scripts/actors_api.py and actor_exit_cleanup.py."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,n", [
    ("embedded", 3),
    ("mpiexec", 3),
    ("module", 3),
    ("mpiexec", 5),
])
def test_actors_api(run, mode, n):
    result = run("actors_api.py", n, mode=mode, timeout=120)
    values = result.assert_ok("actors_api")
    assert "Recorder.fail" in values["method_error"], values
    # The warning for an actor that cannot be placed names the missing resource,
    # either as captured by the script or on rank 0's stderr.
    assert "no node can ever hold it" in values["infeasible_error"], values
    assert "dead" in values["dead_actor_error"].lower() or "kill" in values[
        "dead_actor_error"].lower(), values
    assert sorted(values["gpu_ids"]) == [0, 1]   # each GPU id handed out once per node


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_actor_call_order(run, mode, n):
    """Calls from one caller run once each and in order, also when an earlier call
    waits for an argument (tests/mpi_scripts/actors_order.py)."""
    run("actors_order.py", n, mode=mode, timeout=90).assert_ok("actors_order")


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3), ("mpiexec", 4)])
def test_driver_is_served_while_tasks_flood_an_actor(run, mode, n):
    # The docs' "Passing Around Actor Handles" loop: get, a new actor and
    # shutdown still answer (the runner's timeout catches a hang).
    result = run("actor_flood.py", n, mode=mode, timeout=90)
    values = result.assert_ok("actor_flood")
    counts = values["counts"]
    assert len(counts) == 8 and counts[-1] > counts[0], counts
    assert values["new_actor"] == "pong"
    assert values["rss_growth_mb"] < 200, values
    assert "UCX" not in result.stderr, result.stderr[-2000:]


@pytest.mark.timeout(180)   # (the launch's own limit, and its stack dump, first)
@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_actor_exit_runs_python_cleanup(run, mode, n):
    """exit_actor(), __ray_terminate__, the last handle gone and the end of the
    job each end the actor's process as Python exits: its open file is flushed,
    its TemporaryDirectory removed, its atexit handlers run and their lines reach
    the driver; kill() skips all that (tests/mpi_scripts/actor_exit_cleanup.py)."""
    result = run("actor_exit_cleanup.py", n, mode=mode, timeout=150)
    values = result.assert_ok("actor_exit_cleanup")
    for name in ("exit_actor", "terminate", "last_handle", "job_end"):
        assert values[f"cleanup_{name}"] == [f"buffered line of {name}\n", True, False], values
        assert f"atexit line of {name}" in result.stdout, result.output()
    assert "atexit line of kill" not in result.stdout, result.output()
    assert values["mpi_in_task"][0] == 1, values
