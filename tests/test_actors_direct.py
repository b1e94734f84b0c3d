"""Issue 12: actor calls on the actor's host, sent straight to its socket
(peer_calls) or through the head, keep every semantic of the path through the
actor's rank: order, results the rank accounts for, prints, the head's tables,
restarts. The rank script is
tests/mpi_scripts/actor_direct.py."""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.mpi]


@pytest.mark.parametrize("mode,n,ranks_per_node", [("embedded", 3, None), ("mpiexec", 3, "1"),
                                                   ("mpiexec", 5, None)])
def test_actor_calls_on_the_callers_host_keep_their_order_and_books(run, mode, n, ranks_per_node):
    env = {"HPC_RAY_RANKS_PER_NODE": ranks_per_node} if ranks_per_node else None
    result = run("actor_direct.py", n, mode=mode, env=env, timeout=90)
    result.assert_ok("actor_direct")
    assert re.search(r"^\(pid=\d+, rank=\d+\) shout 5$", result.stdout, re.M), result.output()


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_remote_with_a_direct_result_in_flight_returns_at_once(run, mode):
    """A call made with the ref of a direct call still running is held in the
    caller (runtime/held_calls.py), not in ``.remote()``: a flag raised after it
    lets both finish, and an actor created with such a ref starts."""
    run("held_calls.py", 3, mode=mode, timeout=120).assert_ok("held_calls")
