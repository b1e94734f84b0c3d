"""Issue 3 faults: a process that dies under a task (segfault, os._exit, the
OOM killer) does not end the job; crashes are retried, exceptions are not;
max_calls retires a worker's process."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.faults]


@pytest.mark.parametrize("mode,n", [("mpiexec", 3), ("embedded", 3), ("module", 5)])
def test_faults(run, mode, n):
    result = run("faults.py", n, mode=mode, timeout=120)
    values = result.assert_ok("faults")
    assert set(values["crash_messages"]) == {"segfault", "hard_exit", "oom_killed"}
    # max_retries: crashes are retried (default 3, so 4 attempts), exceptions never.
    assert values["attempts_default_crash"] == 4
    assert values["attempts_zero_crash"] == 1
    assert values["attempts_raise"] == [1, 1]
    # max_calls=1: every call in a fresh process; otherwise processes are reused.
    assert values["max_calls_pids"] == n - 1 + 2
    assert values["reused_pids"] <= n - 1
