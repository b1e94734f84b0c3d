"""Collectives of ordinary actors in a group spanning two nodes (run on two fake
hosts: the driver and two workers on one, two workers on the other).

Each node's members reduce through their node's store and only one leader per
node runs MPI: the script reports every member's node, the MPI collectives its
rank ran for the group, and whether SUM, MEAN, MAX (numpy, several MB in
chunks), a torch CPU tensor, broadcast from a member of either node, barrier,
reduce and allgather give numpy's answer. Then a node's leader, and later a
member that leads nothing, dies while the others wait: every survivor, on both
nodes, gets a RayError naming it, and the survivors form a new group that works.

Usage: collective_nodes.py [--torch]
"""
import faulthandler, os, sys
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import numpy as np
from _harness import NUM_WORKERS, check, init_kwargs, ok, report, section

import hpc_ray as ray
from hpc_ray import collective as col

W = NUM_WORKERS
TORCH = "--torch" in sys.argv

ray.init(**init_kwargs())


@ray.remote(num_cpus=1)
class Member:
    def where(self):
        from hpc_ray.runtime import context
        ctx = context.current()
        return ctx.node, ctx.rank

    def join(self, world_size, rank, group):
        col.init_collective_group(world_size, rank, group_name=group)
        return col.get_rank(group)

    def route(self, group):
        from hpc_ray.runtime import context
        return type(context.current().collective_groups.get(group)).__name__

    def mpi_calls(self, group):
        """The MPI collectives this member's rank ran for ``group`` (header exchanges aside)."""
        return col._executor_op(col._ctx(), group, "mpi_calls")

    def reduce_all(self, group, n):
        """SUM, MEAN and MAX of n-element arrays; this member's results."""
        rank = col.get_rank(group)
        a = np.arange(n, dtype=np.float64) * (rank + 1)
        col.allreduce(a, group)
        m = np.full(n, float(rank + 1), np.float32)
        col.allreduce(m, group, col.ReduceOp.MEAN)
        x = (np.arange(n) % 5 + rank).astype(np.int64)
        col.allreduce(x, group, col.ReduceOp.MAX)
        return rank, a, m, x

    def torch_sum(self, group):
        import torch
        t = torch.full((1000,), float(col.get_rank(group) + 1))
        col.allreduce(t, group)
        return t.numpy().copy()

    def others(self, group, root):
        """broadcast from ``root``, barrier, reduce (SUM, MEAN) into ``root`` and allgather."""
        rank = col.get_rank(group)
        size = col.get_collective_group_size(group)
        b = np.full(1 << 18, float(rank))
        col.broadcast(b, root, group)
        col.barrier(group)
        r = np.full(10, rank + 1.0)
        col.reduce(r, root, group)
        mean = np.full(1 << 18, rank + 1.0)
        col.reduce(mean, root, group, col.ReduceOp.MEAN)
        r = r.tolist() + [float(mean.min()), float(mean.max())]
        parts = [np.empty(3 << 17) for _ in range(size)]       # 3 MB each
        col.allgather(parts, np.full(3 << 17, rank * 10.0), group)
        parts = [p[:3] for p in parts]
        return rank, float(b.min()), float(b.max()), r, np.stack(parts).tolist()

    def allreduce(self, group, value=1.0):
        """One allreduce; the error's type and text if it fails."""
        try:
            a = np.full(4, value)
            col.allreduce(a, group)
            return a.tolist()
        except Exception as exc:
            return type(exc).__name__, str(exc)

    def allgather(self, group):
        """One allgather; the error's type and text if it fails."""
        try:
            parts = [np.empty(2) for _ in range(col.get_collective_group_size(group))]
            col.allgather(parts, np.ones(2), group)
            return [p.tolist() for p in parts]
        except Exception as exc:
            return type(exc).__name__, str(exc)

    def mismatch(self, group, by_rank, op):
        """An allreduce or allgather whose length differs between the nodes (or,
        ``by_rank``, between members 0 and 2 of the first node only); then a good
        allreduce."""
        from hpc_ray.runtime import context
        n = int(col.get_rank(group) == 2) if by_rank else context.current().node
        size = col.get_collective_group_size(group)
        try:
            if op == "allreduce":
                col.allreduce(np.ones(4 + n), group)
            else:
                col.allgather([np.empty(4 + n) for _ in range(size)], np.ones(4 + n), group)
            first = "no error"
        except ValueError as exc:
            first = "ValueError" if "differ" in str(exc) else str(exc)
        return first, self.allreduce(group)

    def die(self):
        os._exit(1)

    def leave(self, group):
        col.destroy_collective_group(group)
        return col.is_group_initialized(group)


actors = [Member.remote() for _ in range(W)]
places = ray.get([a.where.remote() for a in actors])
report("places", places)
# Group order alternates the nodes (members 0, 2, ... on one, 1, 3, ... on the
# other), so that a node's members are not neighbours in the group.
by_node = {}
for a, (node, _rank) in zip(actors, places):
    by_node.setdefault(node, []).append(a)
columns = list(by_node.values())
members = [col_[i] for i in range(max(map(len, columns))) for col_ in columns if i < len(col_)]
node_of = [next(n for n, c in by_node.items() if a in c) for a in members]
report("member_nodes", node_of)
check(sorted(ray.get([a.join.remote(W, i, "g") for i, a in enumerate(members)])) ==
      list(range(W)))

N_OPS = 3
with section("allreduce across nodes"):
    for n in (1000, 3 << 19):                   # 8 KB, then 12 MB (chunks of the blocks)
        got = ray.get([a.reduce_all.remote("g", n) for a in members])
        total = sum(range(1, W + 1))
        want_max = (np.arange(n) % 5 + W - 1).astype(np.int64)
        for rank, a, m, x in got:
            check(np.array_equal(a, np.arange(n, dtype=np.float64) * total), f"sum {n} {rank}")
            check(m.dtype == np.float32 and np.allclose(m, total / W), f"mean {n} {rank}")
            check(np.array_equal(x, want_max), f"max {n} {rank}")
    report("allreduce", "ok")
report("routes", ray.get([a.route.remote("g") for a in members]))
# Two sizes, three allreduces each: only the first member of each node (0, 1) has
# its rank run MPI, once per operation.
report("mpi_calls", ray.get([a.mpi_calls.remote("g") for a in members]))
report("ops_per_member", 2 * N_OPS)

if TORCH:
    with section("a torch CPU tensor"):
        got = ray.get([a.torch_sum.remote("g") for a in members])
        check(all(np.array_equal(t, np.full(1000, float(total))) for t in got), "torch sum")
        report("torch", "ok")

with section("broadcast, barrier, reduce, allgather"):
    for root in (0, 1, W - 1):      # both nodes' leaders, a member that leads nothing
        got = ray.get([a.others.remote("g", root) for a in members])
        for rank, lo, hi, r, parts in got:
            check(lo == hi == root, f"broadcast from {root} on {rank}: {lo}..{hi}")
            want = [float(total)] * 10 + [total / W] * 2 if rank == root else \
                [rank + 1.0] * 12
            check(r == want, f"reduce into {root} on {rank}: {r}")
            check(parts == [[i * 10.0] * 3 for i in range(W)], f"allgather {rank}: {parts}")
    report("others", "ok")
# Three rounds of broadcast, barrier, two reduces and an allgather.
report("mpi_calls_others", ray.get([a.mpi_calls.remote("g") for a in members]))

with section("shapes that differ between the nodes, or inside one"):
    for by_rank, op in ((False, "allreduce"), (True, "allreduce"), (False, "allgather"),
                        (True, "allgather")):
        got = ray.get([a.mismatch.remote("g", by_rank, op) for a in members])
        check([list(g) for g in got] == [["ValueError", [float(W)] * 4]] * W, got)
    report("mismatch", "ok")


def expect_death(group, members, victim):
    """``members[victim]`` dies while the others wait in an allreduce of ``group``:
    every survivor gets a RayError naming it; they form a new group and return it."""
    rest = [a for i, a in enumerate(members) if i != victim]
    waiting = [a.allreduce.remote(group) for a in rest]
    ready, _ = ray.wait(waiting, timeout=0.5)
    check(not ready, "the others did not wait for the victim")
    members[victim].die.remote()
    errs = ray.get(waiting)
    for e in errs:
        check(isinstance(e, tuple) and e[0] == "RayError" and f"member(s) [{victim}]" in e[1]
              and repr(group) in e[1] and "destroy" in e[1], f"after the death: {e}")
    errs = ray.get([a.allreduce.remote(group) for a in rest])
    check(all(isinstance(e, tuple) and e[0] == "RayError" for e in errs), f"again: {errs}")
    errs = ray.get([a.allgather.remote(group) for a in rest])
    check(all(isinstance(e, tuple) and e[0] == "RayError" for e in errs), f"allgather: {errs}")
    check(ray.get([a.leave.remote(group) for a in rest]) == [False] * len(rest))
    new = group + "+"
    check(sorted(ray.get([a.join.remote(len(rest), i, new) for i, a in enumerate(rest)]))
          == list(range(len(rest))))
    got = ray.get([a.allreduce.remote(new, 2.0) for a in rest])
    check(got == [[2.0 * len(rest)] * 4] * len(rest), f"after the death: {got}")
    return new, rest


with section("members die while the others wait"):
    # Member 1 leads the second node, where member 3 is; in the group of the
    # three left, member 1 (the first node's second) is not a leader.
    group, left = "g", members
    for victim in (1, 1):
        routes = ray.get([a.route.remote(group) for a in left])
        group, left = expect_death(group, left, victim)
        report(f"died_{len(left)}", routes)
    report("last_route", ray.get([a.route.remote(group) for a in left]))
    ray.get([a.leave.remote(group) for a in left])

ray.shutdown()
ok("collective_nodes")
