"""Issue 12: direct calls from tasks and actors to actors on the same host
(runtime/peer_calls.py). The rank script is tests/mpi_scripts/peer_calls.py."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.mpi]


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_calls_between_executors(run, mode):
    result = run("peer_calls.py", 3, mode=mode, timeout=120,
                 env={"HPC_RAY_DIRECT_CALLS": "1"})
    result.assert_ok("peer_calls")


def test_calls_through_the_head_when_disabled(run):
    # The same program with direct calls off: what it checks holds on both paths.
    result = run("peer_calls.py", 3, mode="embedded", timeout=120,
                 env={"HPC_RAY_DIRECT_CALLS": "0", "HPC_RAY_TEST_EXPECT_DIRECT": "0"})
    result.assert_ok("peer_calls")
