"""Issue 3 object store: zero-copy reads, inline small values, cross-node
objects, reference counting, store-full errors, and idle ranks that sleep."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,n,ranks_per_node,nodes", [
    ("mpiexec", 3, None, 1),
    ("embedded", 3, None, 1),
    # Three simulated nodes {0,1} {2,3} {4}: objects move between stores.
    ("mpiexec", 5, 2, 3),
    # Driver alone on node 0: every object crosses a node boundary.
    ("module", 3, 1, 3),
])
def test_object_store(run, mode, n, ranks_per_node, nodes):
    env = {"HPC_RAY_RANKS_PER_NODE": ranks_per_node}
    result = run("store.py", n, mode=mode, timeout=120, env=env)
    values = result.assert_ok("store")
    assert values["nodes"] == nodes
    assert values["refcount_loops"] == "done"
    assert values["streamed_results"] == (True if nodes == 1 else "several nodes")
    assert values["task_arg_writeable"] is False   # task arguments are views too
    message = values["store_full_message"]
    # The error names the object's size, the store's and what to do.
    size = re.search(r"an object of (\d+) bytes", message)
    assert size and int(size.group(1)) >= (256 << 20) + (1 << 20), message   # (+ its header)
    assert f"({256 << 20} bytes in all)" in message, message
    assert "object_store_memory" in message, message


@pytest.mark.parametrize("mode,n", [("mpiexec", 5), ("embedded", 3)])
def test_idle_ranks_do_not_spin(run, mode, n):
    result = run("idle_cpu.py", n, mode=mode, timeout=60)
    values = result.assert_ok("idle_cpu")
    assert values["processes"] >= n, values
    # All ranks and executors together, over 2 s of idling.
    assert values["cpu_seconds"] < 0.5, values


@pytest.mark.parametrize("mode,n,ranks_per_node", [("mpiexec", 4, None), ("embedded", 3, "1")])
def test_a_quiet_rank_is_woken_by_its_doorbell(run, mode, n, ranks_per_node):
    # Idle ranks would poll MPI once in 10 minutes: only the doorbell wakes them.
    env = {"HPC_RAY_IDLE_POLL_MS": "600000", "HPC_RAY_RANKS_PER_NODE": ranks_per_node}
    result = run("idle_wakeup.py", n, mode=mode, timeout=60, env=env)
    values = result.assert_ok("idle_wakeup")
    assert len(values["seconds_per_step"]) == 3, values


@pytest.mark.parametrize("mode,n", [("mpiexec", 3), ("embedded", 3)])
def test_the_heads_comm_thread_sleeps_on_its_doorbell_while_a_long_task_runs(run, mode, n):
    # Once quiet, rank 0 and the worker ranks sleep ever longer between polls
    # (up to 10 minutes here); the rings that wake them early are tested one by
    # one in test_idle_polling.py.
    env = {"HPC_RAY_HEAD_IDLE_POLL_MS": "600000", "HPC_RAY_IDLE_POLL_MS": "600000"}
    values = run("head_doorbell.py", n, mode=mode, timeout=60, env=env).assert_ok("head_doorbell")
    assert values["slept_on_bell"] is True, values
    assert values["flagged"] is True, values     # one host: sleep flags, every message rings
    assert values["wait_score"] < 0.3, values    # long waits: the driver stopped spinning


def _store_mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum("memfd:hpc_ray_store" in line for line in maps)


def test_a_closed_arena_is_unmapped_unless_a_view_still_exports_it():
    # An embedded driver starting and stopping sessions in a loop kept every
    # store mapped (128 MB of it resident, pretouched) until a garbage collection.
    from hpc_ray.runtime.store import Arena

    before = _store_mappings()
    arena = Arena.create(1 << 20)
    assert _store_mappings() == before + 1
    arena.close()
    assert _store_mappings() == before
    held = Arena.create(1 << 20)
    view = held.pinned_view(0, 16, pin=object())   # a value handed to the user
    held.close()                                    # no error: the view keeps it
    assert _store_mappings() == before + 1 and bytes(view) == bytes(16)
    del view
