"""Collectives as a worker rank runs them: on its groups' MPI communicators.

The rank side of ``hpc_ray.collective``: a rank makes a group's communicator
(``MPI_Comm_create_group``) and runs collectives on it, for an actor living in
the rank (``in_rank=True``) or on behalf of one of its executors
(``COLLECTIVE_OP``, answered with the result; ``collective_buffers`` moves the
tensor). Executors of one node run their groups' operations among themselves
(``collective_shm``); their ranks only set such a group up (``setup``). In a
group of executors on several nodes (``collective_nodes``), setup also makes the
communicator of one leader rank per node, and only the leaders' ranks run the
group's operations, on it (``leaders:<op>``).

Every operation (barrier included) starts with a small header exchange among
the members, ``Iallgather`` of (status, shape/dtype signature): it checks that
the members agree, and it is how a dead member is reported instead of waited
for. When an ordinary actor's executor dies, its rank posts one header saying
"gone" for each of the actor's groups (``rank_abandon_groups``) and leaves it
pending; the others' next operation in the group completes that exchange and
fails with a RayError naming the member, and the group is broken from then on
(on every member: destroy it and make a new one).

Every wait for a nonblocking operation goes through ``wait.wait_until`` with a
liveness check: a member rank on this host whose process is gone, or a driver
on this host that is gone, ends the wait with a RayError instead of a spin that
never ends (the members' pids are gathered when the group is made). A member
rank on another host that dies is MPI's to report (mpiexec ends the job). The
blocking forms (``_call`` with ``_BLOCK``) are MPI's own waits, as raw
mpi4py's are.
"""
from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np

from ..exceptions import RayError
from ..transport.tags import group_creation_tag
from ..transport.wait import wait_until
from . import collective_buffers
from .collective_nodes import LEADERS, plan
from .collective_shm import _alive
from .collective_shm import signature as op_signature

_OPS = ("sum", "prod", "min", "max", "mean")
#: Header status: the member is there; its actor is gone (the header its rank
#: posts for it).
_PRESENT, _GONE = 0, 1


def _group(loop, name: str):
    try:
        return loop.groups[name]
    except KeyError:
        raise ValueError(f"this actor (rank {loop.rank}) is not in a collective group named "
                         f"{name!r} (its groups: {sorted(loop.groups)}); create it with "
                         f"create_collective_group or init_collective_group first") from None


def _mpi():
    from mpi4py import MPI
    return MPI


def rank_create_group(loop, name: str, mpi_ranks: list[int], owner=None) -> None:
    """Make group ``name``'s communicator; ``owner`` is the member executor here
    (None for an in-rank actor), whose death breaks the group."""
    if name in loop.groups:
        raise ValueError(f"collective group {name!r} already exists on rank {loop.rank}")
    if loop.rank not in mpi_ranks:
        raise ValueError(f"rank {loop.rank} is not a member of group {name!r} ({mpi_ranks})")
    world = loop.comm
    # The tag keeps concurrent creations of different groups apart; it lies in a
    # range no control or object-data message uses.
    comm = world.Create_group(world.Get_group().Incl(mpi_ranks), group_creation_tag(name))
    loop.groups[name] = (comm, comm.Get_rank())
    loop.group_owners[name] = owner
    every = comm.allgather((socket.gethostname(), os.getpid(), loop.node))
    _members(loop)[name] = [(host, pid) for host, pid, _ in every]
    if len({node for _, _, node in every}) > 1:
        _spanning(loop).add(name)
    if owner is None:
        _setup_due(loop).add(name)
    loop.broken_groups.pop(name, None)


def _setup_due(loop) -> set:
    """Groups of in-rank members here whose first operation has not run yet."""
    due = getattr(loop, "collective_setup_due", None)
    if due is None:
        due = loop.collective_setup_due = set()
    return due


def _spanning(loop) -> set:
    """Groups whose members are on more than one node."""
    spanning = getattr(loop, "collective_spanning", None)
    if spanning is None:
        spanning = loop.collective_spanning = set()
    return spanning


def _members(loop) -> dict:
    """Each group's members' (host, pid), for the liveness check of its waits."""
    members = getattr(loop, "collective_members", None)
    if members is None:
        members = loop.collective_members = {}
    return members


def rank_setup(loop, comm, group: str, info: tuple) -> tuple[int, list]:
    """Every member's ``info`` before the group's first operation, where the
    members' executors decide whether to run it among themselves through the
    store (``collective_shm``): each one's (node, block, pid, token). In-rank
    members take part with no block, which keeps the group on MPI.

    Where the members span nodes (``collective_nodes.plan``), every member's
    rank then takes part in making the communicator of the nodes' leaders."""
    _exchange_headers(loop, comm, group, "setup", np.empty(0))
    me, every = comm.Get_rank(), comm.allgather(info)
    nodes = plan(every)
    if nodes is not None:
        _by_nodes(loop).add(group)
        leaders = [members[0] for members in nodes]
        sub = comm.Split(0 if me in leaders else _mpi().UNDEFINED, me)
        if me in leaders:
            _leaders(loop)[group] = sub
    return me, every


def _by_nodes(loop) -> set:
    """Groups on ``collective_nodes``'s route, whose members' operations do not
    use the group's own communicator after setup."""
    groups = getattr(loop, "collective_by_nodes", None)
    if groups is None:
        groups = loop.collective_by_nodes = set()
    return groups


def _leaders(loop) -> dict:
    """Group name -> the communicator of its nodes' leaders, on a leader's rank."""
    leaders = getattr(loop, "collective_leaders", None)
    if leaders is None:
        leaders = loop.collective_leaders = {}
    return leaders


def _mpi_calls(loop) -> dict:
    """Group name -> MPI collectives this rank ran for it (header exchanges aside)."""
    calls = getattr(loop, "collective_mpi_calls", None)
    if calls is None:
        calls = loop.collective_mpi_calls = {}
    return calls


def rank_leaders_op(loop, group: str, op: str, args: tuple) -> None:
    """A leader's step of ``collective_nodes``, on the leaders' communicator."""
    sub = _leaders(loop).get(group)
    if sub is None:
        raise ValueError(f"rank {loop.rank} leads no node of collective group {group!r}")
    if op == "abandon":
        why, dead = args
        if group not in loop.broken_groups:
            loop.broken_groups[group] = why
            _post_gone(loop, sub, dead)
    elif op == "barrier":
        _apply(loop, sub, group, "barrier", np.empty(0))
    elif op == "mismatch":
        # A signature no array has (crc32 is never negative): every leader
        # raises the ValueError of members that disagree.
        _exchange_headers(loop, sub, group, "allreduce", args[0], signature=-1)
    else:
        collective_buffers.rank_run(loop, sub, group, op, args, _apply)


def rank_destroy_group(loop, name: str) -> None:
    _setup_due(loop).discard(name)
    g = loop.groups.pop(name, None)
    loop.group_owners.pop(name, None)
    _members(loop).pop(name, None)
    _mpi_calls(loop).pop(name, None)
    _spanning(loop).discard(name)
    _by_nodes(loop).discard(name)
    loop.broken_groups.pop(name, None)
    sub = _leaders(loop).pop(name, None)
    if sub is not None:
        sub.Free()
    if g is not None:
        g[0].Free()


def rank_abandon_groups(loop, owner) -> None:
    """``owner``'s executor is gone: tell each of its groups, without waiting."""
    for name in [n for n, o in loop.group_owners.items() if o is owner]:
        comm, me = loop.groups.pop(name)
        del loop.group_owners[name]
        _members(loop).pop(name, None)
        _mpi_calls(loop).pop(name, None)
        _spanning(loop).discard(name)
        sub = _leaders(loop).pop(name, None)
        by_nodes = name in _by_nodes(loop)
        _by_nodes(loop).discard(name)
        if loop.broken_groups.pop(name, None) is None:
            # A "gone" header no member ever matches would stay posted, and its
            # messages could reach a later communicator that reuses this one's
            # context id: on collective_nodes's route only the leaders'
            # communicator hears of the death (the members of the node see it
            # in the store, and its leader posts on the leaders' communicator).
            if not by_nodes:
                _post_gone(loop, comm, me)
            if sub is not None:
                _post_gone(loop, sub, me)


def member_gone(loop, comm, group: str, op: str) -> RayError:
    """This member's tensor is lost (its executor died after asking): tell the others."""
    msg = (f"{op} in collective group {group!r}: this member's actor died during the "
           f"operation")
    loop.broken_groups[group] = msg
    _post_gone(loop, comm, loop.groups[group][1])
    return RayError(msg)


def _post_gone(loop, comm, dead: int) -> None:
    """Post a "gone" header naming member ``dead`` (its index in the group; on a
    leaders' communicator, the dead member of the leader's node); it stays posted
    (with its buffers, in ``loop.abandoned``) until the others' next operation
    completes it."""
    mine = np.array([_GONE, dead], np.int64)
    every = np.empty((comm.Get_size(), 2), np.int64)
    loop.abandoned.append((comm.Iallgather(mine, every), mine, every, comm))


def rank_run_op(loop, group: str, op: str, args: tuple, owner=None) -> tuple[bool, Any]:
    """Run a collective for an executor; the reply is ``(ok, result or exception)``."""
    try:
        if op == "create":
            rank_create_group(loop, group, args[0], owner)
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
        if op.startswith(LEADERS):
            rank_leaders_op(loop, group, op[len(LEADERS):], args)
            return True, None
        if op == "mpi_calls":
            return True, _mpi_calls(loop).get(group, 0)
        comm, _ = _group(loop, group)
        if op == "setup":
            return True, rank_setup(loop, comm, group, args[0])
        if op == "barrier":
            _apply(loop, comm, group, "barrier", np.empty(0))
            return True, None
        if args[0] in (collective_buffers.CROSS_MEMORY, collective_buffers.STORE):
            collective_buffers.rank_run(loop, comm, group, op, args, _apply)
            return True, None
        raw, dtype, shape, kw = args
        arr = np.frombuffer(bytearray(raw), dtype=np.dtype(dtype)).reshape(shape)
        out = _apply(loop, comm, group, op, arr, **kw)
        return True, (out if out is not None else arr).tobytes()
    except Exception as exc:  # returned to the actor and raised there
        return False, exc


def _exchange_headers(loop, comm, group: str, op: str, arr: np.ndarray,
                      signature: int | None = None) -> None:
    """Every member's header: raises if one is gone or if shapes or dtypes differ
    (``signature``: this member's instead of ``arr``'s)."""
    broken = loop.broken_groups.get(group)
    if broken is not None:
        raise RayError(broken)
    if signature is None:
        signature = op_signature((arr.shape, arr.dtype))
    mine = np.array([_PRESENT, signature], np.int64)
    every = np.empty((comm.Get_size(), 2), np.int64)
    # Nonblocking on every member: it must match the header a gone member's rank
    # posts with Iallgather (a blocking collective never matches a nonblocking one).
    _wait(comm.Iallgather(mine, every), _polite(loop), loop, group, op, (mine, every))
    if every[:, 0].any():      # (_PRESENT is 0)
        gone = [int(every[r, 1]) for r in np.flatnonzero(every[:, 0] == _GONE)]
        raise _broken(loop, group, f"{op} in collective group {group!r}: the actor of "
                      f"member(s) {gone} is gone (it died or was killed)", gone)
    if (every[:, 1] != every[0, 1]).any():
        # Every member sees the mismatch, so every member takes this branch.
        metas = comm.allgather((arr.shape, arr.dtype.str))
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
        from .. import _config
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


#: How ``_call`` waits: MPI's blocking form, or the nonblocking form waited for
#: by spinning or by backing off to sleeps.
_BLOCK, _SPIN, _YIELD = "block", "spin", "yield"


def _how(loop, group: str) -> str:
    """How this rank waits for ``group``'s collectives. Every member of a group
    must take the same form (a blocking collective never matches a nonblocking
    one); ``_polite`` is the same on the ranks of one node, not across nodes, so
    a group spanning nodes always takes the nonblocking form."""
    if _polite(loop):
        return _YIELD
    return _SPIN if group in _spanning(loop) else _BLOCK


def _call(loop, comm, group: str, name: str, how: str, *args, **kw) -> None:
    """``comm.<name>(...)``, blocking or in its nonblocking form (``_how``)."""
    if how == _BLOCK:
        getattr(comm, name)(*args, **kw)
        return
    req = getattr(comm, "I" + name[0].lower() + name[1:])(*args, **kw)
    _wait(req, how == _YIELD, loop, group, name, args)


def _wait(req, polite: bool, loop, group: str, op: str, buffers) -> None:
    """Until ``req`` completes: spinning (``polite`` False: a core per rank) or
    backing off to sleeps, and raising a RayError once a member rank on this
    host, or the driver, is gone (``req`` and its ``buffers`` are then kept
    in ``loop.abandoned``: MPI may still write into them)."""
    try:
        wait_until(req.Test, alive=_liveness(loop, group, op),
                   spin=None if polite else float("inf"), what=f"{op} in group {group!r}")
    except RayError:
        loop.abandoned.append((req, buffers))
        raise


def _liveness(loop, group: str, op: str):
    """A check that raises a RayError when the driver, or a member of ``group``
    whose rank is on this host, is gone; the group is then broken here. (It
    looks the members up when it runs: most waits end before it first does.)"""

    def alive() -> None:
        host = socket.gethostname()
        on_host = [(i, pid) for i, (h, pid) in enumerate(_members(loop).get(group, ()))
                   if h == host and pid != os.getpid()]
        driver = getattr(loop, "driver_pid", None)
        if driver and not _alive(driver):
            raise RayError(f"{op} in collective group {group!r}: the driver (pid {driver}) "
                           f"is gone; this rank stops waiting for the other members")
        dead = [i for i, pid in on_host if not _alive(pid)]
        if dead:
            raise _broken(loop, group, f"{op} in collective group {group!r}: the rank of "
                          f"member(s) {dead} is gone (its process died)")
    return alive


def _apply(loop, comm, group: str, op: str, arr: np.ndarray, reduce_op: str = "sum",
           root: int = 0, out: np.ndarray | None = None) -> np.ndarray | None:
    MPI = _mpi()
    how = _how(loop, group)
    due = _setup_due(loop)
    if group in due:
        due.discard(group)
        rank_setup(loop, comm, group, (loop.node, None, os.getpid(), 0))
    _exchange_headers(loop, comm, group, op, arr)
    calls = _mpi_calls(loop)
    calls[group] = calls.get(group, 0) + 1
    if op == "barrier":
        return None
    work = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    if op == "allreduce":
        _call(loop, comm, group, "Allreduce", how, MPI.IN_PLACE, work, op=_mpi_op(reduce_op))
        if reduce_op == "mean":
            _divide(work, comm.Get_size())
    elif op == "reduce":
        mop = _mpi_op(reduce_op)
        if comm.Get_rank() == root:
            _call(loop, comm, group, "Reduce", how, MPI.IN_PLACE, work, op=mop, root=root)
            if reduce_op == "mean":
                _divide(work, comm.Get_size())
        else:
            _call(loop, comm, group, "Reduce", how, work, None, op=mop, root=root)
    elif op == "broadcast":
        _call(loop, comm, group, "Bcast", how, work, root=root)
    elif op == "allgather":
        if out is None:
            out = np.empty((comm.Get_size(),) + work.shape, dtype=work.dtype)
        _call(loop, comm, group, "Allgather", how, work, out)
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


def _broken(loop, group: str, why: str, dead: list[int] | None = None) -> RayError:
    """The error of a group a member left: every later call on it raises it too.
    ``dead``: the members gone, as the error's ``members`` (it pickles along)."""
    msg = (f"{why}; the group is broken on every member: destroy it "
           f"(destroy_collective_group) and create a new one")
    loop.broken_groups[group] = msg
    err = RayError(msg)
    if dead:
        err.members = dead
    return err
