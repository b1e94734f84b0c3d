"""Issue 38: collectives of ordinary actors in a group spanning two nodes (two
fake hosts, ``test_two_nodes.fake_hosts_command``): each node's members reduce
through their node's store and only one leader per node runs MPI.

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
def test_group_spanning_two_nodes():
    args = ("--torch",) if HAVE_TORCH else ()
    cmd = fake_hosts_command("collective_nodes.py", HOSTS) + list(args)
    values = run_mpi("collective_nodes.py", 5, *args, cmd=cmd,
                     timeout=150).assert_ok("collective_nodes")
    a, b = values["member_nodes"][:2]
    assert a != b and values["member_nodes"] == [a, b, a, b]
    assert values["allreduce"] == "ok" and values["others"] == "ok"
    # Lengths that differ between the nodes: a ValueError on every member, and
    # the group still works.
    assert values["mismatch"] == "ok"
    assert (values["torch"] == "ok") if HAVE_TORCH else ("torch" not in values)
    assert values["routes"] == ["NodesGroup"] * 4
    # Only each node's first member (0 and 1) has its rank call MPI, once per
    # allreduce; the others' ranks make no MPI collective for the group.
    ops = values["ops_per_member"]
    assert values["mpi_calls"] == [ops, ops, 0, 0]
    # A leader died (member 1, whose node kept member 3), then a member that led
    # nothing: the survivors on both nodes got a RayError naming it, and formed
    # a new group. The last two are one per node: every member's rank runs MPI.
    assert values["died_3"] == ["NodesGroup"] * 4
    assert values["died_2"] == ["NodesGroup"] * 3
    assert values["last_route"] == ["NoneType"] * 2
