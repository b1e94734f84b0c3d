"""Losing one node of two: every process of node B is SIGKILLed (as a node
failure would) while the driver on node A waits in ``ray.get`` on tasks there.

Two fake hosts through MPICH hydra (``test_two_nodes.fake_hosts_command``):
node B's ranks, their executors and, for a whole node, the hydra proxy that
started them. Hydra's default (auto-cleanup) ends the job: it SIGKILLs every
other rank, the driver included, so what the user sees is hydra's report
(``BAD TERMINATION ... RUNNING AT <host>``); nothing of the job stays on node
A. A Tune run that lost a node and is started again (as a requeued job is)
continues its trials from their checkpoints.
"""
from __future__ import annotations

import os
import subprocess
import uuid

import psutil
import pytest

from conftest import (LAUNCH_MARKER, SCRIPTS_DIR, _kill_launch, _launch_processes, launch_env,
                      poll_for, run_mpi)
from test_two_nodes import HOSTS, fake_hosts_command

pytestmark = [pytest.mark.mpi, pytest.mark.faults]

#: Seconds the job may take to end once node B is gone: generous for this
#: loaded 2-core machine; the job ends in under a second when it is idle.
END_TIMEOUT = 60


def node_processes(marker: str, host: str, with_proxy: bool) -> list[psutil.Process]:
    """The launch's ranks on ``host`` (hydra's ``PMI_HOSTNAME``), their executors
    and, ``with_proxy``, the hydra proxy that started them."""
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if env.get(LAUNCH_MARKER) != marker or env.get("PMI_HOSTNAME") != host:
                continue
            found[p.pid] = p
            for child in p.children(recursive=True):
                found[child.pid] = child
            if with_proxy:
                parent = p.parent()
                if parent is not None and "hydra_pmi_proxy" in " ".join(parent.cmdline()):
                    found[parent.pid] = parent
        except psutil.Error:
            continue
    return list(found.values())


class Launch:
    """One fake-hosts launch in its own session, as ``run_mpi`` runs it, that the
    test can act on while it runs."""

    def __init__(self, script: str, *args: str, tmp_path, timeout: float = 120,
                 env: dict | None = None):
        env = launch_env(4, "mpiexec", timeout,
                         {"HPC_RAY_TEST_TMPDIR": str(tmp_path), **(env or {})})
        self.marker = env[LAUNCH_MARKER] = uuid.uuid4().hex
        self.proc = subprocess.Popen(fake_hosts_command(script, *args), env=env,
                                     cwd=str(SCRIPTS_DIR), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)

    def lose_node(self, host: str, with_proxy: bool) -> list[int]:
        """SIGKILL every process of the launch on ``host``; their pids."""
        victims = node_processes(self.marker, host, with_proxy)
        for p in victims:
            try:
                p.kill()
            except psutil.Error:
                pass
        return [p.pid for p in victims]

    def topology_files(self) -> list[str]:
        """The files hydra's proxies of the launch have open in /tmp (their copy
        of the node's topology), as they were named."""
        paths = []
        for p in self.left():
            try:
                if "hydra_pmi_proxy" not in " ".join(p.cmdline()):
                    continue
                fd_dir = f"/proc/{p.pid}/fd"
                links = [os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)]
            except (psutil.Error, OSError):
                continue
            paths += [link.removesuffix(" (deleted)") for link in links
                      if link.startswith("/tmp/hydra_hwloc_xmlfile_")]
        return paths

    def wait(self, timeout: float) -> tuple[int, str, str]:
        """The launch's return code, stdout and stderr; fails if it outlives ``timeout``."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate(timeout=30)
            pytest.fail(f"the job did not end within {timeout}s of losing a node:\n"
                        f"--- stdout ---\n{out}\n--- stderr ---\n{err}", pytrace=False)
        return self.proc.returncode, out, err

    def left(self) -> list[psutil.Process]:
        return _launch_processes(self.proc.pid, self.marker)

    def kill(self) -> None:
        _kill_launch(self.proc.pid, self.marker)


@pytest.fixture
def launches():
    """Start ``Launch``es; whatever is left of them is killed at the end."""
    started: list[Launch] = []

    def start(script, *args, **kwargs):
        started.append(Launch(script, *args, **kwargs))
        return started[-1]

    yield start
    for launch in started:
        launch.kill()
        if launch.proc.poll() is None:
            launch.proc.communicate(timeout=30)


def started_tasks(tmp_path) -> list[list[str]]:
    """``[node id, rank, pid, rank pid]`` of every task of node_loss.py that started."""
    rows = []
    for path in tmp_path.glob("started-*"):
        words = path.read_text().split()
        if len(words) == 4:
            rows.append(words)
    return rows


@pytest.mark.parametrize("with_proxy", [False, True], ids=["ranks", "node"])
def test_losing_a_node_ends_the_job_and_leaves_nothing(launches, tmp_path, with_proxy):
    a, b = HOSTS
    launch = launches("node_loss.py", tmp_path=tmp_path)
    running_on_b = poll_for(
        lambda: [r for r in started_tasks(tmp_path) if r[0] == "node-1"], 90)
    assert running_on_b, started_tasks(tmp_path)
    topology = launch.topology_files()
    killed = launch.lose_node(b, with_proxy)
    # Two ranks and at least the executor running the task; the proxy too for a node.
    assert len(killed) >= 3 + with_proxy
    rc, out, err = launch.wait(END_TIMEOUT)
    assert rc != 0, out + err
    assert f'RESULT nodes=[["{a}", [0, 1]], ["{b}", [2, 3]]]' in out.splitlines()
    if not with_proxy:
        # Hydra names a process that died and its host: ray.nodes()'s name of B.
        assert "BAD TERMINATION" in out and f"RUNNING AT {b}" in out, out + err
    # Nothing of the job is left on node A (nor B): no process, no hydra topology
    # file (a proxy that ends on its error path leaves its own), and no /dev/shm
    # entry (the no_leftovers fixture checks those).
    assert poll_for(lambda: not launch.left(), 15), launch.left()
    assert topology and not [path for path in topology if os.path.exists(path)]


def ledger_rows(path) -> list[list[str]]:
    """tune_resume.py's ledger: ``[phase, trial, iteration, restored from, node id]``."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_a_tune_run_that_lost_a_node_resumes_from_its_checkpoints(launches, tmp_path):
    """tune_resume.py: six trials of eight iterations, a checkpoint every two, on
    three worker ranks over two nodes. Node B is lost once a trial there is past
    its first checkpoint; the same script started again (as a requeued job is)
    finishes every trial, each continuing from its last checkpoint."""
    ledger = tmp_path / "ledger"
    launch = launches("tune_resume.py", "first", tmp_path=tmp_path,
                      env={"TUNE_TEST_SLEEP": "0.3"})

    def past_a_checkpoint_on_b():
        return [r for r in ledger_rows(ledger) if r[4] == "node-1" and int(r[2]) >= 3]

    assert poll_for(past_a_checkpoint_on_b, 90), ledger_rows(ledger)
    launch.lose_node(HOSTS[1], with_proxy=True)
    rc, out, err = launch.wait(END_TIMEOUT)
    assert rc != 0, out + err
    first = [r for r in ledger_rows(ledger) if r[0] == "first"]
    assert {r[4] for r in first} == {"node-0", "node-1"}      # trials ran on both nodes

    result = run_mpi("tune_resume.py", 4, "resume",
                     cmd=fake_hosts_command("tune_resume.py", "resume"), timeout=120,
                     env={"HPC_RAY_TEST_TMPDIR": str(tmp_path), "TUNE_TEST_SLEEP": "0.05"})
    summary = result.assert_ok("tune_resume")["summary"]
    # Every trial ran its eight iterations once in all (the script checks each
    # trial's result.json holds iterations 1..8 once); those cut short continued
    # after their last checkpoint: 2, 4 or 6, never from scratch once past 2.
    lost_on_b = {r[1] for r in first if r[4] == "node-1"}
    assert lost_on_b
    for k, s in summary.items():
        if s["first"] == 8:
            assert s["second"] == [], (k, s)
            continue
        start = s["restored_from"][0] if s["second"] else None
        assert s["second"] == list(range(start + 1, 9)), (k, s)
        assert start in (s["first"] - s["first"] % 2, max(s["first"] - s["first"] % 2 - 2, 0))
    ran_past_a_checkpoint = [k for k, s in summary.items() if s["first"] >= 3 and s["first"] < 8
                             and k in lost_on_b]
    assert ran_past_a_checkpoint, summary
    assert all(summary[k]["restored_from"][0] >= 2 for k in ran_past_a_checkpoint), summary
