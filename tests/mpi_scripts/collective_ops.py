"""Issue 6 collectives: every op and dtype against numpy references, in in-rank
actors (direct MPI) and in ordinary actors (shipped to the rank), several
groups at once (overlapping, reversed ranks, groups of one), and the errors.

Usage: collective_ops.py [--torch]   (--torch also checks CPU torch tensors)
"""
import faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import sys

import numpy as np
from _harness import NUM_WORKERS, check, expect_raises, init_kwargs, ok, report, section

import hpc_ray as ray
from hpc_ray import collective as col
from hpc_ray.exceptions import RayError, TaskError

WITH_TORCH = "--torch" in sys.argv
if WITH_TORCH:
    import importlib.util
    WITH_TORCH = importlib.util.find_spec("torch") is not None

DTYPES = ("float32", "float64", "int32", "int64")
OPS = ("sum", "prod", "min", "max", "mean")
SHAPE = (3, 5)
W = NUM_WORKERS

ray.init(**init_kwargs())
report("with_torch", WITH_TORCH)
COMPARED = [0]


def data(seed, rank, dtype):
    """What member ``rank`` contributes: small integers, so sums and products
    are exact in every dtype and any summation order."""
    rng = np.random.default_rng(1000 * seed + rank)
    return rng.integers(1, 5, size=SHAPE).astype(dtype)


def reference(op, arrays):
    stack = np.stack(arrays)
    if op == "sum":
        return stack.sum(axis=0, dtype=stack.dtype)
    if op == "prod":
        return stack.prod(axis=0, dtype=stack.dtype)
    if op == "min":
        return stack.min(axis=0)
    if op == "max":
        return stack.max(axis=0)
    total = stack.sum(axis=0, dtype=stack.dtype)
    if np.issubdtype(stack.dtype, np.integer):
        return total // len(arrays)  # integer mean: floor, like ``//``
    return total / np.array(len(arrays), dtype=stack.dtype)


class Member:
    def __init__(self, index):
        self.index = index

    def ping(self):
        return self.index

    def join(self, world_size, rank, group):
        col.init_collective_group(world_size, rank, group_name=group)
        return self.info(group)

    def info(self, group):
        return (col.get_rank(group), col.get_collective_group_size(group),
                col.is_group_initialized(group))

    def run_ops(self, group, seed):
        """Every op and dtype once; returns the arrays each produced here."""
        rank = col.get_rank(group)
        size = col.get_collective_group_size(group)
        out = {}
        for dtype in DTYPES:
            for op in OPS:
                a = data(seed, rank, dtype)
                col.allreduce(a, group, op)
                out[f"allreduce/{op}/{dtype}"] = a
            for op in ("sum", "max"):
                a = data(seed, rank, dtype)
                col.reduce(a, size - 1, group, op)
                out[f"reduce/{op}/{dtype}"] = a
            a = data(seed, rank, dtype)
            col.broadcast(a, size // 2, group)
            out[f"broadcast/{dtype}"] = a
            parts = [np.zeros(SHAPE, dtype=dtype) for _ in range(size)]
            col.allgather(parts, data(seed, rank, dtype), group)
            out[f"allgather/{dtype}"] = np.stack(parts)
        col.barrier(group)
        # A non-contiguous view is reduced in place too.
        base = np.zeros((SHAPE[0], 2 * SHAPE[1]), dtype="float64")
        view = base[:, ::2]
        view[...] = data(seed, rank, "float64")
        col.allreduce(view, group)
        out["allreduce/strided"] = base
        return out

    def interleave(self, groups, seed):
        """Alternate ops between groups this actor is in (several groups at once)."""
        out = {}
        for step in range(3):
            for g in groups:
                a = data(seed + step, col.get_rank(g), "float64")
                col.allreduce(a, g)
                out[f"{g}/{step}"] = a
        return out

    def torch_ops(self, group, seed):
        import torch
        rank = col.get_rank(group)
        size = col.get_collective_group_size(group)
        out = {}
        for dtype in ("float32", "int64"):
            t = torch.from_numpy(data(seed, rank, dtype))
            col.allreduce(t, group)
            out[f"allreduce/{dtype}"] = t.numpy().copy()
            t = torch.from_numpy(data(seed, rank, dtype))
            col.broadcast(t, 0, group)
            out[f"broadcast/{dtype}"] = t.numpy().copy()
            parts = [torch.zeros(SHAPE, dtype=getattr(torch, dtype)) for _ in range(size)]
            col.allgather(parts, torch.from_numpy(data(seed, rank, dtype)), group)
            out[f"allgather/{dtype}"] = np.stack([p.numpy() for p in parts])
        return out

    def comm_info(self, group):
        comm = col.get_communicator(group)
        # Plain mpi4py on the group's communicator.
        return (type(comm).__name__, comm.Get_rank(), comm.Get_size(),
                comm.allreduce(self.index), comm.bcast(self.index, root=0))

    def error(self, what, group):
        """Trigger one error; return (exception type, message) or None."""
        rank = col.get_rank(group)
        try:
            if what == "shape":
                col.allreduce(np.zeros(3 + rank, dtype="float32"), group)
            elif what == "dtype":
                col.allreduce(np.zeros(3, dtype="float32" if rank else "float64"), group)
            elif what == "not_member":
                col.allreduce(np.zeros(3), "no-such-group")
            elif what == "bad_op":
                col.allreduce(np.zeros(3), group, "median")
            elif what == "not_array":
                col.allreduce([1.0, 2.0], group)
            elif what == "gather_list":
                col.allgather([np.zeros(3)], np.zeros(3), group)
            elif what == "read_only":
                a = np.zeros(3)
                a.flags.writeable = False
                col.allreduce(a, group)
            elif what == "bad_backend":
                col.init_collective_group(2, 0, backend="nccl", group_name="x")
            elif what == "communicator":
                col.get_communicator(group)
            else:
                raise AssertionError(what)
        except Exception as exc:
            return type(exc).__name__, str(exc)
        return None

    def raise_not_member(self):
        col.allreduce(np.zeros(3), "no-such-group")

    def leave(self, group):
        col.destroy_collective_group(group)
        return col.is_group_initialized(group), col.get_rank(group)


def check_results(results_by_rank, seed, label):
    """Compare what each group member returned with numpy references."""
    size = len(results_by_rank)
    COMPARED[0] += sum(len(res) for res in results_by_rank)
    for dtype in DTYPES:
        inputs = [data(seed, r, dtype) for r in range(size)]
        for op in OPS:
            want = reference(op, inputs)
            for r, res in enumerate(results_by_rank):
                got = res[f"allreduce/{op}/{dtype}"]
                check(got.dtype == np.dtype(dtype) and np.array_equal(got, want),
                      f"{label} allreduce {op} {dtype} rank {r}: {got} != {want}")
        for op in ("sum", "max"):
            want = reference(op, inputs)
            for r, res in enumerate(results_by_rank):
                got = res[f"reduce/{op}/{dtype}"]
                expected = want if r == size - 1 else inputs[r]
                check(np.array_equal(got, expected), f"{label} reduce {op} {dtype} rank {r}")
        for r, res in enumerate(results_by_rank):
            check(np.array_equal(res[f"broadcast/{dtype}"], inputs[size // 2]),
                  f"{label} broadcast {dtype} rank {r}")
            check(np.array_equal(res[f"allgather/{dtype}"], np.stack(inputs)),
                  f"{label} allgather {dtype} rank {r}")
    want = sum(data(seed, r, "float64") for r in range(size))
    for r, res in enumerate(results_by_rank):
        base = res["allreduce/strided"]
        check(np.array_equal(base[:, ::2], want) and not base[:, 1::2].any(),
              f"{label} strided allreduce rank {r}")


def exercise(kind, options):
    """Groups, ops and errors with ``W`` actors of one kind; returns nothing."""
    cls = ray.remote(num_cpus=1, **options)(Member)
    actors = [cls.remote(i) for i in range(W)]
    check(ray.get([a.ping.remote() for a in actors]) == list(range(W)), kind)

    # A group joined from inside the actors, and one declared by the driver
    # on the same actors with the ranks reversed.
    infos = ray.get([a.join.remote(W, i, "all") for i, a in enumerate(actors)])
    check(infos == [(i, W, True) for i in range(W)], f"{kind} join: {infos}")
    col.create_collective_group(actors, W, list(reversed(range(W))), group_name="rev")
    infos = ray.get([a.info.remote("rev") for a in actors])
    check(infos == [(W - 1 - i, W, True) for i in range(W)], f"{kind} rev: {infos}")
    # Two disjoint halves (groups of one when W == 2), used at the same time.
    half = max(1, W // 2)
    first, second = actors[:half], actors[half:]
    col.create_collective_group(first, len(first), list(range(len(first))),
                                group_name="first")
    col.create_collective_group(second, len(second), list(range(len(second))),
                                group_name="second")

    with section(f"{kind} ops"):
        refs_all = [a.run_ops.remote("all", 1) for a in actors]
        refs_rev = [a.run_ops.remote("rev", 2) for a in actors]
        refs_first = [a.run_ops.remote("first", 3) for a in first]
        refs_second = [a.run_ops.remote("second", 4) for a in second]
        check_results(ray.get(refs_all), 1, f"{kind}/all")
        check_results(list(reversed(ray.get(refs_rev))), 2, f"{kind}/rev")
        check_results(ray.get(refs_first), 3, f"{kind}/first")
        check_results(ray.get(refs_second), 4, f"{kind}/second")

    with section(f"{kind} interleaved groups"):
        refs = [a.interleave.remote(["all", "rev", "first" if i < half else "second"], 7)
                for i, a in enumerate(actors)]
        got = ray.get(refs)
        for step in range(3):
            total = sum(data(7 + step, r, "float64") for r in range(W))
            for i in range(W):
                check(np.array_equal(got[i][f"all/{step}"], total), f"{kind} interleave all")
                check(np.array_equal(got[i][f"rev/{step}"], total), f"{kind} interleave rev")
            for members, name in ((first, "first"), (second, "second")):
                part = sum(data(7 + step, r, "float64") for r in range(len(members)))
                for i, a in enumerate(actors):
                    if a in members:
                        check(np.array_equal(got[i][f"{name}/{step}"], part),
                              f"{kind} interleave {name}")

    if WITH_TORCH:
        with section(f"{kind} torch"):
            got = ray.get([a.torch_ops.remote("all", 5) for a in actors])
            for dtype in ("float32", "int64"):
                inputs = [data(5, r, dtype) for r in range(W)]
                for r in range(W):
                    check(np.array_equal(got[r][f"allreduce/{dtype}"], sum(inputs)),
                          f"{kind} torch allreduce {dtype}")
                    check(np.array_equal(got[r][f"broadcast/{dtype}"], inputs[0]),
                          f"{kind} torch broadcast {dtype}")
                    check(np.array_equal(got[r][f"allgather/{dtype}"], np.stack(inputs)),
                          f"{kind} torch allgather {dtype}")

    with section(f"{kind} errors"):
        # Collective errors: every member calls, every member gets a ValueError.
        for what, exc_name, words in (("shape", "ValueError", "shapes"),
                                      ("dtype", "ValueError", "differ"),
                                      ("not_member", "ValueError", "not in a collective"),
                                      ("bad_op", "ValueError", "median"),
                                      ("not_array", "TypeError", "list"),
                                      ("gather_list", "ValueError", "tensor_list"),
                                      ("bad_backend", "ValueError", "nccl")):
            if what in ("shape", "dtype", "gather_list") and W == 1:
                continue
            errs = ray.get([a.error.remote(what, "all") for a in actors])
            for e in errs:
                check(e is not None and e[0] == exc_name and words in e[1],
                      f"{kind} {what}: {e}")
        if kind == "executor":
            errs = ray.get([a.error.remote("communicator", "all") for a in actors])
            check(all(e is not None and e[0] == "RayError" and "in_rank" in e[1]
                      for e in errs), f"communicator in an executor: {errs}")
            errs = ray.get([a.error.remote("read_only", "all") for a in actors])
            check(all(e is not None and e[0] == "ValueError" for e in errs), errs)
        else:
            infos = ray.get([a.comm_info.remote("rev") for a in actors])
            want_sum = sum(range(W))
            check(infos == [("Intracomm", W - 1 - i, W, want_sum, W - 1) for i in range(W)],
                  f"get_communicator: {infos}")
        # An error raised in the method reaches the driver as a TaskError that is
        # also a ValueError.
        err = expect_raises(ValueError, ray.get, actors[0].raise_not_member.remote())
        check(isinstance(err, TaskError), repr(err))
        # The groups still work after the errors.
        refs = [a.interleave.remote(["all"], 9) for a in actors]
        got = ray.get(refs)
        check(all(np.array_equal(g["all/0"], sum(data(9, r, "float64") for r in range(W)))
                  for g in got), f"{kind} after errors")

    # Leave every group (an actor's groups live in its rank: free them), end.
    left = ray.get([a.leave.remote(g) for a in actors for g in ("all", "rev")])
    left += ray.get([a.leave.remote("first") for a in first])
    left += ray.get([a.leave.remote("second") for a in second])
    check(all(x == (False, -1) for x in left), f"{kind} leave: {left}")
    for a in actors:
        ray.kill(a)


with section("driver-side errors"):
    expect_raises(RayError, col.allreduce, np.zeros(3))
    expect_raises(ValueError, col.create_collective_group, [], 2, [0, 1])
    cls = ray.remote(num_cpus=0)(Member)
    a, b = cls.remote(0), cls.remote(1)
    ray.get([a.ping.remote(), b.ping.remote()])
    expect_raises(ValueError, col.create_collective_group, [a, b], 2, [0, 0])
    expect_raises(ValueError, col.create_collective_group, [a, b], 2, [0, 1],
                  backend="gloo")
    expect_raises(TypeError, col.create_collective_group, [a, "b"], 2, [0, 1])
    ray.kill(a)
    ray.kill(b)

exercise("in_rank", {"in_rank": True})
exercise("executor", {})

if W >= 2:
    with section("a group of an in-rank actor and ordinary ones"):
        # Member 0 lives in its rank, the others are executors: the group keeps
        # MPI (the executors do not run it among themselves) and sums right.
        mixed = [ray.remote(num_cpus=1, in_rank=True)(Member).remote(0)] + \
            [ray.remote(num_cpus=1)(Member).remote(i) for i in range(1, W)]
        infos = ray.get([a.join.remote(W, i, "mixed") for i, a in enumerate(mixed)])
        check(infos == [(i, W, True) for i in range(W)], f"mixed join: {infos}")
        got = ray.get([a.interleave.remote(["mixed"], 11) for a in mixed])
        for step in range(3):
            total = sum(data(11 + step, r, "float64") for r in range(W))
            check(all(np.array_equal(g[f"mixed/{step}"], total) for g in got),
                  f"mixed step {step}")
        check(ray.get([a.leave.remote("mixed") for a in mixed]) == [(False, -1)] * W)
        for a in mixed:
            ray.kill(a)
    report("mixed", True)

report("compared", COMPARED[0])
ray.shutdown()
ok("collective_ops")
