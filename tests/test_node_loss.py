"""Losing one node of two: every process of node B is SIGKILLed (as a node
failure would) while the driver on node A waits in ``ray.get`` on tasks there.

Two fake hosts through MPICH hydra (``test_two_nodes.fake_hosts_command``):
node B's ranks, their executors and, for a whole node, the hydra proxy that
started them. Hydra's default (auto-cleanup) ends the job at once: it SIGKILLs
every other rank, the driver included, so what the user sees is hydra's report
(``BAD TERMINATION ... RUNNING AT <host>``). Where the launcher lets the job
run on (``mpiexec -disable-auto-cleanup``; Slurm, whose step waits for
slurmctld to declare the node down), rank 0's ``node_watch`` finds the node
silent, names it and its ranks on stderr and aborts the job. Either way
nothing of the job stays on node A, and a Tune run that lost a node and is
started again (as a requeued job is) continues its trials from their
checkpoints. The two-node Slurm (n1, n2) runs the same through ``hpc-ray
submit``.
"""
from __future__ import annotations

import os
import subprocess
import time
import uuid

import psutil
import pytest

from conftest import (LAUNCH_MARKER, SCRIPTS_DIR, MPIResult, _kill_launch, _launch_processes,
                      launch_env, poll_for, run_mpi)
from slurm.fixtures import hpc_ray_cli, job_env, slurm_two_nodes, two_node_job_dir, wait_job
from test_two_nodes import HOSTS, fake_hosts_command

__all__ = ["slurm_two_nodes", "two_node_job_dir"]  # fixtures, imported to be found by pytest

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
    test can act on while it runs. Once it ended, ``report()`` is what it printed
    and how it ended, for the tests' failure messages."""

    def __init__(self, script: str, *args: str, tmp_path, timeout: float = 120,
                 env: dict | None = None, launcher_flags: tuple[str, ...] = ()):
        env = launch_env(4, "mpiexec", timeout,
                         {"HPC_RAY_TEST_TMPDIR": str(tmp_path), **(env or {})})
        self.marker = env[LAUNCH_MARKER] = uuid.uuid4().hex
        cmd = fake_hosts_command(script, *args)
        # Each rank's exit status on stdout, where mpiexec ends normally (not on
        # an MPI_Abort, where it exits with the abort's code at once).
        cmd[1:1] = ("-print-all-exitcodes", *launcher_flags)
        self.lost_at: float | None = None
        self.ended_at: float | None = None
        self.out = self.err = ""
        self.proc = subprocess.Popen(cmd, env=env,
                                     cwd=str(SCRIPTS_DIR), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)

    def lose_node(self, host: str, with_proxy: bool) -> list[int]:
        """SIGKILL every process of the launch on ``host``; their pids."""
        victims = node_processes(self.marker, host, with_proxy)
        self.lost_at = time.monotonic()
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
            self.out, self.err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.out, self.err = self.proc.communicate(timeout=30)
            pytest.fail(f"the job did not end within {timeout}s of losing a node\n"
                        f"{self.report()}", pytrace=False)
        self.ended_at = time.monotonic()
        return self.proc.returncode, self.out, self.err

    def report(self) -> str:
        """mpiexec's exit code, when the job ended after the loss, and all it printed."""
        took = ("" if self.lost_at is None or self.ended_at is None
                else f", {self.ended_at - self.lost_at:.1f} s after the node was lost")
        return (f"mpiexec exited with {self.proc.returncode}{took}\n"
                f"--- stdout ---\n{self.out}\n--- stderr ---\n{self.err}")

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


@pytest.mark.mpi
@pytest.mark.faults
@pytest.mark.timeout(200)
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
    assert rc != 0, launch.report()
    assert f'RESULT nodes=[["{a}", [0, 1]], ["{b}", [2, 3]]]' in out.splitlines(), launch.report()
    if not with_proxy:
        # Hydra names a process that died and its host: ray.nodes()'s name of B.
        assert "BAD TERMINATION" in out and f"RUNNING AT {b}" in out, launch.report()
    # Nothing of the job is left on node A (nor B): no process, no hydra topology
    # file (a proxy that ends on its error path leaves its own), and no /dev/shm
    # entry (the no_leftovers fixture checks those).
    assert poll_for(lambda: not launch.left(), 15), launch.left()
    assert topology and not [path for path in topology if os.path.exists(path)]


def ledger_rows(path) -> list[list[str]]:
    """tune_resume.py's ledger: ``[phase, trial, iteration, restored from, node id]``."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.mpi
@pytest.mark.faults
@pytest.mark.timeout(300)
@pytest.mark.parametrize("flags", [(), ("-disable-auto-cleanup",)],
                         ids=["hydra-ends-it", "rank-0-ends-it"])
def test_a_tune_run_that_lost_a_node_resumes_from_its_checkpoints(launches, tmp_path, flags):
    """tune_resume.py: six trials of eight iterations, a checkpoint every two, on
    three worker ranks over two nodes. Node B is lost once a trial there is past
    its first checkpoint, and the job ends (hydra kills it; or, where the
    launcher lets it run on, rank 0 finds B silent and aborts it). The same
    script started again (as a requeued job is) finishes every trial, each
    continuing from its last checkpoint."""
    ledger = tmp_path / "ledger"
    launch = launches("tune_resume.py", "first", tmp_path=tmp_path, launcher_flags=flags,
                      env={"TUNE_TEST_SLEEP": "0.3", "HPC_RAY_NODE_TIMEOUT": "3"})

    def past_a_checkpoint_on_b():
        return [r for r in ledger_rows(ledger) if r[4] == "node-1" and int(r[2]) >= 3]

    assert poll_for(past_a_checkpoint_on_b, 90), ledger_rows(ledger)
    launch.lose_node(HOSTS[1], with_proxy=not flags)
    rc, out, err = launch.wait(END_TIMEOUT)
    assert rc != 0, launch.report()
    if flags:
        assert "hpc_ray: lost node 127.0.0.3 (ranks 2, 3)" in err, launch.report()
    first = [r for r in ledger_rows(ledger) if r[0] == "first"]
    assert {r[4] for r in first} == {"node-0", "node-1"}      # trials ran on both nodes

    result = run_mpi("tune_resume.py", 4, "resume",
                     cmd=fake_hosts_command("tune_resume.py", "resume"), timeout=120,
                     env={"HPC_RAY_TEST_TMPDIR": str(tmp_path), "TUNE_TEST_SLEEP": "0.05"})
    assert_resumed_from_checkpoints(result.assert_ok("tune_resume")["summary"], first,
                                    "node-1")


def assert_resumed_from_checkpoints(summary: dict, first: list[list[str]], lost: str) -> None:
    """tune_resume.py's summary after a rerun: every trial ran its eight iterations
    once in all (the script checks each trial's result.json holds iterations 1..8
    once); those cut short continued after their last checkpoint (the one of
    their last even iteration, or the one before if the end came between the
    actor taking it and the driver storing it; where rank 0 ended the job, the
    runner may have checkpointed a trial alive on the other node where it
    stood), and those of node ``lost`` that were past a checkpoint did not start
    from scratch."""
    on_lost = {r[1] for r in first if r[4] == lost}
    assert on_lost, first
    for k, s in summary.items():
        if s["first"] == 8:
            assert s["second"] == [], (k, s)
            continue
        start = s["restored_from"][0]
        assert s["second"] == list(range(start + 1, 9)), (k, s)
        last = s["first"] - s["first"] % 2
        allowed = {last, max(last - 2, 0)}
        if k not in on_lost:
            allowed.add(s["first"])     # checkpointed where it stood as the job ended
        assert start in allowed, (k, s)
    past_a_checkpoint = [k for k, s in summary.items() if 3 <= s["first"] < 8 and k in on_lost]
    assert past_a_checkpoint, summary
    assert all(summary[k]["restored_from"][0] >= 2 for k in past_a_checkpoint), summary


@pytest.mark.mpi
@pytest.mark.faults
@pytest.mark.timeout(200)
def test_a_lost_node_is_named_where_the_launcher_lets_the_job_run_on(launches, tmp_path):
    """Under ``mpiexec -disable-auto-cleanup`` (as under Slurm, where the job
    waits for slurmctld to declare the node down), MPI tells the survivors
    nothing when node B's ranks die (hydra only sends the survivors SIGUSR1,
    which the driver takes for a preemption warning and the worker ranks
    ignore): rank 0 finds node B silent, names it and its ranks and aborts the
    job. The name must reach mpiexec's stderr before the abort ends mpiexec
    (``launch.abort_job``). (Should B's hydra proxy die too, mpiexec ends
    the job at once, flag or not; and B's proxy takes B's other ranks with it
    when one dies, so one rank lost alone cannot be made here: that case is
    ``NodeWatch``'s test without MPI, and srun's ``--kill-on-bad-exit`` on Slurm.)"""
    b = HOSTS[1]
    launch = launches("node_loss.py", tmp_path=tmp_path, env={"HPC_RAY_NODE_TIMEOUT": "3"},
                      launcher_flags=("-disable-auto-cleanup",))
    assert poll_for(lambda: [r for r in started_tasks(tmp_path) if r[0] == "node-1"], 90), \
        started_tasks(tmp_path)
    topology = launch.topology_files()
    launch.lose_node(b, with_proxy=False)
    rc, out, err = launch.wait(END_TIMEOUT)
    assert rc == 1, launch.report()       # rank 0's MPI_Abort(1)
    said = (f"hpc_ray: lost node {b} (ranks 2, 3): none of its ranks was heard from for 3 s "
            f"(the node failed, or its processes were killed); ending the job.")
    assert said in err, launch.report()
    assert "RESULT error=" not in out, launch.report()    # no get raised: the job was aborted
    assert poll_for(lambda: not launch.left(), 15), launch.left()
    assert topology and not [path for path in topology if os.path.exists(path)]


# --- the watch itself, without MPI ---------------------------------------------------


def test_node_watch_names_the_first_node_none_of_whose_ranks_is_heard():
    from hpc_ray.runtime import node_watch
    hosts = ["a", "a", "b", "b", "c"]
    watch = node_watch.NodeWatch([0, 0, 1, 1, 2], hosts, now=100.0)
    assert watch.ranks == {1: [2, 3], 2: [4]}            # rank 0's node is not watched
    timeout = node_watch.NODE_TIMEOUT

    def lost_at(t):     # checked a second before, as rank 0's loop does
        watch.checked = t - 1.0
        return watch.lost(t)

    assert lost_at(100.0 + timeout) is None
    watch.heard[2] = watch.heard[4] = 100.0 + timeout      # b's rank 2 and c still talk
    assert lost_at(100.0 + timeout + 1) == (1, [3])        # b's rank 3 does not
    assert watch.describe(1, [3]).startswith(
        f"hpc_ray: lost rank 3 on node b: not heard from for {timeout:g} s")
    watch.heard[3] = 100.0 + timeout + 0.5                  # b fails: silent within a beat
    assert lost_at(100.0 + 2 * timeout + 1) == (1, [2, 3])
    assert watch.describe(1, [2, 3]).startswith(
        f"hpc_ray: lost node b (ranks 2, 3): none of its ranks was heard from for "
        f"{timeout:g} s")


def test_node_watch_does_not_blame_a_rank_busy_in_an_in_rank_actors_method():
    from hpc_ray.runtime import node_watch
    watch = node_watch.NodeWatch([0, 1, 1], ["a", "b", "b"], now=100.0)
    late = 100.0 + node_watch.NODE_TIMEOUT + 1
    watch.checked = late - 1.0
    # Rank 1's loop runs a long method of its in-rank actor (no ALIVE meanwhile),
    # rank 2 is silent too: only rank 2 is named.
    assert watch.lost(late, busy={1}) == (1, [2])
    watch.heard[2] = late
    watch.checked = late
    assert watch.lost(late + 1, busy={1}) is None


def test_node_watch_does_not_blame_the_nodes_for_rank_0s_own_stall():
    from hpc_ray.runtime import node_watch
    watch = node_watch.NodeWatch([0, 1], ["a", "b"], now=100.0)
    # Rank 0's loop did not look for longer than the timeout: node b's ALIVEs
    # of that time still wait unread, and its silence counts from now.
    late = 100.0 + node_watch.NODE_TIMEOUT + node_watch.STALL + 1
    assert watch.lost(late) is None
    watch.checked = late + node_watch.NODE_TIMEOUT      # looked every second since
    assert watch.lost(late + node_watch.NODE_TIMEOUT + 1) == (1, [1])


@pytest.mark.parametrize("cfg, node_of, watched", [
    ({"one_host": False}, [0, 0, 1, 1], True),
    ({"one_host": True}, [0, 0, 1, 1], False),     # HPC_RAY_RANKS_PER_NODE's pretend nodes
    ({"one_host": False}, [0, 0, 0], False),
])
def test_only_jobs_over_several_hosts_are_watched(cfg, node_of, watched):
    from hpc_ray.runtime import node_watch
    watch = node_watch.for_job(cfg, node_of, ["h"] * len(node_of))
    assert (watch is not None) == watched


def test_spawned_watch_finds_a_killed_rank_once_and_names_its_pid():
    """Embedded mode's watch, over two plain processes: a killed one (a zombie
    until its parent reaps it, as a rank under its launcher) is found at the next
    check and named with its pid; ranks found later are counted, not announced."""
    import sys
    from hpc_ray.runtime import node_watch
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
             for _ in range(2)]
    try:
        watch = node_watch.SpawnedWatch({1: procs[0].pid, 2: procs[1].pid})
        assert not watch.check() and watch.why is None and watch.lost == []
        procs[1].kill()
        assert poll_for(lambda: psutil.Process(procs[1].pid).status() == psutil.STATUS_ZOMBIE,
                        10)
        assert watch.check() and watch.lost == [2]
        assert f"worker rank 2 (pid {procs[1].pid}) of this embedded session died" in watch.why
        procs[0].kill()
        procs[0].wait()
        assert not watch.check() and watch.lost == [2, 1]
        assert f"pid {procs[0].pid}" not in watch.why
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert node_watch.spawned_watch({"embedded": False}, {1: 1}) is None


# --- two Slurm nodes -----------------------------------------------------------------


def lose_slurm_node(node: str, job_dir) -> None:
    """SIGKILL the processes of a job (the one whose HPC_RAY_TEST_TMPDIR is
    ``job_dir``) on Slurm node ``node``, and the slurmstepd that started them."""
    victims: dict[int, psutil.Process] = {}
    for p in psutil.process_iter():
        env = _environ(p)
        if env.get("SLURMD_NODENAME") != node or env.get("HPC_RAY_TEST_TMPDIR") != str(job_dir):
            continue
        victims[p.pid] = p
        try:
            parent = p.parent()
            if parent is not None and "slurmstepd" in " ".join(parent.cmdline()):
                victims[parent.pid] = parent
        except psutil.Error:
            pass
    assert any("slurmstepd" in _cmdline(q) for q in victims.values()), victims
    for q in victims.values():
        try:
            q.kill()
        except psutil.Error:
            pass


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def slurm_test_env(c, job_dir, **extra: str) -> dict:
    return job_env(c, **{"HPC_RAY_TEST_TMPDIR": str(job_dir), "HPC_RAY_NODE_TIMEOUT": "3",
                         "PYTHONPATH": os.pathsep.join([str(SCRIPTS_DIR.parents[1]),
                                                        str(SCRIPTS_DIR)]), **extra})



@pytest.mark.faults
@pytest.mark.timeout(240)
def test_a_submitted_job_losing_node_n2_ends_naming_it(slurm_two_nodes, two_node_job_dir):
    """``hpc-ray submit --nodes 2``: node n2's ranks, their executors and the
    slurmstepd that started them are SIGKILLed while the driver on n1 waits on
    tasks there. Slurm reports nothing to the step (it would wait for slurmctld
    to declare n2 down, SlurmdTimeout); rank 0 finds n2 silent, names it and
    its ranks, and the job ends."""
    c = slurm_two_nodes
    d = two_node_job_dir
    out = d / "out.txt"
    env = slurm_test_env(c, d)
    proc = hpc_ray_cli("submit", str(SCRIPTS_DIR / "node_loss.py"), "--nodes", "2",
                       "--ntasks-per-node", "2", "--output", str(out), "--parsable",
                       env=env, cwd=d)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = proc.stdout.split()[-1]
    running_on_n2 = poll_for(lambda: [r for r in started_tasks(d) if r[0] == "node-1"], 120)
    assert running_on_n2, (started_tasks(d), out.read_text() if out.exists() else "")
    lose_slurm_node("n2", d)
    (record,) = wait_job(c, job, timeout=END_TIMEOUT, output=out)
    text = out.read_text()
    assert record["JobState"] == "FAILED", text
    assert 'RESULT nodes=[["n1", [0, 1]], ["n2", [2, 3]]]' in text.splitlines()
    assert ("hpc_ray: lost node n2 (ranks 2, 3): none of its ranks was heard from for 3 s "
            "(the node failed, or its processes were killed); ending the job.") in text, text
    assert "RESULT error=" not in text

    def left_on_n1():
        return [p for p in psutil.process_iter()
                if _environ(p).get("SLURMD_NODENAME") == "n1" and
                _environ(p).get("HPC_RAY_TEST_TMPDIR") == str(d)]
    assert poll_for(lambda: not left_on_n1(), 15), left_on_n1()


def _environ(p: psutil.Process) -> dict:
    try:
        return p.environ()
    except psutil.Error:
        return {}


@pytest.mark.faults
@pytest.mark.timeout(300)
def test_a_submitted_tune_job_that_lost_n2_resumes_when_run_again(slurm_two_nodes,
                                                                  two_node_job_dir):
    """tune_resume.py submitted with ``hpc-ray submit --nodes 2`` loses n2 once a
    trial there is past its first checkpoint; rank 0 ends the job, naming n2.
    Submitted again, it finishes every trial from its checkpoints."""
    c = slurm_two_nodes
    d = two_node_job_dir
    script = str(SCRIPTS_DIR / "tune_resume.py")
    ledger = d / "ledger"
    out = d / "first.txt"
    proc = hpc_ray_cli("submit", "--nodes", "2", "--ntasks-per-node", "2", "--output",
                       str(out), "--parsable", script, "first",
                       env=slurm_test_env(c, d, TUNE_TEST_SLEEP="0.3"), cwd=d)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = proc.stdout.split()[-1]
    assert poll_for(lambda: [r for r in ledger_rows(ledger)
                             if r[4] == "node-1" and int(r[2]) >= 3], 120), ledger_rows(ledger)
    lose_slurm_node("n2", d)
    (record,) = wait_job(c, job, timeout=END_TIMEOUT, output=out)
    assert record["JobState"] == "FAILED", out.read_text()
    assert "hpc_ray: lost node n2 (ranks 2, 3)" in out.read_text()
    first = [r for r in ledger_rows(ledger) if r[0] == "first"]
    assert {r[4] for r in first} == {"node-0", "node-1"}

    proc = hpc_ray_cli("submit", "--nodes", "2", "--ntasks-per-node", "2", "--wait",
                       script, "resume", env=slurm_test_env(c, d, TUNE_TEST_SLEEP="0.05"),
                       cwd=d)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = MPIResult([], 0, proc.stdout, proc.stderr, 0.0).assert_ok("tune_resume")["summary"]
    assert_resumed_from_checkpoints(summary, first, "node-1")


@pytest.mark.faults
@pytest.mark.timeout(240)
def test_a_submitted_job_losing_one_rank_ends_at_once_naming_it(slurm_two_nodes,
                                                                two_node_job_dir):
    """One rank of n2 SIGKILLed alone (as the OOM killer does), its slurmstepd
    alive: srun (``--kill-on-bad-exit=1`` in the ``hpc-ray submit`` script)
    ends the step and names the node and the task, which is the rank."""
    c = slurm_two_nodes
    d = two_node_job_dir
    out = d / "out.txt"
    proc = hpc_ray_cli("submit", "--nodes", "2", "--ntasks-per-node", "2", "--output",
                       str(out), "--parsable", str(SCRIPTS_DIR / "node_loss.py"),
                       env=slurm_test_env(c, d, HPC_RAY_NODE_TIMEOUT="600"), cwd=d)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = proc.stdout.split()[-1]
    assert poll_for(lambda: [r for r in started_tasks(d) if r[0] == "node-1"], 120), \
        started_tasks(d)
    rank_3 = [p for p in psutil.process_iter()
              if _environ(p).get("HPC_RAY_TEST_TMPDIR") == str(d)
              and _environ(p).get("SLURM_PROCID") == "3"]
    assert rank_3
    for p in rank_3:
        p.kill()
    (record,) = wait_job(c, job, timeout=END_TIMEOUT, output=out)
    text = out.read_text()
    assert record["JobState"] == "FAILED", text
    assert "srun: error: n2: task 3: Killed" in text, text
    assert "hpc_ray: lost" not in text        # (the node watch had 600 s to go)
