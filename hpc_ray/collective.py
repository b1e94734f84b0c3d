"""Collective communication among actors on MPI (after ``ray.util.collective``).

A group is an MPI sub-communicator of the worker ranks that host its actors,
one actor per rank, made with ``MPI_Comm_create_group`` by exactly those ranks:

    driver:  create_collective_group(actors, world_size, ranks, group_name="g")
             ── head ── GROUP_CREATE(g, mpi_ranks, actor_ids) ──▶ each member rank: Create_group
    or, inside each actor:  init_collective_group(world_size, rank, group_name="g")
             ── CONTROL_CALL collective_join ──▶ head replies to all once all joined

Ordinary actors (executor processes, which have no MPI) take one of three routes:

    all members on one node (Linux, x86-64): the executors run every operation
        among themselves, through one block each of the
        node's shared-memory store, in cache-sized chunks, with flags in shared
        memory (``runtime/collective_shm.py``); the ranks only set the group up
        on its first operation. No message, no rank woken per operation.
    members on several nodes (Linux, x86-64), two or more on some node:
        every operation runs through the store among each node's members, and
        over MPI only between one leader per node, whose rank runs it on the
        leaders' communicator (``runtime/collective_nodes.py``).
    otherwise (``HPC_RAY_COLLECTIVE_SHM=0``): a request to the
        actor's rank, which copies the tensor straight out of the executor's
        memory (``process_vm_readv``) into its own buffer, runs the MPI operation
        there and copies the result back (``runtime/collective_buffers.py``).

Inside an actor that lives in its rank (``@remote(in_rank=True)``) an operation
is a direct MPI call on the tensor's own buffer, and ``get_communicator`` hands
out the mpi4py communicator itself. Numpy arrays and PyTorch CPU tensors, on
every route.

If an ordinary member dies (a crash, ``ray.kill``), the others' operations in
its groups raise a ``RayError`` instead of waiting for it forever
(``runtime/collective_ops.py``, ``runtime/collective_shm.py``).

    @ray.remote(num_cpus=1)
    class Replica:
        def __init__(self, rank, world_size):
            col.init_collective_group(world_size, rank, group_name="g")
            self.grad = np.zeros(4 << 20, np.float32)           # 16 MB
        def step(self):
            ...                                                # fill self.grad
            col.allreduce(self.grad, "g", col.ReduceOp.MEAN)   # in place, on every member

    replicas = [Replica.remote(r, 3) for r in range(3)]       # mpiexec -n 4 (rank 0: head)
    ray.get([r.step.remote() for r in replicas])

``benchmarks/allreduce.py`` times exactly this loop against raw mpi4py on the
same number of processes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .exceptions import RayError
from .runtime import collective_buffers, collective_shm, context
from .transport import messages as m
from .runtime.collective_ops import _apply, _group, rank_create_group, rank_destroy_group

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = [
    "ReduceOp", "allgather", "allreduce", "barrier", "broadcast",
    "create_collective_group", "destroy_collective_group", "get_collective_group_size",
    "get_communicator", "get_rank", "init_collective_group", "is_group_initialized",
    "reduce",
]

#: Group name used when none is given (as in ray.util.collective).
DEFAULT_GROUP = "default"
#: A group this executor has not set up yet (``_shm_group``).
_UNSET = object()


class ReduceOp:
    SUM = "sum"
    PRODUCT = "prod"
    PROD = "prod"
    MIN = "min"
    MAX = "max"
    MEAN = "mean"


def _check_backend(backend: str) -> None:
    if backend not in ("mpi", "auto"):
        raise ValueError(f"unknown collective backend {backend!r} (valid: ['mpi', 'auto'])")


# --- driver side --------------------------------------------------------------------

def create_collective_group(actors: list, world_size: int, ranks: list[int],
                            backend: str = "mpi", group_name: str = DEFAULT_GROUP) -> None:
    """Declare a group of actors from the driver; ``ranks[i]`` is actors[i]'s rank in it.

    Raises:
        ValueError: sizes disagree, ranks are not 0..world_size-1, or two actors
            share an MPI rank (a group needs one actor per rank).
    """
    from .actors import ActorHandle
    _check_backend(backend)
    if len(actors) != world_size or len(ranks) != world_size:
        raise ValueError(f"world_size is {world_size} but got {len(actors)} actors and "
                         f"{len(ranks)} ranks")
    if sorted(ranks) != list(range(world_size)):
        raise ValueError(f"ranks must be a permutation of 0..{world_size - 1}, got {ranks!r}")
    for a in actors:
        if not isinstance(a, ActorHandle):
            raise TypeError(f"create_collective_group takes actor handles, got "
                            f"{type(a).__name__}")
    ordered = [a for _, a in sorted(zip(ranks, actors), key=lambda p: p[0])]
    context.current().control("collective_create", group_name,
                              [a._actor_id for a in ordered])


# --- inside actors --------------------------------------------------------------------

def _ctx():
    ctx = context.current()
    if ctx.is_driver:
        raise RayError("collective operations run inside actors, not on the driver")
    return ctx


def init_collective_group(world_size: int, rank: int, backend: str = "mpi",
                          group_name: str = DEFAULT_GROUP) -> None:
    """Join a group from inside an actor; returns once all ``world_size`` joined."""
    _check_backend(backend)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
    ctx = _ctx()
    mpi_ranks = ctx.control("collective_join", group_name, world_size, rank, ctx.rank)
    if ctx.in_rank:
        rank_create_group(ctx.loop, group_name, mpi_ranks)
    else:
        ctx.collective_groups.pop(group_name, None)
        _executor_op(ctx, group_name, "create", mpi_ranks)


def _executor_op(ctx, group: str, op: str, *args) -> Any:
    ok, result = ctx._request(m.COLLECTIVE_OP, group, op, args)
    if not ok:
        raise result
    return result


def _shm_group(ctx, group: str):
    """The group's route among this node's executors, set up on its first
    operation; None: through the rank."""
    shm = ctx.collective_groups.get(group, _UNSET)
    if shm is _UNSET:
        # Before the first operation on every member, whatever its route.
        shm = ctx.collective_groups[group] = collective_shm.setup(
            ctx, group, lambda info: _executor_op(ctx, group, "setup", info))
    if shm is None or not ctx.collective_shm:
        return None
    if shm.broken is not None:
        # Before an operation that goes through the ranks (allgather across
        # nodes): the ranks of a broken group do not all know it.
        raise RayError(shm.broken)
    return shm


def is_group_initialized(group_name: str = DEFAULT_GROUP) -> bool:
    ctx = _ctx()
    if ctx.in_rank:
        return group_name in ctx.loop.groups
    return _executor_op(ctx, group_name, "has")


def get_rank(group_name: str = DEFAULT_GROUP) -> int:
    """This actor's rank in the group, or -1 if it is not a member."""
    ctx = _ctx()
    if ctx.in_rank:
        g = ctx.loop.groups.get(group_name)
        return -1 if g is None else g[1]
    return _executor_op(ctx, group_name, "rank")


def get_collective_group_size(group_name: str = DEFAULT_GROUP) -> int:
    ctx = _ctx()
    if ctx.in_rank:
        g = ctx.loop.groups.get(group_name)
        return -1 if g is None else g[0].Get_size()
    return _executor_op(ctx, group_name, "size")


def get_communicator(group_name: str = DEFAULT_GROUP) -> "MPI.Comm":
    """The group's mpi4py communicator (for actors created with ``in_rank=True``)."""
    ctx = _ctx()
    if not ctx.in_rank:
        raise RayError("get_communicator() needs an actor that lives in its rank: "
                       "create it with @remote(in_rank=True); ordinary actors run in a "
                       "process without MPI")
    return _group(ctx.loop, group_name)[0]


def destroy_collective_group(group_name: str = DEFAULT_GROUP) -> None:
    ctx = _ctx()
    if ctx.in_rank:
        rank_destroy_group(ctx.loop, group_name)
    else:
        ctx.collective_groups.pop(group_name, None)   # its store block goes back
        _executor_op(ctx, group_name, "destroy")


def _as_array(tensor) -> tuple[np.ndarray, Any]:
    """A numpy view of ``tensor``'s memory (numpy array or CPU torch tensor)."""
    if isinstance(tensor, np.ndarray):
        return tensor, None
    mod = type(tensor).__module__
    if mod.startswith("torch"):
        if tensor.device.type != "cpu":
            raise TypeError("only CPU tensors are supported by the MPI backend")
        return tensor.detach().numpy(), tensor
    raise TypeError(f"collectives take numpy arrays or torch tensors, got "
                    f"{type(tensor).__name__}")


def _run(op: str, tensor, group_name: str, reduce_op: str = "sum", root: int = 0) -> None:
    arr = tensor if type(tensor) is np.ndarray else _as_array(tensor)[0]
    ctx = _ctx()
    if ctx.in_rank:
        comm, _rank = _group(ctx.loop, group_name)
        _apply(ctx.loop, comm, group_name, op, arr, reduce_op=reduce_op, root=root)
        return
    flags = arr.flags
    if not flags.writeable:
        raise ValueError(f"{op} works in place: the array is read-only (copy it first)")
    shm = _shm_group(ctx, group_name)
    if shm is not None and op in shm.OPS:
        work = arr if flags.c_contiguous else np.ascontiguousarray(arr)
        shm.run(op, work, reduce_op, root)
        if work is not arr:
            np.copyto(arr, work)
        return
    collective_buffers.run(ctx, group_name, op, arr, {"reduce_op": reduce_op, "root": root})


def allreduce(tensor, group_name: str = DEFAULT_GROUP, op: str = ReduceOp.SUM) -> None:
    """Reduce ``tensor`` over the group, in place, on every member."""
    _run("allreduce", tensor, group_name, reduce_op=op)


def reduce(tensor, dst_rank: int = 0, group_name: str = DEFAULT_GROUP,
           op: str = ReduceOp.SUM) -> None:
    """Reduce into ``tensor`` on ``dst_rank``; the others' tensors are unchanged."""
    _run("reduce", tensor, group_name, reduce_op=op, root=dst_rank)


def broadcast(tensor, src_rank: int = 0, group_name: str = DEFAULT_GROUP) -> None:
    """Copy ``src_rank``'s tensor into every member's, in place."""
    _run("broadcast", tensor, group_name, root=src_rank)


def allgather(tensor_list: list, tensor, group_name: str = DEFAULT_GROUP) -> None:
    """Fill ``tensor_list[i]`` with member i's ``tensor``, on every member."""
    arr, _ = _as_array(tensor)
    ctx = _ctx()
    if ctx.in_rank:
        comm, _ = _group(ctx.loop, group_name)
        out = _apply(ctx.loop, comm, group_name, "allgather", arr)
    else:
        # Not a member (size -1): the rank raises that before touching any memory.
        size = max(1, _executor_op(ctx, group_name, "size"))
        shm = _shm_group(ctx, group_name) if size > 1 else None
        if shm is not None and "allgather" in shm.OPS:
            out = shm.allgather(arr if arr.flags.c_contiguous else np.ascontiguousarray(arr))
        else:
            out = collective_buffers.run(ctx, group_name, "allgather", arr, {}, members=size)
    if len(tensor_list) != len(out):
        raise ValueError(f"tensor_list has {len(tensor_list)} entries but the group has "
                         f"{len(out)} members")
    for dest, piece in zip(tensor_list, out):
        np.copyto(_as_array(dest)[0], piece)


def barrier(group_name: str = DEFAULT_GROUP) -> None:
    ctx = _ctx()
    if ctx.in_rank:
        _apply(ctx.loop, _group(ctx.loop, group_name)[0], group_name, "barrier", np.empty(0))
        return
    shm = _shm_group(ctx, group_name)
    if shm is not None and "barrier" in shm.OPS:
        shm.run("barrier", np.empty(0))
    else:
        _executor_op(ctx, group_name, "barrier")
