"""Two Slurm nodes on this host (n1 and n2, a ``slurmd -N`` each), used as a user
would: ``sbatch -N 2`` with ``srun``, ``salloc`` with ``mpiexec``, and
``hpc-ray submit --nodes 2 --wait``, two ranks on each node. Each runs
``mpi_scripts/two_nodes.py``: tasks and actors on both nodes, one store per node,
a 50 MB object moved once over MPI each way. Also: the daemons do not outlive
a pytest that is killed mid-run.

Issue 38's features on n1 and n2, as on the fake hosts: collectives of a group
spanning both nodes (mpi_scripts/collective_nodes.py: one member per worker
rank, HPC_RAY_TEST_NUM_WORKERS, which the jobs must set or it makes two),
set_resource on a chosen node, what actors hold and fractional packing
(node_pool.py, node_pool_nodes.py).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurm import cluster as _cluster
from slurm.fixtures import (JOB_TIMEOUT, hpc_ray_cli, job_env, poll_for, run, sbatch,
                            slurm_two_nodes, two_node_job_dir, wait_job)
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
@pytest.mark.xfail(strict=False, reason="flaky at MPI_Init, before hpc_ray runs: Slurm's pmi2 "
                   "plugin gets malformed requests ('value not properly terminated') and UCX "
                   "fails an address check; 3 of 3 runs beside a CPU hog, 1 of 3 fresh-clone "
                   "suites; MPI started before the script's imports did not cure it (closing "
                   "note, 2026-11-28)")
def test_sgd_and_tune_over_two_slurm_nodes(slurm_two_nodes, two_node_job_dir):
    c = slurm_two_nodes
    script = two_node_job_dir / "train.sbatch"
    script.write_text(f"#!/bin/bash\nsrun --mpi=pmi2 {PY} {SCRIPTS_DIR / 'train_two_nodes.py'}\n")
    out = two_node_job_dir / "out.txt"
    shm_before = set(os.listdir("/dev/shm"))
    job = sbatch(c, "-N", "2", "--ntasks-per-node=2", "-o", str(out), str(script),
                 cwd=two_node_job_dir,
                 # A run takes 10-20 s; one stuck at MPI_Init (see the xfail) ends at
                 # 55 s (the script's faulthandler), not 115 s.
                 env=job_env(c, HPC_RAY_TEST_TMPDIR=str(two_node_job_dir),
                             HPC_RAY_TEST_TIMEOUT="60"))
    (record,) = wait_job(c, job, output=out, timeout=150)
    if record["JobState"] != "COMPLETED":
        # A job whose MPI_Init failed (see the xfail) leaves MPICH's own segments.
        for name in set(os.listdir("/dev/shm")) - shm_before:
            if name.startswith("mpich_shm_"):
                os.unlink(os.path.join("/dev/shm", name))
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


def _script_env(c, job_dir: Path, np: int, timeout: float, **extra: str) -> dict[str, str]:
    """A job's environment for a rank script of ``mpi_scripts`` that reads
    ``HPC_RAY_TEST_*`` (_harness.py): ``np`` ranks in all, the driver included."""
    return job_env(c, HPC_RAY_TEST_MODE="mpiexec", HPC_RAY_TEST_NP=str(np),
                   HPC_RAY_TEST_NUM_WORKERS=str(np - 1), HPC_RAY_TEST_TIMEOUT=str(timeout),
                   HPC_RAY_TEST_TMPDIR=str(job_dir), HPC_RAY_CHECK_MESSAGES="1", **extra)


def _srun_job(c, job_dir: Path, name: str, sbatch_args: list[str], argv: list[str],
              env: dict[str, str], timeout: float = JOB_TIMEOUT) -> str:
    """``sbatch ... script`` whose script is ``srun --mpi=pmi2 python argv``; wait
    for it and return its output once it COMPLETED on n1 and n2."""
    script = job_dir / f"{name}.sbatch"
    script.write_text(f"#!/bin/bash\nsrun --mpi=pmi2 {PY} {' '.join(map(str, argv))}\n")
    out = job_dir / "out.txt"
    job = sbatch(c, *sbatch_args, "-o", str(out), str(script), cwd=job_dir, env=env)
    (record,) = wait_job(c, job, output=out, timeout=timeout)
    text = out.read_text()
    assert record["JobState"] == "COMPLETED", text
    assert record["NodeList"] == "n[1-2]"
    return text


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nodes_route", ["1", "0"])
def test_collective_group_over_two_slurm_nodes(slurm_two_nodes, two_node_job_dir, nodes_route):
    """tests/test_collective_nodes.py on n1 and n2: five ranks, three on n1 (the
    driver and two workers) and two on n2, as on the fake hosts; the nodes have
    two CPUs each, so the third task of n1 needs ``--overcommit``. The script
    makes one member per worker rank (HPC_RAY_TEST_NUM_WORKERS)."""
    from test_collective_nodes import assert_group_spanning_two_nodes
    c = slurm_two_nodes
    text = _srun_job(c, two_node_job_dir, "collective_nodes",
                     ["-N", "2", "-n", "5", "--overcommit"],
                     [SCRIPTS_DIR / "collective_nodes.py"],
                     _script_env(c, two_node_job_dir, 5, 150,
                                 HPC_RAY_COLLECTIVE_NODES=nodes_route),
                     timeout=200)
    values = results_of(text, "collective_nodes")
    # Two members on each node, and the nodes are two stores (n1 and n2).
    assert sorted(node for node, _rank in values["places"]) == [0, 0, 1, 1], values
    assert sorted(rank for _node, rank in values["places"]) == [1, 2, 3, 4]
    assert_group_spanning_two_nodes(values, nodes_route)


@pytest.mark.timeout(150)
def test_set_resource_on_a_chosen_slurm_node(slurm_two_nodes, two_node_job_dir):
    """tests/test_set_resource.py's chosen-node test on n1 and n2 (two ranks
    each; the driver and a worker on n1): a resource set with n2's id is n2's
    only, and every task asking for it runs in n2's store."""
    c = slurm_two_nodes
    text = _srun_job(c, two_node_job_dir, "set_resource_nodes",
                     ["-N", "2", "--ntasks-per-node=2"],
                     [SCRIPTS_DIR / "set_resource_nodes.py"],
                     _script_env(c, two_node_job_dir, 4, 110))
    res = results_of(text, "set_resource_nodes")
    assert res["node_ids"] == ["node-0", "node-1"]
    assert res["r_on"] == ["node-1"]
    # Every R task ran in one store, not the one of the driver's node (n1).
    assert len(res["r_stores"]) == 1 and res["r_stores"] == [res["last_node_store"]]
    assert res["driver_store"] is not None and res["r_stores"] != [res["driver_store"]]
    # A task's set_resource with no client_id is its own node's.
    assert len(res["mine_on"]) == 1 and res["mine_on"][0] in ("node-0", "node-1")
    assert res["mine_stores_match"] is True


@pytest.mark.timeout(200)
def test_actor_resources_and_fractional_packing_on_a_slurm_node(slurm_two_nodes,
                                                                two_node_job_dir):
    """tests/test_node_pool.py with the driver alone on n1 and its one worker
    rank (one CPU) on n2: what actors hold, and fractions packed as Ray packs them."""
    from test_node_pool import assert_node_pool
    c = slurm_two_nodes
    text = _srun_job(c, two_node_job_dir, "node_pool", ["-N", "2", "--ntasks-per-node=1"],
                     [SCRIPTS_DIR / "node_pool.py"],
                     _script_env(c, two_node_job_dir, 2, 150), timeout=170)
    assert_node_pool(results_of(text, "node_pool"))


@pytest.mark.timeout(200)
def test_fractions_and_actor_cpus_on_both_slurm_nodes(slurm_two_nodes, two_node_job_dir):
    """mpi_scripts/node_pool_nodes.py on n1 and n2 (two ranks each: one worker
    rank on n1, two on n2, a CPU each): num_cpus=0.25 tasks pack four per rank,
    in both nodes' stores; init(resources={"X": 1}) is one X on one node, where
    X=0.5 tasks run two at once; whole-CPU actors hold every CPU while they live."""
    c = slurm_two_nodes
    text = _srun_job(c, two_node_job_dir, "node_pool_nodes", ["-N", "2", "--ntasks-per-node=2"],
                     [SCRIPTS_DIR / "node_pool_nodes.py"],
                     _script_env(c, two_node_job_dir, 4, 150), timeout=170)
    values = results_of(text, "node_pool_nodes")
    assert values["cluster_cpus"] == 3
    assert values["cluster_x"] == 1 and len(values["x_nodes"]) == 1
    # Twelve quarters at once on three CPUs, not a thirteenth; in both stores.
    assert values["quarters"] == [12, 2]
    assert values["halves"] == [2, 1]
    # One actor per CPU, on both nodes; a task waits until one is killed.
    assert values["actor_stores"] == 2 and values["actors_driver_sees"] == 0
    assert values["task_waits"] is True and values["task_after_kill"] == "ran"
    assert values["cpus_back"] == 3


@pytest.mark.timeout(200)
def test_collective_group_of_one_and_two_per_slurm_node(slurm_two_nodes, two_node_job_dir):
    """mpi_scripts/collective_nodes.py as a user submits it (``-N 2
    --ntasks-per-node=2``): n1 holds the driver and one worker rank, n2 two, so
    the group is one member on n1 (its own leader) and two on n2 (one leader)."""
    c = slurm_two_nodes
    text = _srun_job(c, two_node_job_dir, "collective_nodes", ["-N", "2", "--ntasks-per-node=2"],
                     [SCRIPTS_DIR / "collective_nodes.py"],
                     _script_env(c, two_node_job_dir, 4, 150), timeout=170)
    values = results_of(text, "collective_nodes")
    assert sorted(values["places"]) == [[0, 1], [1, 2], [1, 3]]
    nodes = values["member_nodes"]
    assert nodes[0] != nodes[1] and sorted(nodes) == [0, 1, 1]   # members 0, 1 lead
    assert values["allreduce"] == "ok" and values["others"] == "ok"
    assert values["mismatch"] == "ok"
    assert values["routes"] == ["NodesGroup"] * 3
    ops = values["ops_per_member"]
    # The lone member of n1 and the first of n2 call MPI, once per operation;
    # the second member of n2 makes no MPI collective for the group.
    assert values["mpi_calls"] == [ops, ops, 0]
    assert values["mpi_calls_others"] == [ops + 3 * 5] * 2 + [0]
    # Member 1 died, then member 1 of the two left; a group of one member at last.
    assert values["died_2"] == ["NodesGroup"] * 3
    if nodes[2] == nodes[1]:         # member 1 led n2: one survivor on each node
        assert values["died_1"] == ["NoneType"] * 2
    assert len(values["died_1"]) == 2 and values["last_route"] == ["NoneType"]
