"""How many queued tasks a worker rank hands an idle executor at once
(``batch_sizing.batch_length``): of a backlog, about EXECUTOR_BATCH_SECONDS of work at
each function's average time on the rank (``batch_sizing.FunctionTimes``, once
TIMED_AFTER of its tasks ended), an eighth of the share for functions not timed
there yet; and, end to end, a long task of a new function does not hold back the
short ones queued behind it (``test_introspection`` has a function that
returned at once the few times it ran before)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpc_ray.runtime.batch_sizing import (EXECUTOR_BATCH_SECONDS, TIMED_AFTER, FunctionTimes,
                                          batch_length)

BUDGET = EXECUTOR_BATCH_SECONDS


def test_tiny_tasks_of_a_timed_function_fill_the_share():
    assert batch_length(["f"] * 100, 50, {"f": 20e-6}) == 50


def test_the_batch_holds_about_its_time_of_work():
    assert batch_length(["f"] * 100, 64, {"f": BUDGET / 10.5}) == 10


def test_a_function_slower_than_the_budget_goes_one_task_at_a_time():
    assert batch_length(["f"] * 100, 64, {"f": 1.0}) == 1


def test_untimed_functions_are_batched_an_eighth_of_the_share():
    assert batch_length(["g"] * 100, 64, {"f": 20e-6}) == 8
    assert batch_length(["g"] * 5, 5, {}) == 1


def test_a_batch_of_tiny_tasks_stops_at_tasks_of_a_new_function():
    fns = ["f"] * 10 + ["g"] * 50 + ["f"] * 10
    # The first g counts an eighth of the budget, so a few more fit; not all of them.
    n = batch_length(fns, 64, {"f": 1e-6})
    assert 10 < n <= 10 + 8


def test_a_function_is_timed_after_enough_of_its_tasks_ended():
    times = FunctionTimes()
    for _ in range(TIMED_AFTER - 1):
        times.record("f", 0.001)
    assert "f" not in times.seconds          # a few quick runs prove little
    times.record("f", 0.003)
    assert times.seconds["f"] == pytest.approx((0.001 * (TIMED_AFTER - 1) + 0.003) / TIMED_AFTER)
    before = times.seconds["f"]
    times.record("f", 1.0)                   # then a moving average
    assert times.seconds["f"] == pytest.approx(0.9 * before + 0.1)
    assert not times.warming


def test_nothing_queued_takes_nothing():
    assert batch_length([], 8, {}) == 0


@settings(max_examples=300, deadline=None)
@given(fns=st.lists(st.sampled_from("abcd"), max_size=80),
       share=st.integers(1, 64),
       times=st.dictionaries(st.sampled_from("abc"),
                             st.floats(0.0, 0.01, allow_nan=False)))
def test_batch_length_invariants(fns, share, times):
    n = batch_length(fns, share, times)
    most = min(share, len(fns))
    assert (n >= 1) == bool(fns)
    assert n <= most
    unknown = BUDGET / max(1, share // 8)
    costs = [times.get(f, unknown) for f in fns]
    # Within the budget, or a single task (one always goes when any is queued).
    assert n <= 1 or sum(costs[:n]) <= BUDGET * (1 + 1e-9)
    # As many as fit: one more would exceed the share or the budget.
    if 0 < n < most:
        assert sum(costs[:n + 1]) > BUDGET * (1 - 1e-9)


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["mpiexec", "embedded"])
def test_a_long_task_of_a_new_function_does_not_hold_back_the_short_ones(run, mode):
    result = run("batch_balance.py", 3, mode=mode, timeout=90)
    values = result.assert_ok("batch_balance")
    assert values["workers_used"] == 2, values
    # 1 long and 9 short naps on 2 workers: while the long one runs the other
    # worker takes the short ones; batched with it, 4 or 5 would wait behind it
    # (the script's get of the short ones then times out: the long one is held
    # until they are all done).
    assert values["naps_with_the_long_one"] <= 2, values
