"""Issue 3 faults: a process that dies under a task (segfault, os._exit, the
OOM killer) does not end the job; crashes are retried, exceptions are not;
max_calls retires a worker's process."""
from __future__ import annotations

import re

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
    # Each crash a retry covers is said on the driver's stderr (Ray: "A worker
    # died or was killed while executing task"): crash_first_time once,
    # count_and_crash's default retries three times.
    retried = re.findall(r"^hpc_ray: the process running (\w+) on worker rank \d+ .* died with "
                         r"exit code 1; running it again", result.stderr, re.M)
    assert sorted(retried) == ["count_and_crash"] * 3 + ["crash_first_time"], result.output()
    # max_calls=1: every call in a fresh process; otherwise processes are reused.
    assert values["max_calls_pids"] == n - 1 + 2
    assert values["reused_pids"] <= n - 1


@pytest.mark.parametrize("how,rc", [("shutdown", 7), ("mpi4py-first", 1)])
def test_a_killed_spawned_worker_rank_breaks_the_embedded_session(run, how, rc):
    """Embedded mode has no launcher to end the job when a worker rank is killed,
    and the driver is the user's process: the pending get raises instead of
    waiting forever, later calls raise too, naming the rank and its pid, and the
    driver leaves with the script's status (not a crash in MPI_Finalize) after
    its exit handlers, leaving nothing behind (the fixtures check)."""
    # Settings that look like a launcher's (Open MPI's MCA parameter that
    # confine_network sets, a user's HYDRA_ option) leave the driver embedded.
    result = run("spawned_rank_killed.py", 3, how, mode="embedded", timeout=60, expect_rc=rc,
                 env={"OMPI_MCA_btl_tcp_if_include": "lo", "HYDRA_LAUNCHER": "fork"})
    values = result.assert_ok("spawned_rank_killed")
    lines = result.stdout.splitlines()
    assert "session broken" in lines and lines[-1] == "ATEXIT ran", result.output()
    assert "of this embedded session died" in values["error"], values
    assert "hpc_ray: worker rank" in result.stderr, result.output()
    if how == "shutdown":
        assert "cannot start worker ranks" in values["reinit"], values
    if how == "mpi4py-first":
        assert "leaving without MPI_Finalize" in result.stderr, result.output()
