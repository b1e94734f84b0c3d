"""Issue 12: the driver's actor calls over the direct channel (transport/direct.py)
keep every semantic of the path through the actor's rank: order, results the rank
accounts for, prints, the head's tables, restarts. The rank script is
tests/mpi_scripts/actor_direct.py."""
from __future__ import annotations

import re

import pytest

from types import SimpleNamespace

from hpc_ray.runtime.worker import polling_backoff
from hpc_ray.runtime.worker_state import WorkerState

pytestmark = [pytest.mark.mpi]


@pytest.mark.parametrize("mode,n,ranks_per_node", [("embedded", 3, None), ("mpiexec", 3, "1"),
                                                   ("mpiexec", 5, None)])
def test_driver_calls_over_the_direct_channel(run, mode, n, ranks_per_node):
    env = {"HPC_RAY_RANKS_PER_NODE": ranks_per_node} if ranks_per_node else None
    result = run("actor_direct.py", n, mode=mode, env=env, timeout=90)
    result.assert_ok("actor_direct")
    assert re.search(r"^\(pid=\d+, rank=\d+\) shout 5$", result.stdout, re.M), result.output()


def test_an_oversubscribed_rank_stops_polling_fast_after_activity():
    quiet = polling_backoff(ranks_on_node=3, cores=2)
    crowded = polling_backoff(ranks_on_node=8, cores=2)
    assert quiet.warm > 0 and quiet.spin_limit > crowded.spin_limit
    assert crowded.warm == 0.0
    timeouts = [crowded.next_timeout() for _ in range(12)]
    assert timeouts[:crowded.spin_limit] == [0.0] * crowded.spin_limit
    rest = timeouts[crowded.spin_limit:]
    assert rest == sorted(rest) and rest[-1] == crowded.cap
    # An idle rank sleeps longer the more ranks share each core.
    assert quiet.cap < crowded.cap < polling_backoff(ranks_on_node=32, cores=2).cap


def test_a_loop_with_no_reply_due_skips_the_warm_phase():
    quiet = polling_backoff(ranks_on_node=3, cores=2)
    for _ in range(quiet.spin_limit):
        assert quiet.next_timeout(False) == 0.0
    assert quiet.next_timeout(True) == quiet.short           # warm: poll every 20 us
    cooled = [quiet.next_timeout(False) for _ in range(8)]    # doubling at once
    assert cooled[:3] == [quiet.short, 2 * quiet.short, 4 * quiet.short]
    assert cooled == sorted(cooled) and cooled[-1] == quiet.cap


def _rank(executors, requests=None):
    state = WorkerState(cpus=len(executors))     # the rule reads these two fields only
    state.executors = executors
    state.requests = requests or {}
    return state


def _executor(running=True, blocked=0, lending=0):
    return SimpleNamespace(assigned={1: None} if running else {}, blocked=blocked,
                           lending=lending)


def test_a_rank_whose_cpus_all_run_tasks_expects_no_reply():
    assert _rank([_executor(), _executor()]).cpus_all_running()
    assert not _rank([_executor(), _executor(running=False)]).cpus_all_running()
    assert not _rank([_executor(blocked=1)]).cpus_all_running()      # waits in get()
    assert not _rank([_executor(lending=1)]).cpus_all_running()
    assert not _rank([_executor()], {7: ("ex", 1, 1)}).cpus_all_running()  # a reply due
    assert not _rank([]).cpus_all_running()
