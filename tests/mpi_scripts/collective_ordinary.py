"""Issue 12 collectives among ordinary actors: tensors of several MB by both
routes to the rank (cross-memory copies, and a store scratch block where those
are refused), more dtypes, two members on one rank (refused with a ValueError),
and members that die: the others get an error naming the group instead of
hanging, and a new group works afterwards.

Usage: collective_ordinary.py
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import numpy as np
from _harness import NUM_WORKERS, check, expect_raises, init_kwargs, ok, report, section

import hpc_ray as ray
from hpc_ray import collective as col

W = NUM_WORKERS
DTYPES = ("uint8", "int16", "uint32", "int64", "float32", "float64", "complex128")

ray.init(**init_kwargs())


@ray.remote(num_cpus=1)
class Member:
    def __init__(self, index):
        self.index = index

    def pid(self):
        return os.getpid()

    def join(self, world_size, rank, group):
        col.init_collective_group(world_size, rank, group_name=group)
        return col.get_rank(group)

    def use_store(self):
        """Take the store route, as where the kernel refuses cross-memory copies."""
        from hpc_ray.runtime import context
        context.current().cross_memory = False

    def route(self, group):
        """Which way this member's operations in ``group`` go."""
        from hpc_ray.runtime import context
        ctx = context.current()
        if not ctx.collective_shm or ctx.collective_groups.get(group) is None:
            return "rank"
        return "shm"

    def through_rank(self, yes=True):
        """Send every operation through the rank, or not (on every member at once)."""
        from hpc_ray.runtime import context
        context.current().collective_shm = not yes

    def big(self, group, n):
        """Several MB through each op; returns the results and this member's rank."""
        rank = col.get_rank(group)
        size = col.get_collective_group_size(group)
        out = {}
        a = np.arange(n, dtype=np.float64) * (rank + 1)
        col.allreduce(a, group)
        out["allreduce"] = a
        a = np.full(n, rank + 1.0)
        col.allreduce(a, group, col.ReduceOp.MEAN)
        out["mean"] = a
        a = np.full(n, float(rank))
        col.broadcast(a, size - 1, group)
        out["broadcast"] = a
        a = np.full(n, rank + 1.0)
        col.reduce(a, 0, group)
        out["reduce"] = a
        parts = [np.empty(n // 4) for _ in range(size)]
        col.allgather(parts, np.full(n // 4, rank * 10.0), group)
        out["allgather"] = np.stack(parts)
        # A strided view: reduced in place, the gaps untouched.
        base = np.zeros(2 * n)
        base[::2] = rank + 1
        col.allreduce(base[::2], group)
        out["strided"] = base
        return rank, {k: (v.min(), v.max(), v.sum(), v.shape) for k, v in out.items()}

    def race(self, group, steps):
        """``steps`` operations of mixed kinds and sizes (the same list on every
        member), this member pausing at its own random moments, so that members
        run ahead of each other into the blocks' halves; the wrong results."""
        import random
        import time
        rank, size = col.get_rank(group), col.get_collective_group_size(group)
        plan = random.Random(7)
        pause = random.Random(rank)
        total = sum(range(1, size + 1))
        wrong = []
        for step in range(steps):
            op = plan.choice(("allreduce", "allreduce", "broadcast", "reduce", "allgather",
                              "barrier"))
            n = plan.choice((1, 256, (64 << 10) // 8 + 1, 3 << 17))
            if pause.random() < 0.3:
                time.sleep(pause.random() * 1e-3)
            a = np.full(n, float(rank + 1)) + step
            if op == "allreduce":
                col.allreduce(a, group)
                ok_ = np.all(a == total + size * step)
            elif op == "broadcast":
                col.broadcast(a, step % size, group)
                ok_ = np.all(a == step % size + 1 + step)
            elif op == "reduce":
                col.reduce(a, step % size, group)
                ok_ = np.all(a == (total + size * step if rank == step % size
                                   else rank + 1 + step))
            elif op == "allgather":
                parts = [np.empty(n) for _ in range(size)]
                col.allgather(parts, a, group)
                ok_ = all(np.all(p == j + 1 + step) for j, p in enumerate(parts))
            else:
                col.barrier(group)
                ok_ = True
            if not ok_:
                wrong.append((step, op, n))
        return wrong

    def shapes(self, group):
        """Small operations on 2-D arrays (integer MEAN floors, as ``//`` does), then
        an allreduce whose length differs on the last member, then a good one."""
        rank, size = col.get_rank(group), col.get_collective_group_size(group)
        ints = np.full((3, 5), rank + 1, np.int64)
        col.allreduce(ints, group, col.ReduceOp.MEAN)
        grid = np.arange(4, dtype=np.float32).reshape(2, 2) * (rank + 1)
        col.allreduce(grid, group, col.ReduceOp.MAX)
        try:
            col.allreduce(np.ones(4 + (rank == size - 1)), group)
            mismatch = "no error"
        except ValueError as exc:
            mismatch = "ValueError" if "differ" in str(exc) else str(exc)
        return ints.tolist(), grid.tolist(), mismatch, self.allreduce(group)

    def dtypes(self, group):
        rank = col.get_rank(group)
        out = {}
        for dtype in DTYPES:
            a = (np.arange(1000) % 7 + rank).astype(dtype)
            col.allreduce(a, group)
            out[dtype] = a
        return out

    def allreduce(self, group, value=1.0):
        """One allreduce; the error's type and text if it fails."""
        try:
            a = np.full(4, value)
            col.allreduce(a, group)
            return a.tolist()
        except Exception as exc:
            return type(exc).__name__, str(exc)

    def allreduce_and_print(self, group, value):
        print(f"member {self.index} reduces {value}")
        return self.allreduce(group, value)

    def rank(self):
        from hpc_ray.runtime import context
        return context.current().rank

    def try_join(self, world_size, rank, group):
        try:
            col.init_collective_group(world_size, rank, group_name=group)
        except Exception as exc:
            return type(exc).__name__, str(exc)
        return None

    def die(self, how):
        if how == "exit":
            os._exit(1)
        faulthandler._sigsegv()

    def leave(self, group):
        col.destroy_collective_group(group)
        return col.is_group_initialized(group)


def expect_big(results, n, label):
    size = len(results)
    ranks = sorted(r for r, _ in results)
    check(ranks == list(range(size)), f"{label} ranks {ranks}")
    total = sum(range(1, size + 1))
    for rank, got in results:
        check(got["allreduce"][3] == (n,)
              and np.isclose(got["allreduce"][2], total * n * (n - 1) / 2)
              and got["allreduce"][1] == total * (n - 1), f"{label} allreduce {got['allreduce']}")
        check(got["mean"][0] == got["mean"][1] == total / size, f"{label} mean {got['mean']}")
        check(got["broadcast"][0] == got["broadcast"][1] == size - 1, f"{label} broadcast")
        want = total if rank == 0 else rank + 1
        check(got["reduce"][0] == got["reduce"][1] == want, f"{label} reduce rank {rank}")
        check(got["allgather"][3] == (size, n // 4)
              and np.isclose(got["allgather"][2], 10 * sum(range(size)) * (n // 4)),
              f"{label} allgather {got['allgather']}")
        check(got["strided"][0] == 0 and got["strided"][1] == total
              and got["strided"][2] == total * n, f"{label} strided {got['strided']}")


actors = [Member.remote(i) for i in range(W)]
check(sorted(ray.get([a.join.remote(W, i, "g") for i, a in enumerate(actors)])) ==
      list(range(W)))

SHM = os.environ.get("HPC_RAY_COLLECTIVE_SHM", "1") != "0"
def check_dtypes(got):
    """Every member's sum of ``dtypes()`` in every dtype, in that dtype."""
    for dtype in DTYPES:
        want = sum((np.arange(1000) % 7 + r).astype(dtype) for r in range(W)).astype(dtype)
        for r in range(W):
            check(got[r][dtype].dtype == np.dtype(dtype) and np.array_equal(got[r][dtype], want),
                  f"dtype {dtype}")


with section("several MB among the members, through the node's store"):
    for n in (3 << 17, 3 << 19):            # 3 MB, then 12 MB (chunks of the blocks)
        expect_big(ray.get([a.big.remote("g", n) for a in actors]), n, f"shm {n}")
    routes = ray.get([a.route.remote("g") for a in actors])
    check(routes == ["shm" if SHM else "rank"] * W, routes)
report("route", routes[0])

with section("dtypes, through the node's store"):
    got = ray.get([a.dtypes.remote("g") for a in actors])
    check_dtypes(got)

with section("2-D arrays, integer mean, a length that differs, through the node's store"):
    mean = sum(range(1, W + 1)) // W
    want = ([[mean] * 5] * 3, [[0.0, W], [2.0 * W, 3.0 * W]], "ValueError", [float(W)] * 4)
    got = ray.get([a.shapes.remote("g") for a in actors])
    check(got == [want] * W, got)

with section("members running ahead of each other, through the node's store"):
    wrong = ray.get([a.race.remote("g", 150) for a in actors])
    check(wrong == [[]] * W, wrong)

ray.get([a.through_rank.remote() for a in actors])
with section("several MB, cross-memory route"):
    for n in (3 << 17, 3 << 19):            # 3 MB, then 12 MB (the rank's buffer grows)
        expect_big(ray.get([a.big.remote("g", n) for a in actors]), n, f"cross {n}")

with section("several MB, store route"):
    ray.get([a.use_store.remote() for a in actors])
    for n in (3 << 17, 3 << 19):            # the scratch block grows and the old one goes back
        expect_big(ray.get([a.big.remote("g", n) for a in actors]), n, f"store {n}")

with section("dtypes"):
    got = ray.get([a.dtypes.remote("g") for a in actors])
    check_dtypes(got)
report("dtypes", len(DTYPES))

with section("calls that run a collective, back to back"):
    # Each call's result comes back in order and right, whether it goes straight
    # to the actor or through the head (a printed line goes through the rank).
    for k in range(40):
        if k % 10 == 9:
            got = ray.get([a.allreduce_and_print.remote("g", float(k)) for a in actors])
        else:
            got = ray.get([a.allreduce.remote("g", float(k)) for a in actors])
        check(got == [[float(k) * W] * 4] * W, f"step {k}: {got}")
    tasks = ray.tasks()
    check(all(t["State"] in ("FINISHED", "FAILED") for t in tasks.values()),
          [t for t in tasks.values() if t["State"] not in ("FINISHED", "FAILED")])
report("collective_calls", 40)

with section("two members on one rank"):
    # Not supported: a group has one member per rank. Both ways of forming such
    # a group fail at once with a ValueError that says so (nothing hangs).
    lights = [Member.options(num_cpus=0).remote(100 + i) for i in range(W + 1)]
    on = ray.get([a.rank.remote() for a in lights])
    i, j = next((i, j) for i in range(len(on)) for j in range(i + 1, len(on))
                if on[i] == on[j])  # W + 1 actors on W ranks: two share one
    pair = [lights[i], lights[j]]
    err = expect_raises(ValueError, col.create_collective_group, pair, 2, [0, 1],
                        group_name="pair")
    check("one actor per rank" in str(err), str(err))
    errs = ray.get([a.try_join.remote(2, k, "pair2") for k, a in enumerate(pair)])
    check(all(e is not None and e[0] == "ValueError" and "distinct MPI ranks" in e[1]
              for e in errs), errs)
    report("same_rank_refused", True)
    for a in lights:
        ray.kill(a)

ray.get([a.through_rank.remote(False) for a in actors])   # deaths on the default route
with section("a member dies"):
    # Three ways: it is gone before the others call, it dies while they wait,
    # it is killed while they wait. The survivors get an error naming the group,
    # then leave the broken group and form a new one without the dead member.
    survivors, group = actors, "g"
    for step, how in enumerate(("exit", "segv", "kill")):
        if len(survivors) < 2:
            break
        victim, rest = survivors[0], survivors[1:]
        if how == "exit":
            expect_raises(Exception, ray.get, victim.die.remote("exit"))
            errs = ray.get([a.allreduce.remote(group) for a in rest])
        else:
            waiting = [a.allreduce.remote(group) for a in rest]
            ready, _ = ray.wait(waiting, timeout=0.5)
            check(not ready, f"{how}: the others did not wait for the victim")
            if how == "segv":
                victim.die.remote("segv")
            else:
                ray.kill(victim)
            errs = ray.get(waiting)
        for e in errs:
            check(isinstance(e, tuple) and e[0] == "RayError" and repr(group) in e[1]
                  and "gone" in e[1] and "destroy" in e[1], f"{how}: {e}")
        # Broken stays broken (no hang on the second try either).
        errs = ray.get([a.allreduce.remote(group) for a in rest])
        check(all(isinstance(e, tuple) and e[0] == "RayError" for e in errs), f"{how} again")
        check(ray.get([a.leave.remote(group) for a in rest]) == [False] * len(rest))
        group = f"after-{how}"
        check(sorted(ray.get([a.join.remote(len(rest), i, group)
                              for i, a in enumerate(rest)])) == list(range(len(rest))))
        got = ray.get([a.allreduce.remote(group, 2.0) for a in rest])
        check(got == [[2.0 * len(rest)] * 4] * len(rest), f"after {how}: {got}")
        report(f"survived_{how}", len(rest))
        survivors = rest
    ray.get([a.leave.remote(group) for a in survivors])

ray.shutdown()
ok("collective_ordinary")
