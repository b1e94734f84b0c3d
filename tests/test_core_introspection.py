"""Issue 3 inspection API: resources, nodes, timeline/profile, tasks(),
objects(), progress() and as_completed()."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_introspection(run, mode, n):
    result = run("introspection.py", n, mode=mode, timeout=90)
    values = result.assert_ok("introspection")
    assert values["cluster_resources"]["CPU"] == n - 1
    assert values["num_nodes"] >= 1
    assert values["resource_ids_in_task"]["CPU"] >= 1
    assert values["traced_work_events"] == 6   # one complete event per task
    ranks = values["timeline_ranks"]  # the rank that ran each task
    assert ranks and all(isinstance(r, int) and 1 <= r < n for r in ranks), ranks
    assert values["inner_spans"] == 6
    assert values["driver_spans"] == 1
    # progress(): the bar is on stderr and reaches 7/7.
    assert re.search(r"\b7/7\b", result.stderr), result.output()
    assert values["progress_items"] in (0, 7)
