"""Runtime races found by benchmarks and examples, kept as tests."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("module", 3)])
def test_released_refs_do_not_overtake_their_submissions(run, mode, n):
    values = run("refcount_race.py", n, mode=mode, timeout=90).assert_ok("refcount_race")
    assert values["reductions"] == 150


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_actor_calls_never_run_nested_in_one_another(run, mode, n):
    values = run("actor_calls_serial.py", n, mode=mode, timeout=90).assert_ok(
        "actor_calls_serial")
    assert values["calls"] == 120


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_a_task_waiting_for_a_task_below_it_does_not_run_on_its_stack(run, mode, n):
    run("nested_waits_for_outer.py", n, mode=mode, timeout=90).assert_ok(
        "nested_waits_for_outer")
