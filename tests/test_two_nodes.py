"""Two nodes of two ranks each on this machine, through MPICH hydra's launcher.

``mpiexec -hosts 127.0.0.2:2,127.0.0.3:2 -launcher ssh -launcher-exec
tests/fake_host_ssh.sh`` starts one hydra proxy per "host"; MPI then splits its
shared-memory groups per host and the ranks of the two hosts talk over MPI's
network path. The same driver runs on the two-node Slurm in ``test_slurm_nodes.py``.
Distributed SGD replicas and Tune trials spread over both nodes
(``mpi_scripts/train_two_nodes.py``); losing one of them: ``test_node_loss.py``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import SCRIPTS_DIR, get_mpiexec, run_mpi

FAKE_SSH = Path(__file__).with_name("fake_host_ssh.sh")
HOSTS = ("127.0.0.2", "127.0.0.3")
BIG = (50 << 20) + 128   # the 50 MB array as the store holds it (pickle header included)


def fake_hosts_command(script: str, *args: str,
                       hosts=tuple(f"{h}:2" for h in HOSTS)) -> list[str]:
    """``mpiexec`` of ``script`` with ``args`` over fake ``hosts`` (``"address:ranks"`` each)."""
    mpi = get_mpiexec()
    if mpi is None or mpi.flavor != "mpich":
        pytest.skip("the fake-host launch needs MPICH's hydra mpiexec")
    n = sum(int(h.rsplit(":", 1)[1]) for h in hosts)
    return [mpi.path, "-hosts", ",".join(hosts), "-launcher", "ssh", "-launcher-exec",
            str(FAKE_SSH), "-n", str(n), sys.executable, str(SCRIPTS_DIR / script), *args]


def assert_two_nodes(res: dict, names: list[str]) -> None:
    """What ``mpi_scripts/two_nodes.py`` reports on nodes A (driver, rank 1) and B."""
    a, b = names
    assert res["nodes"] == [[a, [0, 1]], [b, [2, 3]]]
    here = res["driver"]["store"]
    stores = {w["store"] for w in res["tasks"]}
    assert len(stores) == 2 and here in stores          # tasks ran on both nodes
    # One store per node: rank 1's executor maps the driver's, ranks 2 and 3 the other.
    assert sorted(w["store"] == here for w in res["actors"]) == [False, False, True]
    # The driver's 50 MB object crossed to B once, however often B read it ...
    assert res["after_put_read_far"] == [[a, 0, 0], [b, 1, BIG]]
    # ... and B's crossed to A once: the far actor's answer went through the head
    # (no direct socket between nodes), and the driver's second get and rank 1
    # read A's copy.
    assert res["after_far_read_here"] == [[a, 1, BIG], [b, 1, BIG]]
    assert res["sums"] == [6553600.0] * 2 + [13107200.0] * 3
    assert res["readonly"] == [True]
    assert len(res["both_far_read"]) == 2 and len(set(res["both_far_read"])) == 1


def test_two_fake_hosts_tasks_objects_actors():
    cmd = fake_hosts_command("two_nodes.py")
    res = run_mpi("two_nodes.py", 4, cmd=cmd, timeout=90).assert_ok("two_nodes")
    assert_two_nodes(res, list(HOSTS))


@pytest.mark.parametrize("env, name", [
    ({"SLURMD_NODENAME": "n2", "PMI_HOSTNAME": "n2"}, "n2"),   # srun, or hydra under Slurm
    ({"PMI_HOSTNAME": "127.0.0.3"}, "127.0.0.3"),              # mpiexec -hosts
    ({"PMI_HOSTNAME": "localhost"}, None),                     # mpiexec -hosts localhost
    ({}, None),                                                # no launcher's name
])
def test_node_name_is_the_launchers(monkeypatch, env, name):
    import socket

    from hpc_ray.runtime.launch import node_name
    for key in ("SLURMD_NODENAME", "PMI_HOSTNAME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert node_name() == (name or socket.gethostname())


@pytest.mark.timeout(200)
def test_sgd_and_tune_over_two_fake_hosts(run):
    res = run("train_two_nodes.py", 4, cmd=fake_hosts_command("train_two_nodes.py"),
              timeout=150).assert_ok("train_two_nodes")
    assert_trained_on_two_nodes(res)


def assert_trained_on_two_nodes(res: dict) -> None:
    """What ``mpi_scripts/train_two_nodes.py`` reports: SGD replicas and Tune
    trials on both nodes, trained right."""
    assert res["nodes"] == [["node-0", [0, 1]], ["node-1", [2, 3]]]
    for in_rank in (False, True):
        sgd = res[f"sgd_in_rank_{in_rank}"]
        # One replica on each worker rank: rank 1 on node A, ranks 2 and 3 on B.
        assert sorted(sgd["places"]) == [["node-0", 1], ["node-1", 2], ["node-1", 3]]
        assert sgd["samples"] == 3 * 32 and sgd["steps"] == [30] * 3
        assert sgd["last_loss"] < sgd["first_loss"] and sgd["same_weights"]
    trials = res["trials"]
    assert [t[:3] for t in trials] == [[k, 3 * k, "TERMINATED"] for k in range(1, 7)]
    assert {t[3] for t in trials} == {"node-0", "node-1"}
    assert {t[4] for t in trials} == {1, 2, 3}
