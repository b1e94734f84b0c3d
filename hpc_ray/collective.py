"""Collective communication among actors on MPI (after ``ray.util.collective``).

A group is an MPI sub-communicator of the worker ranks that host its actors,
one actor per rank, made with ``MPI_Comm_create_group`` by exactly those ranks:

    driver:  create_collective_group(actors, world_size, ranks, group_name="g")
             ── head ── GROUP_CREATE(g, mpi_ranks) ──▶ each member rank: Create_group
    or, inside each actor:  init_collective_group(world_size, rank, group_name="g")
             ── CONTROL_CALL collective_join ──▶ head replies to all once all joined

Inside an actor that lives in its rank (``@remote(in_rank=True)``) an operation
is a direct MPI call on the tensor's own buffer (numpy arrays and PyTorch CPU
tensors, no copy) and ``get_communicator`` hands out the mpi4py communicator
itself. Inside an ordinary actor (an executor process, which has no MPI) the
buffer is sent to the actor's rank, which runs the operation and sends the
result back (two copies each way).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .exceptions import RayError
from .runtime import context
from .transport import messages as m
from .transport.tags import group_creation_tag

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


class ReduceOp:
    SUM = "sum"
    PRODUCT = "prod"
    PROD = "prod"
    MIN = "min"
    MAX = "max"
    MEAN = "mean"


_OPS = ("sum", "prod", "min", "max", "mean")


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


def _in_rank(ctx) -> bool:
    return ctx.in_rank


def init_collective_group(world_size: int, rank: int, backend: str = "mpi",
                          group_name: str = DEFAULT_GROUP) -> None:
    """Join a group from inside an actor; returns once all ``world_size`` joined."""
    _check_backend(backend)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
    ctx = _ctx()
    mpi_ranks = ctx.control("collective_join", group_name, world_size, rank, ctx.rank)
    if _in_rank(ctx):
        rank_create_group(ctx.loop, group_name, mpi_ranks)
    else:
        _executor_op(ctx, group_name, "create", mpi_ranks)


def _executor_op(ctx, group: str, op: str, *args) -> Any:
    ok, result = ctx._request(m.COLLECTIVE_OP, group, op, args)
    if not ok:
        raise result
    return result


def _group(loop, name: str):
    try:
        return loop.groups[name]
    except KeyError:
        raise ValueError(f"this actor (rank {loop.rank}) is not in a collective group named "
                         f"{name!r} (its groups: {sorted(loop.groups)}); create it with "
                         f"create_collective_group or init_collective_group first") from None


def is_group_initialized(group_name: str = DEFAULT_GROUP) -> bool:
    ctx = _ctx()
    if _in_rank(ctx):
        return group_name in ctx.loop.groups
    return _executor_op(ctx, group_name, "has")


def get_rank(group_name: str = DEFAULT_GROUP) -> int:
    """This actor's rank in the group, or -1 if it is not a member."""
    ctx = _ctx()
    if _in_rank(ctx):
        g = ctx.loop.groups.get(group_name)
        return -1 if g is None else g[1]
    return _executor_op(ctx, group_name, "rank")


def get_collective_group_size(group_name: str = DEFAULT_GROUP) -> int:
    ctx = _ctx()
    if _in_rank(ctx):
        g = ctx.loop.groups.get(group_name)
        return -1 if g is None else g[0].Get_size()
    return _executor_op(ctx, group_name, "size")


def get_communicator(group_name: str = DEFAULT_GROUP) -> "MPI.Comm":
    """The group's mpi4py communicator (for actors created with ``in_rank=True``)."""
    ctx = _ctx()
    if not _in_rank(ctx):
        raise RayError("get_communicator() needs an actor that lives in its rank: "
                       "create it with @remote(in_rank=True); ordinary actors run in a "
                       "process without MPI")
    return _group(ctx.loop, group_name)[0]


def destroy_collective_group(group_name: str = DEFAULT_GROUP) -> None:
    ctx = _ctx()
    if _in_rank(ctx):
        rank_destroy_group(ctx.loop, group_name)
    else:
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


def _run(op: str, tensor, group_name: str, **kw) -> None:
    arr, _ = _as_array(tensor)
    ctx = _ctx()
    if _in_rank(ctx):
        comm, _rank = _group(ctx.loop, group_name)
        _apply(comm, group_name, op, arr, polite=_polite(ctx.loop), **kw)
        return
    if not arr.flags.writeable:
        raise ValueError(f"{op} works in place: the array is read-only (copy it first)")
    result = _executor_op(ctx, group_name, op, arr.tobytes(), arr.dtype.str, arr.shape, kw)
    if result is not None:
        np.copyto(arr, np.frombuffer(result, dtype=arr.dtype).reshape(arr.shape))


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
    if _in_rank(ctx):
        comm, _ = _group(ctx.loop, group_name)
        out = _apply(comm, group_name, "allgather", arr, polite=_polite(ctx.loop))
    else:
        raw = _executor_op(ctx, group_name, "allgather", arr.tobytes(), arr.dtype.str,
                           arr.shape, {})
        out = np.frombuffer(raw, dtype=arr.dtype).reshape((-1,) + arr.shape)
    if len(tensor_list) != len(out):
        raise ValueError(f"tensor_list has {len(tensor_list)} entries but the group has "
                         f"{len(out)} members")
    for dest, piece in zip(tensor_list, out):
        np.copyto(_as_array(dest)[0], piece)


def barrier(group_name: str = DEFAULT_GROUP) -> None:
    ctx = _ctx()
    if _in_rank(ctx):
        _group(ctx.loop, group_name)[0].Barrier()
    else:
        _executor_op(ctx, group_name, "barrier")


# --- rank side --------------------------------------------------------------------------

def _mpi():
    from mpi4py import MPI
    return MPI


def rank_create_group(loop, name: str, mpi_ranks: list[int]) -> None:
    if name in loop.groups:
        raise ValueError(f"collective group {name!r} already exists on rank {loop.rank}")
    if loop.rank not in mpi_ranks:
        raise ValueError(f"rank {loop.rank} is not a member of group {name!r} ({mpi_ranks})")
    world = loop.comm
    # The tag keeps concurrent creations of different groups apart; it lies in a
    # range no control or object-data message uses.
    comm = world.Create_group(world.Get_group().Incl(mpi_ranks), group_creation_tag(name))
    loop.groups[name] = (comm, comm.Get_rank())


def rank_destroy_group(loop, name: str) -> None:
    g = loop.groups.pop(name, None)
    if g is not None:
        g[0].Free()


def rank_run_op(loop, group: str, op: str, args: tuple) -> tuple[bool, Any]:
    """Run a collective for an executor; the reply is ``(ok, result or exception)``."""
    try:
        if op == "create":
            rank_create_group(loop, group, args[0])
            return True, None
        if op == "has":
            return True, group in loop.groups
        if op == "destroy":
            rank_destroy_group(loop, group)
            return True, None
        if op == "rank":
            g = loop.groups.get(group)
            return True, -1 if g is None else g[1]
        if op == "size":
            g = loop.groups.get(group)
            return True, -1 if g is None else g[0].Get_size()
        comm, _ = _group(loop, group)
        if op == "barrier":
            comm.Barrier()
            return True, None
        raw, dtype, shape, kw = args
        arr = np.frombuffer(bytearray(raw), dtype=np.dtype(dtype)).reshape(shape)
        out = _apply(comm, group, op, arr, polite=_polite(loop), **kw)
        return True, (out if out is not None else arr).tobytes()
    except Exception as exc:  # returned to the actor and raised there
        return False, exc


def _check_same(comm, group: str, op: str, arr: np.ndarray) -> None:
    metas = comm.allgather((arr.shape, arr.dtype.str))
    if any(meta != metas[0] for meta in metas):
        raise ValueError(f"{op} in collective group {group!r}: shapes and dtypes differ "
                         f"across members: {[f'{s}/{d}' for s, d in metas]}")


def _mpi_op(name: str):
    MPI = _mpi()
    if name not in _OPS:
        raise ValueError(f"unknown reduce op {name!r} (valid: {list(_OPS)})")
    return {"sum": MPI.SUM, "mean": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN,
            "max": MPI.MAX}[name]


def _polite(loop) -> bool:
    """Wait for collectives by yielding the CPU when the node runs more ranks than cores.

    MPICH's blocking collectives busy-poll; on an oversubscribed node the ranks a
    collective waits for then lose their time slices to the pollers (measured on
    2 cores with 3-4 processes: 2-3x slower steps). HPC_RAY_YIELDING_COLLECTIVES=1/0
    forces it on or off.
    """
    flag = getattr(loop, "polite_collectives", None)
    if flag is None:
        from . import _config
        forced = _config.os_environ_get("YIELDING_COLLECTIVES", None, int)
        if forced is not None:
            flag = bool(forced)
        else:
            node_of = loop.cfg.get("node_of") or []
            on_node = sum(1 for n in node_of if n == loop.node) or 1
            try:
                cores = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cores = 1
            flag = on_node > cores
        loop.polite_collectives = flag
    return flag


def _call(comm, name: str, polite: bool, *args, **kw) -> None:
    """``comm.<name>(...)`` blocking, or its nonblocking form waited for politely."""
    if not polite:
        getattr(comm, name)(*args, **kw)
        return
    req = getattr(comm, "I" + name[0].lower() + name[1:])(*args, **kw)
    while not req.Test():
        os.sched_yield()


def _apply(comm, group: str, op: str, arr: np.ndarray, reduce_op: str = "sum",
           root: int = 0, polite: bool = False) -> np.ndarray | None:
    MPI = _mpi()
    _check_same(comm, group, op, arr)
    work = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    if op == "allreduce":
        _call(comm, "Allreduce", polite, MPI.IN_PLACE, work, op=_mpi_op(reduce_op))
        if reduce_op == "mean":
            _divide(work, comm.Get_size())
    elif op == "reduce":
        mop = _mpi_op(reduce_op)
        if comm.Get_rank() == root:
            _call(comm, "Reduce", polite, MPI.IN_PLACE, work, op=mop, root=root)
            if reduce_op == "mean":
                _divide(work, comm.Get_size())
        else:
            _call(comm, "Reduce", polite, work, None, op=mop, root=root)
    elif op == "broadcast":
        _call(comm, "Bcast", polite, work, root=root)
    elif op == "allgather":
        out = np.empty((comm.Get_size(),) + work.shape, dtype=work.dtype)
        _call(comm, "Allgather", polite, work, out)
        return out
    else:
        raise ValueError(f"unknown collective {op!r}")
    if work is not arr:
        np.copyto(arr, work)
    return None


def _divide(arr: np.ndarray, n: int) -> None:
    if np.issubdtype(arr.dtype, np.integer):
        arr //= n
    else:
        arr /= n
