"""Issue 11, executor side: threads in tasks and actors, worker prints on the
driver (log_to_driver), and actor calls retried after the actor's process died.

The rank scripts are tests/mpi_scripts/executor_semantics.py and executor_quiet.py."""
from __future__ import annotations

import importlib.util
import os
import re

import pytest

pytestmark = [pytest.mark.mpi]


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_executor_semantics(run, mode):
    result = run("executor_semantics.py", 3, mode=mode, timeout=120)
    values = result.assert_ok("executor_semantics")
    assert values["threads"] == "ok" and values["retries"] == "ok"
    assert values["method_retries"] == "ok"
    assert values["timed_get"] == "ok"
    assert values["thread_lends"] == "ok"
    pid = values["prints"]["pid"]
    # Each printed line reaches the output once, prefixed: under mpiexec the
    # executor's output is not also passed on by the launcher.
    lines = re.findall(rf"^\(pid={pid}, rank=\d+\) hello from task T1$", result.stdout, re.M)
    assert len(lines) == 1, result.output()
    assert result.stdout.count("hello from actor A1") == 1, result.output()
    assert len(re.findall(r"oops from task T1", result.stderr)) == 1, result.output()
    # A line printed just before the process died is not lost.
    assert re.search(r"^\(pid=\d+, rank=\d+\) dying once \(exit\)$", result.stdout, re.M), \
        result.output()


@pytest.mark.parametrize("mode", ["embedded"])
def test_log_to_driver_off(run, mode):
    result = run("executor_quiet.py", 3, mode=mode, timeout=60)
    result.assert_ok("executor_quiet")
    assert not re.search(r"\(pid=\d+, rank=\d+\) quiet line", result.stdout + result.stderr), \
        result.output()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_a_torch_loaders_shared_memory_goes_with_the_job(run):
    # (One mode: the sweep at a rank's end is the same under mpiexec.)
    run("torch_loader.py", 3, mode="embedded", timeout=120).assert_ok("torch_loader")


@pytest.mark.parametrize("mode", ["mpiexec", "embedded"])
def test_a_task_that_spawns_mpi_processes_leaves_its_rank_serving(run, mode):
    def topology_files():   # hydra's, one per launcher: its proxy unlinks it as it ends
        tmp = os.environ.get("TMPDIR", "/tmp")
        return {f for f in os.listdir(tmp) if f.startswith("hydra_hwloc_xmlfile_")}
    before = topology_files()
    result = run("task_spawns_mpi.py", 3, mode=mode, timeout=90)
    values = result.assert_ok("task_spawns_mpi")
    assert values["solved"] == [4950, 45]
    assert "AFTER SHUTDOWN" in result.stdout, result.output()
    # The spawns' launchers end killed, with their executor: their files go first.
    assert topology_files() - before == set(), result.output()


def test_a_rank_out_of_file_descriptors_fails_the_actors_it_cannot_start_and_goes_on(run):
    # (mpiexec: the script lowers ulimit -n on ranks 1..N-1 alone.)
    result = run("few_fds.py", 3, mode="mpiexec", timeout=90)
    values = result.assert_ok("few_fds")
    assert values["answers"]["pong"] >= 10 and values["answers"]["failed"] >= 1, values
    said = "could not start a process for an actor or tasks: OSError(24, 'Too many open files')"
    assert 1 <= result.stderr.count(said) <= 2, result.output()   # once per rank at most
