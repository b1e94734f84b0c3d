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

pytestmark = pytest.mark.mpi

#: The driver and two workers on one host, two workers on the other.
HOSTS = ("127.0.0.2:3", "127.0.0.3:2")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.timeout(200)
@pytest.mark.parametrize("nodes_route", ["1", "0"])
def test_group_spanning_two_nodes(nodes_route):
    # Torch tensors once (importing torch in every executor is slow).
    args = ("--torch",) if HAVE_TORCH and nodes_route == "1" else ()
    cmd = fake_hosts_command("collective_nodes.py", HOSTS) + list(args)
    values = run_mpi("collective_nodes.py", 5, *args, cmd=cmd, timeout=150,
                     env={"HPC_RAY_COLLECTIVE_NODES": nodes_route}
                     ).assert_ok("collective_nodes")
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
    if nodes_route == "1":
        # Only each node's first member (0 and 1) has its rank call MPI, once per
        # allreduce; the others' ranks make no MPI collective for the group.
        assert values["mpi_calls"] == [ops, ops, 0, 0]
    else:
        assert values["mpi_calls"] == [ops] * 4
    # A leader died (member 1, whose node kept member 3), then a member that led
    # nothing: the survivors on both nodes got a RayError naming it, and formed
    # a new group. The last two are one per node: every member's rank runs MPI.
    assert values["died_3"] == [route] * 4
    assert values["died_2"] == [route] * 3
    assert values["last_route"] == ["NoneType"] * 2
