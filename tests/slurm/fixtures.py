"""pytest fixtures and helpers for tests that run jobs on a real Slurm.

``slurm_cluster`` (session) starts a one-node cluster with ``cluster.py`` and
stops it at the end; ``slurm_two_nodes`` (session) a second one whose nodes n1 and
n2 are two slurmd on this host. A reaper stops either if pytest dies first
(``kill -9`` included). Where Slurm cannot start, the tests are skipped with the
reason, except under ``CI=true``, where they fail.  ``job_dir`` (per test) is a scratch directory
inside the cluster's state directory; every job still queued when the test ends
is cancelled.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import cluster as _cluster

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver_squares.py")
JOB_TIMEOUT = 90.0


def _skip_or_fail(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the Slurm tests must run under CI=true, but: {why}", pytrace=False)
    pytest.skip(f"no test Slurm cluster: {why}")


def _started_cluster(nodes: int = 1):
    why = _cluster.missing_requirements()
    if why:
        _skip_or_fail(why)
    c = _cluster.Cluster(nodes=nodes)
    try:
        # The reaper stops the daemons if this pytest dies before the finally.
        c.start(watch_pid=os.getpid())
    except (_cluster.ClusterError, OSError, subprocess.SubprocessError) as exc:
        _skip_or_fail(f"could not start it: {exc}")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def slurm_cluster():
    yield from _started_cluster()


@pytest.fixture(scope="session")
def slurm_two_nodes():
    """A second cluster: nodes n1 and n2 on this host, a ``slurmd -N`` each."""
    yield from _started_cluster(nodes=2)


@pytest.fixture
def two_node_job_dir(slurm_two_nodes, request):
    yield from _job_dir_of(slurm_two_nodes, request)


@pytest.fixture
def job_dir(slurm_cluster, request):
    yield from _job_dir_of(slurm_cluster, request)


def _job_dir_of(c: _cluster.Cluster, request):
    name = re.sub(r"[^\w.-]+", "_", request.node.name)[:80]
    path = c.jobs / name
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    finally:
        c.cancel_all_jobs()
        shutil.rmtree(path, ignore_errors=True)


def job_env(c: _cluster.Cluster, **extra: str) -> dict[str, str]:
    """The environment of a user on this cluster: its SLURM_CONF, and this Python first on PATH."""
    env = c.env()
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(extra)
    return env


def run(argv: list[str], *, env: dict[str, str], cwd: Path | str,
        timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run a command; on timeout kill its whole session and fail with its output."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(map(str, argv))} timed out after {timeout}s; output so far:\n"
                    f"{out}\n{err}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def hpc_ray_cli(*args: str, env: dict[str, str], cwd: Path | str,
                timeout: float = JOB_TIMEOUT) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "hpc_ray.cli", *args], env=env, cwd=cwd,
               timeout=timeout)


def sbatch(c: _cluster.Cluster, *args: str, cwd: Path, env: dict[str, str] | None = None
           ) -> str:
    """Submit with the real sbatch; return the job id."""
    proc = run(["sbatch", "--parsable", *args], env=env or job_env(c), cwd=cwd, timeout=30)
    assert proc.returncode == 0, f"sbatch {' '.join(args)} failed:\n{proc.stderr}"
    return proc.stdout.strip().split(";")[0]


def show_job(c: _cluster.Cluster, job_id: str) -> list[dict[str, str]]:
    """``scontrol -o show job`` as dicts (one per array task), parsed independently of hpc_ray."""
    out = c.run("scontrol", "-o", "show", "job", job_id).stdout
    records = []
    for line in out.splitlines():
        fields = re.split(r" (?=[A-Za-z][\w/:]*=)", line.strip())
        records.append(dict(f.split("=", 1) for f in fields if "=" in f))
    return records


FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def poll_for(pred, timeout: float, what: str, on_timeout=lambda: ""):
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout}s\n{on_timeout()}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def wait_job(c: _cluster.Cluster, job_id: str, timeout: float = JOB_TIMEOUT,
             output: Path | None = None) -> list[dict[str, str]]:
    """Wait until every record of the job is in a final state; return the records."""
    def done():
        records = show_job(c, job_id)
        return records if all(r.get("JobState") in FINAL for r in records) else None

    def explain():
        return _why_job_is_stuck(c, job_id, output)
    return poll_for(done, timeout, f"job {job_id} ending", explain)


def _tail(path: Path, lines: int = 25) -> str:
    if not path.exists():
        return f"({path} does not exist)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty)"


def _stacks_of(pid: str) -> str:
    """A stuck process: its Slurm task id and, where gdb is installed, its native
    stacks (mpi4py finalizes MPI after the interpreter is gone, so a Python-level
    dump misses a hang in MPI_Finalize)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        procid = next((e.decode() for e in env if e.startswith(b"SLURM_PROCID=")), "-")
    except OSError:
        procid = "?"
    text = f"process {pid} (SLURM_PROCID {procid}):"
    if shutil.which("gdb"):
        try:
            bt = subprocess.run(["gdb", "-batch", "-p", pid, "-ex", "thread apply all bt 25"],
                                capture_output=True, text=True, timeout=60).stdout
        except subprocess.TimeoutExpired:
            bt = "(gdb timed out)"
        text += "\n" + "\n".join(l for l in bt.splitlines() if l.startswith(("#", "Thread", "(")))
    return text


def _why_job_is_stuck(c: _cluster.Cluster, job_id: str, output: Path | None) -> str:
    """Everything a person needs to see why a job did not end: its records, the
    stacks of its Python processes, its output file, its steps, its processes and
    the daemons' last log lines."""
    records = show_job(c, job_id)
    outputs = {output} if output else {Path(r["StdOut"]) for r in records if r.get("StdOut")}
    steps = c.run("scontrol", "-o", "show", "step", job_id, check=False)
    procs = subprocess.run(["ps", "-eo", "pid,ppid,stat,etime,args", "--forest"],
                           capture_output=True, text=True).stdout
    procs = "\n".join(l for l in procs.splitlines()
                      if "slurmstepd" in l or "python" in l or "srun" in l or "mpiexec" in l
                      or "hydra" in l)
    parts = [f"job records: {records}"]
    for line in procs.splitlines():
        pid = line.split()[0]
        if "python" in line and "pytest" not in line and pid.isdigit():
            parts.append(_stacks_of(pid))
    parts += [f"output {p}:\n{_tail(p, 60)}" for p in outputs]
    parts.append(f"steps:\n{steps.stdout}{steps.stderr}")
    parts.append(f"processes:\n{procs}")
    for log in ("slurmctld.log", "slurmd.log"):
        parts.append(f"{log}:\n{_tail(c.state / 'log' / log)}")
    return "\n".join(parts)


def result_of(text: str) -> dict:
    """The driver's ``RESULT {json}`` line from a job's output."""
    lines = [l for l in text.splitlines() if l.startswith("RESULT ")]
    assert len(lines) == 1, f"expected one RESULT line in the output:\n{text}"
    return json.loads(lines[0][len("RESULT "):])


def assert_squares_result(result: dict, job_id: str, c: _cluster.Cluster,
                          argv: list[str]) -> None:
    """What a user sees from a 3-rank driver_squares run inside Slurm job ``job_id``."""
    assert result["squares"] == [i * i for i in range(10)]
    assert result["world_size"] == 3
    assert result["slurm_job_id"] == job_id
    assert result["job_id"] == job_id
    assert result["session_name"] == f"hpc_ray-{job_id}"
    assert result["argv"] == argv
    assert result["nodes"] == [c.node]
