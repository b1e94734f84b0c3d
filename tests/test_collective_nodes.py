"""Issue 38: collectives of ordinary actors in a group spanning two nodes (two
fake hosts, ``test_two_nodes.fake_hosts_command``): each node's members reduce
through their node's store and only one leader per node runs MPI; with
``HPC_RAY_COLLECTIVE_NODES=0`` every member goes through its rank, as before.

The rank script is tests/mpi_scripts/collective_nodes.py."""
from __future__ import annotations

import importlib.util

import pytest

from conftest import run_mpi
from test_two_nodes import fake_hosts_command

#: The driver and two workers on one host, two workers on the other.
HOSTS = ("127.0.0.2:3", "127.0.0.3:2")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.mpi
@pytest.mark.timeout(200)
@pytest.mark.parametrize("nodes_route", ["1", "0"])
def test_group_spanning_two_nodes(nodes_route):
    # Torch tensors once (importing torch in every executor is slow).
    args = ("--torch",) if HAVE_TORCH and nodes_route == "1" else ()
    cmd = fake_hosts_command("collective_nodes.py", *args, hosts=HOSTS)
    values = run_mpi("collective_nodes.py", 5, *args, cmd=cmd, timeout=150,
                     env={"HPC_RAY_COLLECTIVE_NODES": nodes_route}
                     ).assert_ok("collective_nodes")
    assert_group_spanning_two_nodes(values, nodes_route, args)


def assert_group_spanning_two_nodes(values: dict, nodes_route: str, args=()) -> None:
    """What ``mpi_scripts/collective_nodes.py`` reports with the driver and two
    workers on one node, two workers on the other."""
    a, b = values["member_nodes"][:2]
    assert a != b and values["member_nodes"] == [a, b, a, b]
    assert values["allreduce"] == "ok" and values["others"] == "ok"
    assert (values["torch"] == "ok") if args else ("torch" not in values)
    # Lengths that differ between the nodes, or between two members of one
    # node: a ValueError on every member, and the group still works.
    assert values["mismatch"] == "ok"
    ops = values["ops_per_member"]
    route = "NodesGroup" if nodes_route == "1" else "NoneType"
    assert values["routes"] == [route] * 4
    after = ops + len(args) + 3 * 5         # the torch tensor's allreduce, if any
    if nodes_route == "1":
        # Only each node's first member (0 and 1) has its rank call MPI, once per
        # operation; the others' ranks make no MPI collective for the group.
        assert values["mpi_calls"] == [ops, ops, 0, 0]
        assert values["mpi_calls_others"] == [after, after, 0, 0]
    else:
        assert values["mpi_calls"] == [ops] * 4
        assert values["mpi_calls_others"] == [after] * 4
    # A leader died (member 1, whose node kept member 3), then a member that led
    # nothing: the survivors on both nodes got a RayError naming it, and formed
    # a new group. The last two are one per node: every member's rank runs MPI.
    assert values["died_3"] == [route] * 4
    assert values["died_2"] == [route] * 3
    assert values["last_route"] == ["NoneType"] * 2


def _peers(nodes, blocks=True):
    """Setup infos (node, block, pid, token) of members on ``nodes``."""
    return [(n, 64 * i if blocks else None, 100 + i, 1) for i, n in enumerate(nodes)]


@pytest.mark.parametrize("nodes, blocks, env, want", [
    ([0, 1, 0, 1], True, None, [[0, 2], [1, 3]]),       # leaders 0 and 1
    ([1, 1, 0], True, None, [[0, 1], [2]]),             # a node of one member leads itself
    ([0, 0, 0], True, None, None),                      # one node: collective_shm's route
    ([0, 1], True, None, None),                         # one member per node: every rank
    ([0, 1, 0, 1], False, None, None),                  # no store blocks: every rank
    ([0, 1, 0, 1], True, "0", None),                    # HPC_RAY_COLLECTIVE_NODES=0
])
def test_plan_groups_members_by_node(monkeypatch, nodes, blocks, env, want):
    from hpc_ray.runtime.collective_nodes import plan
    if env is None:
        monkeypatch.delenv("HPC_RAY_COLLECTIVE_NODES", raising=False)
    else:
        monkeypatch.setenv("HPC_RAY_COLLECTIVE_NODES", env)
    assert plan(_peers(nodes, blocks)) == want
