"""A node's GPUs are one pool, however many ranks share it (Ray 0.7 counts
resources per node): the head as a pure object, and three fake hosts. Requests
above one unit are whole numbers, as Ray checks at decoration."""
from __future__ import annotations

import re

import pytest

import hpc_ray as ray

from hpc_ray.runtime.control import _cluster_resources
from hpc_ray.runtime.head import Head
from hpc_ray.runtime.taskspec import build_spec
from hpc_ray.transport import messages as m

from conftest import run_mpi
from test_two_nodes import fake_hosts_command


def two_gpu_nodes() -> Head:
    """The driver alone on node 0; nodes 1 and 2 of two ranks, one GPU id each."""
    head = Head(5, [0, 1, 1, 2, 2], 1 << 20, ["a", "b", "b", "c", "c"])
    for rank, ids in ((1, [0]), (2, [1]), (3, [0]), (4, [1])):
        head.add_worker(rank, {"CPU": 1, "GPU": 1}, ids, 1000 + rank)
    return head


def gpu_task(gpus):
    return build_spec(123, b"blob", "f", (), {}, 1, {"CPU": 1, "GPU": gpus}, 0, 0, None, 0)


def placed(head: Head) -> dict[int, list]:
    return {rank: msg[1][m.T_RES][0] for rank, msgs in head.take_outbox().items()
            for msg in msgs if msg[0] == m.EXECUTE}


def test_a_two_gpu_task_runs_on_a_node_whose_ranks_hold_one_id_each():
    head = two_gpu_nodes()
    for _ in range(3):
        head.submit(gpu_task(2))
    head.schedule()
    got = placed(head)
    # One per node (each node's two ids), the third waits for one to end.
    assert sorted(head.node_of[r] for r in got) == [1, 2]
    assert all(sorted(ids) == [0, 1] for ids in got.values())
    assert _cluster_resources(head)["GPU"] == 4


def test_whole_and_fractional_ids_come_from_the_nodes_pool():
    head = two_gpu_nodes()
    for gpus in (0.5, 0.5, 1, 1):
        head.submit(gpu_task(gpus))
    head.schedule()
    got = {r: (head.node_of[r], ids) for r, ids in placed(head).items()}
    # The two halves share one id of node 1 (its ranks 1 and 2); the whole ones
    # take node 2's two ids.
    assert got == {1: (1, [0]), 2: (1, [0]), 3: (2, [0]), 4: (2, [1])}


def test_three_fake_hosts_run_two_gpu_tasks_on_each_worker_node():
    cmd = fake_hosts_command("node_gpus.py", hosts=("127.0.0.1:1", "127.0.0.2:2",
                                                     "127.0.0.3:2"))
    res = run_mpi("node_gpus.py", 5, cmd=cmd, timeout=90,
                  env={"CUDA_VISIBLE_DEVICES": "0,1"}).assert_ok("node_gpus")
    assert res["gpus"] == 4
    assert sorted(res["two_gpu_tasks"]) == [[0, 1], [0, 1]]
    assert len(set(res["stores"])) == 2


@pytest.mark.parametrize("options,named", [
    ({"num_cpus": 1.5}, "num_cpus"), ({"num_gpus": 2.5}, "num_gpus"),
    ({"resources": {"license": 3.25}}, "resources['license']")])
def test_a_fraction_above_one_unit_is_refused_at_decoration(options, named):
    with pytest.raises(ValueError, match=r"Resource quantities >1 must be whole numbers: "
                                         + re.escape(named)):
        ray.remote(**options)(lambda: 1)
    with pytest.raises(ValueError, match="must be whole numbers"):
        ray.remote(**options)(type("Actor", (), {}))

    @ray.remote
    def f():
        return 1
    with pytest.raises(ValueError, match="must be whole numbers"):
        f.options(**options)


def test_fractions_of_one_unit_and_whole_numbers_are_taken():
    f = ray.remote(num_cpus=0.5, num_gpus=0.25, resources={"license": 2})(lambda: 1)
    assert f._resources == {"CPU": 0.5, "GPU": 0.25, "license": 2}
