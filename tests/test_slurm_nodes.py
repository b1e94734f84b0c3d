"""Two Slurm nodes on this host (n1 and n2, a ``slurmd -N`` each), used as a user
would: ``sbatch -N 2`` with ``srun``, ``salloc`` with ``mpiexec``, and
``hpc-ray submit --nodes 2 --wait``, two ranks on each node. Each runs
``mpi_scripts/two_nodes.py``: tasks and actors on both nodes, one store per node,
a 50 MB object moved once over MPI each way. Also: the daemons do not outlive
a pytest that is killed mid-run.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurm import cluster as _cluster
from slurm.fixtures import (hpc_ray_cli, job_env, poll_for, run, sbatch, slurm_two_nodes,
                            two_node_job_dir, wait_job)
from test_two_nodes import assert_trained_on_two_nodes, assert_two_nodes
from conftest import MPIResult, SCRIPTS_DIR

__all__ = ["slurm_two_nodes", "two_node_job_dir"]  # fixtures, imported to be found by pytest

SCRIPT = SCRIPTS_DIR / "two_nodes.py"
PY = sys.executable
MPIEXEC = Path(PY).with_name("mpiexec")


def results_of(text: str, name: str = "two_nodes") -> dict:
    return MPIResult([], 0, text, "", 0.0).assert_ok(name)


@pytest.mark.timeout(120)
def test_sbatch_two_nodes_with_srun(slurm_two_nodes, two_node_job_dir):
    c = slurm_two_nodes
    script = two_node_job_dir / "two_nodes.sbatch"
    script.write_text(f"#!/bin/bash\nsrun --mpi=pmi2 {PY} {SCRIPT}\n")
    out = two_node_job_dir / "out.txt"
    job = sbatch(c, "-N", "2", "--ntasks-per-node=2", "-o", str(out), str(script),
                 cwd=two_node_job_dir)
    (record,) = wait_job(c, job, output=out)
    assert record["JobState"] == "COMPLETED", out.read_text()
    assert record["NodeList"] == "n[1-2]"
    assert_two_nodes(results_of(out.read_text()), ["n1", "n2"])


@pytest.mark.timeout(240)
def test_sgd_and_tune_over_two_slurm_nodes(slurm_two_nodes, two_node_job_dir):
    c = slurm_two_nodes
    script = two_node_job_dir / "train.sbatch"
    script.write_text(f"#!/bin/bash\nsrun --mpi=pmi2 {PY} {SCRIPTS_DIR / 'train_two_nodes.py'}\n")
    out = two_node_job_dir / "out.txt"
    job = sbatch(c, "-N", "2", "--ntasks-per-node=2", "-o", str(out), str(script),
                 cwd=two_node_job_dir,
                 env=job_env(c, HPC_RAY_TEST_TMPDIR=str(two_node_job_dir)))
    (record,) = wait_job(c, job, output=out, timeout=200)
    assert record["JobState"] == "COMPLETED", out.read_text()
    assert_trained_on_two_nodes(results_of(out.read_text(), "train_two_nodes"))


@pytest.mark.timeout(120)
def test_salloc_two_nodes_with_mpiexec(slurm_two_nodes, two_node_job_dir):
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec beside {PY}")
    proc = run(["salloc", "-N", "2", "--ntasks-per-node=2", str(MPIEXEC), "-launcher", "slurm",
                "-n", "4", PY, str(SCRIPT)],
               env=job_env(slurm_two_nodes), cwd=two_node_job_dir, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_two_nodes(results_of(proc.stdout), ["n1", "n2"])


@pytest.mark.timeout(120)
def test_submit_two_nodes_and_wait(slurm_two_nodes, two_node_job_dir):
    proc = hpc_ray_cli("submit", str(SCRIPT), "--nodes", "2", "--ntasks-per-node", "2",
                       "--wait", env=job_env(slurm_two_nodes), cwd=two_node_job_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_two_nodes(results_of(proc.stdout), ["n1", "n2"])


HOLDING_TEST = '''
import os, time
from pathlib import Path
from slurm.fixtures import slurm_two_nodes

def test_hold(slurm_two_nodes):
    Path(os.environ["HPC_RAY_TEST_STATE_FILE"]).write_text(str(slurm_two_nodes.state))
    time.sleep(300)
'''


@pytest.mark.timeout(120)
def test_daemons_end_with_a_killed_pytest(tmp_path):
    why = _cluster.missing_requirements()
    if why:
        pytest.skip(why)
    (tmp_path / "test_hold.py").write_text(HOLDING_TEST)
    state_file = tmp_path / "state"
    env = dict(os.environ, HPC_RAY_TEST_STATE_FILE=str(state_file),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent),
                                           os.environ.get("PYTHONPATH", "")]))
    pytest_run = subprocess.Popen(
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
         "--rootdir", str(tmp_path), str(tmp_path / "test_hold.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        poll_for(lambda: state_file.exists() or pytest_run.poll() is not None, 60,
                 "the inner pytest's cluster starting")
        assert state_file.exists(), pytest_run.communicate()[0].decode()
        state = Path(state_file.read_text())
        pidfiles = [*state.glob("slurmd-n*.pid"), state / "slurmctld.pid",
                    state / "munge" / "munged.pid"]
        pids = [_cluster._read_pid(p) for p in pidfiles]
        assert len(pids) == 4 and all(pids) and all(map(_cluster._pid_alive, pids))
    finally:
        os.killpg(pytest_run.pid, signal.SIGKILL)
        pytest_run.communicate()
    poll_for(lambda: not any(map(_cluster._pid_alive, pids)) and not state.exists(), 60,
             "munged, slurmctld and both slurmd ending after pytest was killed")


@pytest.mark.timeout(120)
def test_gres_gpus_are_each_nodes_pool(slurm_two_nodes, two_node_job_dir):
    """``--gres=gpu:2`` on each node: the ranks of n2 hold one id each, and a
    ``num_gpus=2`` task still runs there, as on a node of Ray's."""
    c = slurm_two_nodes
    script = two_node_job_dir / "node_gpus.sbatch"
    script.write_text(f"#!/bin/bash\nsrun --mpi=pmi2 {PY} {SCRIPTS_DIR / 'node_gpus.py'}\n")
    out = two_node_job_dir / "out.txt"
    job = sbatch(c, "-N", "2", "--ntasks-per-node=2", "--gres=gpu:2", "-o", str(out),
                 str(script), cwd=two_node_job_dir)
    (record,) = wait_job(c, job, output=out)
    assert record["JobState"] == "COMPLETED", out.read_text()
    res = MPIResult([], 0, out.read_text(), "", 0.0).assert_ok("node_gpus")
    assert res["gpus"] == 4
    assert res["two_gpu_tasks"] == [[0, 1], [0, 1]]
    assert len(set(res["stores"])) == 2
