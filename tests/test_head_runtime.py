"""Issue 9 as a user meets it: the head's bookkeeping in real jobs, and Ctrl-C.

- ``head_lifecycle.py``: a failed argument does not free a held one (a zero-copy
  view of it stays intact), an actor killed with calls queued on failed refs,
  a 2,000-deep chain of puts, a task that segfaults while it holds 50 MiB of
  store (the store's fill comes back), actors created and killed in a row.
- Ctrl-C: SIGINT to the driver 100 times while it submits and waits in ``get``,
  then every result still arrives; SIGINT to the whole process group (a terminal's Ctrl-C)
  reaches the driver as ``KeyboardInterrupt`` and the job goes on.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from conftest import SCRIPTS_DIR, build_command, launch_env, _kill_launch

CASES = [("embedded", 3), ("mpiexec", 3), ("module", 5)]


@pytest.mark.parametrize("mode,n", CASES, ids=[f"{m}-{n}" for m, n in CASES])
def test_head_lifecycle(run, mode, n):
    values = run("head_lifecycle.py", n, mode=mode, timeout=120).assert_ok("head_lifecycle")
    assert values["chain_objects_left"] <= 5
    assert values["store_used_after"] <= values["store_used_before"]


def _start(script: str, n: int, mode: str, *args: str, timeout: float = 120):
    command = build_command(str(SCRIPTS_DIR / script), n, args, mode)
    env = launch_env(n, mode, timeout, None)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, cwd=str(SCRIPTS_DIR), start_new_session=True, text=True)


def _finish(proc: subprocess.Popen, lines: list[str], timeout: float) -> str:
    try:
        rest, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_launch(proc.pid)
        rest, _ = proc.communicate()
        pytest.fail("the job did not end:\n" + "".join(lines) + (rest or ""))
    return "".join(lines) + (rest or "")


@pytest.mark.parametrize("mode,what", [("embedded", "repeat"), ("mpiexec", "repeat"),
                                       ("embedded", "repeat_actor")])
def test_hundred_ctrl_c_during_get_then_every_result_arrives(mode, what):
    proc = _start("interrupts.py", 3, mode, what, "100")
    lines = []
    driver_pid = None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("DRIVER "):
            driver_pid = int(line.split()[1])
        if line.startswith("READY"):
            break
    assert driver_pid, "".join(lines)
    out = _finish(proc, lines, 120)
    assert proc.returncode == 0, out
    assert "RESULTS OK 100" in out, out
    assert "Traceback" not in out, out


@pytest.mark.parametrize("mode", ["embedded", "mpiexec", "module"])
def test_terminal_ctrl_c_reaches_the_driver_and_the_job_goes_on(mode):
    proc = _start("interrupts.py", 3, mode, "group")
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("WAITING"):
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)   # what a terminal's Ctrl-C does
            break
    out = _finish(proc, lines, 90)
    assert proc.returncode == 0, out
    assert "INTERRUPTED" in out and "RESULTS OK" in out and "AGAIN 5" in out, out
    assert "MPI_Abort" not in out and "KeyboardInterrupt" not in out, out


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_a_one_node_job_listens_on_loopback_only(run, mode):
    # What the README's "What listens" section says: the ranks' own sockets are on
    # 127.0.0.1; only the launcher's control (and, embedded, PMI) ports are not.
    values = run("listeners.py", 3, mode=mode, timeout=60).assert_ok("listeners")
    assert values["rank_listeners"], "no rank listener found: the check saw nothing"
    assert all(a.startswith("127.") for a in values["rank_listeners"])
    # hydra's control port, and embedded the singleton's PMI port: not loopback.
    assert len([a for a in values["launcher_listeners"] if not a.startswith("127.")]) <= 2


@pytest.mark.timeout(210)   # (the launch's own limit, and its stack dump, first)
@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_many_driver_threads_share_rank_0s_mpi(run, mode):
    values = run("driver_threads.py", 3, mode=mode, timeout=180).assert_ok("driver_threads")
    assert values["iterations"] == 8 * 150


def test_ended_actors_leave_no_socket_open_in_the_driver(run):
    # (The driver's links are the same in every mode: embedded only.)
    values = run("ended_actors_fds.py", 3, mode="embedded",
                 timeout=120).assert_ok("ended_actors_fds")
    assert values["terminated"] <= 6 and values["named"] <= 6


@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_actors_end_with_their_last_handle(run, mode):
    values = run("actor_lifetime.py", 3, mode=mode, timeout=120).assert_ok("actor_lifetime")
    assert values["second_gpu_actor"] == [0]
    assert values["gpu_after_unread_call"] == [0]
    assert values["unreferenced_actor_exited"] is True
    assert values["used_handle_released"] is True
    assert values["thread_handle_call"] == "1"

