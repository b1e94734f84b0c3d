"""Placement decisions: pure functions over the head's worker records."""
from __future__ import annotations

from typing import Iterable

from . import gpu_ids

#: What a task holds while it runs when it asks for nothing (Ray's default).
DEFAULT_TASK_RESOURCES = {"CPU": 1}
_DEFAULT_SHAPE = tuple(sorted(DEFAULT_TASK_RESOURCES.items()))

_EPS = 1e-9

#: Upper bound on tasks queued at one worker beyond its CPUs. Short tasks need a
#: deep queue so that no worker idles between batches; long tasks need a shallow
#: one so that a slow task does not hold others back while another rank idles.
MAX_PREFETCH = 256
#: Queue depth is chosen so a worker holds about this many seconds of work.
PREFETCH_SECONDS = 0.002


def shape_of(resources: dict) -> tuple:
    """A hashable key of a resource request: tasks with equal keys queue together."""
    if resources is DEFAULT_TASK_RESOURCES:
        return _DEFAULT_SHAPE
    return tuple(sorted(resources.items()))


#: Resources a worker rank holds itself. Every other resource belongs to the
#: rank's node (``w.pool``), shared by the node's ranks as Ray 0.7 counts a node's
#: resources: its GPU ids are one pool (a ``num_gpus=2`` task runs on a node whose
#: two ranks were given one id each), and ``init(resources={"Resource1": 4})``
#: makes 4 in all, not 4 per rank. CPUs stay per rank: a rank runs one task per
#: CPU it has, and a wider task borrows idle siblings' (``pick_wide``).
RANK_KEYS = frozenset(("CPU",))


def _within(own: dict, pooled: dict, need: dict) -> bool:
    for k, v in need.items():
        if v and (own if k in RANK_KEYS else pooled).get(k, 0) + _EPS < v:
            return False
    return True


def _gpu_ids_free(w, need: dict) -> bool:
    """Whether ``w`` has GPU ids for ``need`` (fractions must fit on one id)."""
    gpus = need.get("GPU")
    return not gpus or gpu_ids.fits(w.gpu_free, gpus)


def fits(w, need: dict) -> bool:
    """Whether ``need`` is free now on ``w`` (its own CPUs/GPUs, its node's custom)."""
    return _within(w.avail, w.pool.avail, need) and _gpu_ids_free(w, need)


def fits_ever(w, need: dict) -> bool:
    """Whether ``need`` fits ``w`` when nothing else runs there."""
    return _within(w.total, w.pool.total, need)


def _add(w, need: dict, sign: int) -> None:
    for k, v in need.items():
        if v:
            avail = w.avail if k in RANK_KEYS else w.pool.avail
            avail[k] = avail.get(k, 0) + sign * v


def reserve(w, need: dict) -> None:
    _add(w, need, -1)


def unreserve(w, need: dict) -> None:
    _add(w, need, 1)


def in_cpu_queue(need: dict) -> bool:
    """Whether a task takes a place in its rank's CPU queue (``WorkerInfo.inflight``):
    it asks for one CPU or more. A fraction of one runs beside that queue, on an
    extra executor (``worker_state.no_cpu``), placed only where it is free now, so
    that fractions pack onto a CPU as Ray packs them (four ``num_cpus=0.25``)."""
    return need.get("CPU", 0) >= 1 - _EPS


def capacity_ok(w, need: dict) -> bool:
    """A worker takes a task if the resources fit, counting queued tasks for CPUs.

    A fraction of a CPU must be free now (``w.avail``), and so must whole CPUs
    while fractions run on the rank (``w.fractions``): neither is queued ahead,
    since the rank runs fractions beside its CPU queue.
    CPU-only tasks may be queued at a worker beyond the CPUs its actors do not
    hold (``w.prefetch`` more, plus one per task blocked in ``get``; an actor
    waiting in ``get`` keeps its CPU); other resources must be
    free now. A queue is refilled in bursts: once full, a worker takes no more
    tasks until it is down to half its extra depth (``w.refill``, set again by
    the head when a task leaves), so a long burst goes out in large batches
    instead of one task per finished task.
    """
    cpu = need.get("CPU", 0)
    for k, v in need.items():
        if k != "CPU" and v:
            have = w.avail.get(k, 0) if k in RANK_KEYS else w.pool.avail.get(k, 0)
            if have + _EPS < v:
                return False
    if not _gpu_ids_free(w, need):
        return False
    if not cpu:
        return True
    if cpu < 1 - _EPS or w.fractions:
        return not (w.hosting or w.lending) and w.avail.get("CPU", 0) + _EPS >= cpu
    if w.hosting or w.lending:
        # Its CPUs belong to a task wider than one rank (see ``pick_wide``): only
        # an executor of it blocked in get lends one, and nothing is queued ahead.
        return w.inflight + cpu <= w.hosting + w.blocked + _EPS
    total = w.total.get("CPU", 0)
    if cpu > total + _EPS:
        return False
    base = task_cpus(w) + w.blocked
    if w.inflight + cpu > base + w.prefetch + _EPS:
        w.refill = False
        return False
    return w.refill or w.inflight <= base + w.prefetch // 2


def task_cpus(w) -> float:
    """``w``'s CPUs that its actors do not hold."""
    return w.total.get("CPU", 0) - w.actor_cpus


def low_water(w) -> bool:
    """Whether ``w``'s queue is down to where it should be refilled."""
    return w.inflight <= task_cpus(w) + w.blocked + w.prefetch // 2


def load(w) -> float:
    """Tasks queued at ``w`` beyond what its CPUs (and blocked executors) run."""
    return w.inflight - w.blocked - task_cpus(w)


def pick_worker(workers: list, need: dict, arg_nodes: dict | None):
    """The worker for a task: fits, on the node with most argument bytes, least loaded."""
    best = None
    best_key = None
    for w in workers:
        if not capacity_ok(w, need):
            continue
        key = (-(arg_nodes.get(w.node, 0) if arg_nodes else 0), load(w))
        if best_key is None or key < best_key:
            best, best_key = w, key
    return best


def pick_actor_worker(workers: list, need: dict):
    """Spread actors least-loaded first among the workers where they fit."""
    best = None
    for w in workers:
        if not fits(w, need):
            continue
        if best is None or (w.actors, w.inflight) < (best.actors, best.inflight):
            best = w
    return best


def by_node(workers: Iterable) -> dict[int, list]:
    nodes: dict[int, list] = {}
    for w in workers:
        nodes.setdefault(w.node, []).append(w)
    return nodes


def _cpu(w) -> float:
    return w.total.get("CPU", 0)


def feasible_anywhere(workers: Iterable, need: dict) -> bool:
    """Whether some rank could ever hold ``need``, alone or with its node's
    siblings lending their CPUs (``pick_wide``)."""
    workers = list(workers)
    if any(fits_ever(w, need) for w in workers):
        return True
    cpu = need.get("CPU", 0)
    if not cpu:
        return False
    rest = {k: v for k, v in need.items() if k != "CPU"}
    return any(sum(map(_cpu, ranks)) + _EPS >= cpu and any(fits_ever(w, rest) for w in ranks)
               for ranks in by_node(workers).values())


def most_rank_cpus(workers: Iterable) -> float:
    """The CPUs of the largest rank: a request for more is wide (``pick_wide``)."""
    return max(map(_cpu, workers), default=0)


def is_wide(most_cpus: float, need: dict) -> bool:
    """Whether ``need`` asks for more CPUs than any one rank has (``most_rank_cpus``)."""
    cpu = need.get("CPU", 0)
    return bool(cpu) and cpu > most_cpus + _EPS


def pick_wide(workers: Iterable, need: dict, blocked_lend: bool = False):
    """A rank and idle siblings on its node whose CPUs add up to ``need["CPU"]``.

    Ray counts CPUs per node; hpc_ray gives each rank its share (one, or
    ``SLURM_CPUS_PER_TASK``). A task or actor that needs more runs on one rank
    (its host) while whole idle siblings lend it their CPUs: they take no CPU
    work until it ends. With ``blocked_lend`` (a task, not an actor) a rank
    whose CPUs are all held by tasks waiting in ``get`` counts as idle, as Ray
    releases a task's CPUs while it is blocked in ``get``: a ``num_cpus=1``
    task may wait for a ``num_cpus=2`` one on a node of two 1-CPU ranks. A
    fully idle rank hosts first. Returns ``(host, lenders)`` or None. Costs
    O(workers), paid only by such wide requests.
    """
    cpu = need["CPU"]
    rest = {k: v for k, v in need.items() if k != "CPU"}
    for ranks in by_node(workers).values():
        idle = [w for w in ranks if not w.hosting and not w.lending and not w.fractions
                and w.avail.get("CPU", 0) + (w.blocked if blocked_lend else 0) + _EPS
                >= _cpu(w) > 0]
        if sum(map(_cpu, idle)) + _EPS < cpu:
            continue
        hosts = [w for w in idle if fits(w, rest)]
        if not hosts:
            continue
        host = max(hosts, key=lambda w: (_cpu(w), not w.inflight))
        lenders = []
        have = _cpu(host)
        for w in sorted(idle, key=_cpu, reverse=True):
            if have + _EPS >= cpu:
                break
            if w is not host:
                lenders.append(w)
                have += _cpu(w)
        return host, lenders
    return None


def node_totals(workers: Iterable, most: int = 4) -> str:
    """What the nodes hold, as an error names it: each kind of node's resources
    (its ranks' CPUs added up, as a wide task may use them, and its pool of GPUs
    and custom resources), at most ``most`` kinds."""
    kinds: list[dict] = []
    for ranks in by_node(workers).values():
        total = {"CPU": sum(map(_cpu, ranks)), **ranks[0].pool.total}
        if total not in kinds:
            kinds.append(total)
    shown = "; ".join(map(str, kinds[:most]))
    return shown + (f"; and {len(kinds) - most} other kinds" if len(kinds) > most else "")


def prefetch_depth(avg_seconds: float, target_seconds: float, cap: int) -> int:
    if avg_seconds <= 0:
        return cap
    return max(1, min(cap, int(target_seconds / avg_seconds)))
