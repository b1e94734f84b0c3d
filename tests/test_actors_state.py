"""Issue 4 worker-side state: reusable variables (seed 000), run_function_on_all_workers
(both spellings), the experimental signal API (the three 0.7 docs examples and
reset), refs awaited in asyncio code, and multiprocessing manager proxies passed
as task arguments with the authkey set on the workers (seed 003).

One launch per mode runs every part (tests/mpi_scripts/actors_state.py); each
part reports ``SECTION <name> ok`` or ``FAIL <name>`` with its traceback, and the
tests below check one part each, so a failure names the feature."""
from __future__ import annotations

import pytest

from conftest import LINGER_TIMEOUT, _leaked_shm, _shm_entries, poll_for, run_mpi

pytestmark = pytest.mark.mpi

LAUNCHES = [("embedded", 3), ("mpiexec", 3), ("module", 5)]


@pytest.fixture(scope="module", params=LAUNCHES, ids=[f"{m}-{n}" for m, n in LAUNCHES])
def state_run(request, tmp_path_factory):
    mode, n = request.param
    tmp = tmp_path_factory.mktemp(f"state-{mode}-{n}")
    shm_before = _shm_entries()
    result = run_mpi("actors_state.py", n, mode=mode, timeout=120, expect_rc=None,
                     env={"HPC_RAY_TEST_TMPDIR": str(tmp)})
    # The autouse leftover check runs per test, after this module-scoped launch
    # began; check /dev/shm for this launch here (the manager section makes some).
    leaked = (set() if poll_for(lambda: not _leaked_shm(shm_before), LINGER_TIMEOUT)
              else _leaked_shm(shm_before))
    assert not leaked, f"new /dev/shm entries left behind: {sorted(leaked)}"
    return result


def check_section(result, name):
    lines = result.stdout.splitlines()
    if f"SECTION {name} ok" not in lines:
        pytest.fail(f"part {name!r} of actors_state.py failed\n{result.output()}",
                    pytrace=False)


def test_reusable_variables(state_run):
    """Built once per worker, reinitialized after each task that used it, driver reads it."""
    check_section(state_run, "reusable")


def test_reusable_built_at_assignment(state_run):
    """Seed 000: the assignment runs the initializer on each worker and on the driver."""
    check_section(state_run, "reusable_eager")


def test_reusable_nested_and_failing_reinitializer(state_run):
    """A nested task's value is its own; a raising reinitializer loses no result."""
    check_section(state_run, "reusable_nested")


def test_run_function_on_all_workers(state_run):
    """Runs everywhere before later tasks, also in processes started later."""
    check_section(state_run, "run_function")


def test_signal_user(state_run):
    check_section(state_run, "signal_user")


def test_signal_error(state_run):
    check_section(state_run, "signal_error")


def test_signal_between_actors(state_run):
    check_section(state_run, "signal_actors")


def test_async(state_run):
    check_section(state_run, "async")


def test_manager_proxies(state_run):
    check_section(state_run, "manager_proxies")


def test_script_ends_cleanly(state_run):
    """The script ran to its end (no crash, no hang) and shut down cleanly."""
    values = state_run.results()
    assert "failed_sections" in values, state_run.output()
    expected_rc = 1 if values["failed_sections"] else 0
    assert state_run.returncode == expected_rc, state_run.output()


@pytest.mark.parametrize("standby", ["on", "off"])
def test_the_next_actor_runs_in_the_executor_started_ahead(run, standby):
    """Once a rank has hosted an actor it keeps one executor started ahead; the
    next actor runs in it, a new one follows (not while every core is busy), and
    one that dies is replaced without a crash on the driver's stderr."""
    result = run("actor_standby.py", 2, standby, mode="embedded", timeout=90,
                 env={"HPC_RAY_ACTOR_STANDBY": "1" if standby == "on" else "0"})
    values = result.assert_ok("actor_standby")
    if standby == "on":
        assert values["next_actor_in_spare"] is True
        assert values["spare_while_busy"] == [], values
        assert values["spare_death_quiet"] is True
        assert "crash" not in result.stderr.lower(), result.stderr


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_reusable_defined_before_init_reaches_the_workers(run, mode):
    run("reusable_before_init.py", 3, mode=mode, timeout=60).assert_ok("reusable_before_init")
