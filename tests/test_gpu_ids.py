"""Issue 11 GPUs: ids handed out as in Ray (fractions share an id, whole requests
get ids of their own, CUDA_VISIBLE_DEVICES matches ``get_gpu_ids()`` and is ""
without GPUs, the driver's CUDA_VISIBLE_DEVICES picks the ids), in tasks and actors.

The rank script is tests/mpi_scripts/gpu_ids.py; no real GPU is needed.
"""
from __future__ import annotations

import pytest

from hpc_ray.runtime import gpu_ids


def test_fractions_share_an_id_and_whole_requests_do_not():
    free = gpu_ids.new_pool([0, 1])
    assert gpu_ids.take(free, 0.5) == [0]
    assert gpu_ids.take(free, 0.5) == [0]          # packed onto the shared id
    assert gpu_ids.take(free, 0.25) == [1]
    assert not gpu_ids.fits(free, 1)               # 0.75 of GPU 1 free is not a GPU
    assert gpu_ids.fits(free, 0.75) and not gpu_ids.fits(free, 0.8)
    gpu_ids.give_back(free, [0], 0.5)
    gpu_ids.give_back(free, [0], 0.5)
    assert gpu_ids.take(free, 1) == [0]
    gpu_ids.give_back(free, [1], 0.25)
    assert gpu_ids.take(free, 1) == [1]
    assert free == {0: 0.0, 1: 0.0}


def test_whole_requests_take_the_lowest_free_ids():
    free = gpu_ids.new_pool([2, 3, 5])
    assert gpu_ids.take(free, 2) == [2, 3]
    assert gpu_ids.fits(free, 1) and not gpu_ids.fits(free, 2)
    gpu_ids.give_back(free, [2, 3], 2)
    assert gpu_ids.take(free, 3) == [2, 3, 5]


@pytest.mark.mpi
@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 4)])
def test_fractional_gpus_and_actors(run, mode, n):
    result = run("gpu_ids.py", n, "fractions", mode=mode, timeout=90,
                 env={"CUDA_VISIBLE_DEVICES": None})
    values = result.assert_ok("gpu_ids fractions")
    assert values["gpus"] == 1
    # Two num_gpus=0.5 tasks at once share GPU 0, as in Ray (get_resource_ids()
    # says which share).
    assert values["halves"] == [[[0], "0", [[0, 0.5]]], [[0], "0", [[0, 0.5]]]]
    # The actor holds GPU 0 from its constructor on, in every call.
    assert values["actor"] == [[[0], [0], "0"]] * 2
    assert values["after_kill"] == [[0], "0"]


@pytest.mark.mpi
@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3), ("module", 5)])
def test_ids_from_cuda_visible_devices(run, mode, n):
    result = run("gpu_ids.py", n, "masked", mode=mode, timeout=90,
                 env={"CUDA_VISIBLE_DEVICES": "2,3"})
    values = result.assert_ok("gpu_ids masked")
    assert values["gpus"] == 2
    # Two num_gpus=1 tasks at once: GPUs 2 and 3, each seeing only its own.
    assert sorted((tuple(ids), env) for ids, env in values["tasks"]) == \
        [((2,), "2"), ((3,), "3")]
    at_start, ids, env = values["actor"]
    assert at_start == ids and ids in ([2], [3]) and env == str(ids[0])
