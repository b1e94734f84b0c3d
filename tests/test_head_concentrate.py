"""Tiny tasks on a crowded node go to as many of its ranks as it has cores
(``scheduler.concentrate``): the head driven directly, no MPI."""
from __future__ import annotations

import collections

from hpc_ray.runtime.head import Head
from hpc_ray.runtime.taskspec import build_spec
from hpc_ray.transport import messages as m
from hpc_ray.transport.serialization import RAW

WORKERS = 7


def make_head(cpu_ids=(0, 1), workers: int = WORKERS) -> Head:
    """One node: ``workers`` one-CPU ranks that may run on ``cpu_ids``."""
    head = Head(workers + 1, [0] * (workers + 1), 1 << 20, ["host"] * (workers + 1))
    for r in range(1, workers + 1):
        head.add_worker(r, {"CPU": 1, "GPU": 0}, [], 1000 + r,
                        None if cpu_ids is None else list(cpu_ids))
    return head


def spec(fn: int) -> list:
    return build_spec(fn, b"blob", f"f{fn}", (1,), {}, 1, None, 0, 0, None, 0)


def sent(head: Head) -> list[tuple[int, list]]:
    """(rank, spec) of every EXECUTE the head sent since the last look."""
    return [(rank, msg[1]) for rank, msgs in head.take_outbox().items()
            for msg in msgs if msg[0] == m.EXECUTE]


def run(head: Head, n: int, fn: int, seconds: float) -> None:
    """Submit ``n`` tasks of ``fn`` and end each as having taken ``seconds``."""
    for _ in range(n):
        head.submit(spec(fn))
    head.schedule()
    for rank, s in sent(head):
        head.task_done(rank, s[m.T_ID], [(RAW, 1)], None, 10.0, 10.0 + seconds, 5)


def burst(head: Head, n: int, fn: int) -> collections.Counter:
    """Submit ``n`` tasks of ``fn``; how many went to each rank."""
    for _ in range(n):
        head.submit(spec(fn))
    head.schedule()
    return collections.Counter(rank for rank, _ in sent(head))


def test_a_crowded_node_runs_a_tiny_function_on_as_many_ranks_as_it_has_cores():
    head = make_head()
    assert head.crowded_nodes == {0: 2}
    run(head, 8, fn=1, seconds=2e-5)
    placed = burst(head, 300, fn=1)
    assert len(placed) == 2, placed
    assert sum(placed.values()) > 2


def test_a_function_that_takes_longer_spreads_over_every_rank():
    head = make_head()
    run(head, 8, fn=1, seconds=0.05)
    assert len(burst(head, 300, fn=1)) == WORKERS


def test_a_function_not_timed_enough_yet_spreads():
    head = make_head()
    run(head, 7, fn=1, seconds=2e-5)        # one short of TINY_AFTER
    assert len(burst(head, 300, fn=1)) == WORKERS


def test_nodes_with_a_core_for_every_rank_or_no_cpu_report_spread():
    for cpu_ids in (range(8), None):
        head = make_head(cpu_ids)
        assert head.crowded_nodes == {}
        run(head, 8, fn=1, seconds=2e-5)
        assert len(burst(head, 300, fn=1)) == WORKERS


def test_ranks_busy_with_tiny_tasks_keep_their_places_across_passes():
    head = make_head()
    run(head, 8, fn=1, seconds=2e-5)
    first = burst(head, 300, fn=1)
    second = burst(head, 300, fn=1)
    assert set(second) <= set(first), (first, second)


def test_a_holder_that_stopped_making_progress_gives_up_its_place():
    head = make_head()
    run(head, 8, fn=1, seconds=2e-5)
    first = burst(head, 300, fn=1)
    stuck = min(first)
    head.workers[stuck].tiny_at -= 1.0      # nothing placed or ended there for 1 s
    later = burst(head, 300, fn=1)
    assert stuck not in later
    assert len(set(later) - set(first)) == 1, (first, later)


def test_ranks_left_out_take_no_tiny_tasks_back_from_busy_holders():
    head = make_head()
    run(head, 8, fn=1, seconds=2e-5)
    placed = burst(head, 6, fn=1)           # all placed, queued at two ranks
    assert len(placed) == 2 and max(placed.values()) > 1, placed
    head.schedule()                         # nothing ready: a pass rebalances
    steals = [rank for rank, msgs in head.take_outbox().items()
              for msg in msgs if msg[0] == m.STEAL]
    assert steals == []
    for w in head.workers.values():
        w.tiny_at -= 1.0                    # every holder stuck: the idle ones may steal
    head.schedule()
    steals = [rank for rank, msgs in head.take_outbox().items()
              for msg in msgs if msg[0] == m.STEAL]
    assert steals


def test_ranks_with_more_cpus_than_the_node_has_cores_still_run_tiny_tasks():
    # Found by the chaos test (issue 33): ``mpiexec -n 4`` with init(num_cpus=3)
    # on 2 cores gave every rank 3 CPUs; no rank fitted in the node's 2 cores, so
    # once a function counted as tiny its tasks were never placed, and get() hung.
    head = Head(4, [0] * 4, 1 << 20, ["host"] * 4)
    for r in range(1, 4):
        head.add_worker(r, {"CPU": 3, "GPU": 0}, [], 1000 + r, [0, 1])
    assert head.crowded_nodes == {0: 2}
    run(head, 8, fn=1, seconds=2e-5)
    placed = burst(head, 30, fn=1)
    assert len(placed) == 1 and sum(placed.values()) > 0, placed
