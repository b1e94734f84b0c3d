"""Issue 33: a bug in the head fails the task it concerns and the job goes on; a
head that fails for good still ends the job cleanly, with nothing left behind."""
from __future__ import annotations

import glob

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.faults]


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_a_head_bug_fails_one_task_and_a_failed_head_shuts_down_cleanly(run, mode):
    before = set(glob.glob("/tmp/hydra_hwloc_xmlfile_*"))
    result = run("head_bug.py", 3, mode=mode, timeout=90)
    result.assert_ok("head_bug")
    assert "MPI_Abort" not in result.stderr and "BAD TERMINATION" not in result.stdout
    assert set(glob.glob("/tmp/hydra_hwloc_xmlfile_*")) <= before
