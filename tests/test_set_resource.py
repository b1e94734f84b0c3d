"""Issue 38: ``experimental.set_resource`` (Ray 0.7's dynamic custom resources),
as a user sees it, embedded and under mpiexec (tests/mpi_scripts/set_resource.py)."""
from __future__ import annotations

import pytest

import hpc_ray as ray
from hpc_ray.experimental import set_resource


@pytest.mark.mpi
@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_set_resource(run, mode, n):
    values = run("set_resource.py", n, mode=mode, timeout=120).assert_ok("set_resource")
    assert values["client_ids"] is True
    assert values["created_total"] == 2 and values["created_available"] == 2
    assert values["infeasible_then_created"] == "ran"
    assert values["actor_then_created"] is None        # the actor holds the only one
    assert values["grown_concurrent"] == [3, 3, 3]
    assert values["shrunk_total"] == 1 and values["shrunk_available"] == 0
    assert values["shrunk_holder"] == "held" and values["shrunk_late"] == "ran"
    assert values["shrunk_available_after"] == 1
    assert values["deleted_in_cluster"] is False and values["deleted_on_nodes"] is False
    assert values["deleted_holder"] == "held"
    assert values["from_task"] == 3 and values["from_task_seen_by_driver"] == 3
    bad = values["bad_input"]
    assert "non-negative integer" in bad["('Z', -1)"] and "non-negative" in bad["('Z', 1.5)"]
    assert "'CPU'" in bad["('CPU', 4)"] and "'GPU'" in bad["('GPU', 1)"]
    assert "no-such-node" in bad["('Z', 1, 'no-such-node')"]


@pytest.mark.parametrize("capacity", [-1, 0.5, float("nan"), "2"])
def test_a_capacity_that_is_not_a_non_negative_integer_is_refused(capacity):
    with pytest.raises(ValueError, match="non-negative integer"):
        set_resource("R", capacity)


def test_before_init_it_says_to_call_init():
    with pytest.raises(ray.exceptions.RayError, match=r"ray.init has been called\.$"):
        set_resource("R", 1)


@pytest.mark.mpi
def test_set_resource_on_chosen_nodes_of_three_fake_hosts():
    from conftest import run_mpi
    from test_two_nodes import fake_hosts_command

    cmd = fake_hosts_command("set_resource_nodes.py", hosts=("127.0.0.1:1", "127.0.0.2:2",
                                                             "127.0.0.3:2"))
    res = run_mpi("set_resource_nodes.py", 5, cmd=cmd, timeout=120).assert_ok(
        "set_resource_nodes")
    assert res["node_ids"] == ["node-0", "node-1", "node-2"]
    assert res["r_on"] == ["node-2"]
    assert len(res["r_stores"]) == 1                  # every R task ran on node 2
    # A task's set_resource with no client_id is its own node's.
    assert len(res["mine_on"]) == 1 and res["mine_on"][0] in ("node-1", "node-2")
    assert res["mine_stores_match"] is True
