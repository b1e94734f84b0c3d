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
from slurm.fixtures import poll_for

PY = sys.executable

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
