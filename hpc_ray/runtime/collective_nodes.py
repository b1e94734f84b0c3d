"""Collectives of ordinary actors whose group spans nodes: through the store
inside each node, over MPI between one leader per node.

A node's leader is its first member (lowest index in the group). An allreduce:

    every member of node X:  reduce into X's leader through X's store
                             (``collective_shm.ShmGroup``, X's members only)
    X's leader ── COLLECTIVE_OP(group, "leaders:allreduce", CROSS_MEMORY, ...) ──▶ its rank
                             the rank: Allreduce on the leaders' communicator
                             (one rank per node, ``collective_ops.rank_setup``)
    ◀── REPLY ──
    every member of node X:  broadcast from X's leader through X's store

so only the leaders' ranks make MPI calls, one per operation. Reduce, broadcast,
barrier and allgather take the same three steps (reduce: the root's node's
leader hands the result to the root through the store; allgather: the leaders
gather their nodes' stacks, padded to the largest node, and each leader
broadcasts the whole stack). The group's own communicator is used for setup
only (and where an executor's ``collective_shm`` is turned off, for every
operation through every member's rank).

The route is decided from the setup allgather of every member's (node, block,
pid, token) by ``plan``, the same way on every member and on every member's
rank: every member lent a store block, the members are on two nodes or more,
and some node holds two members or more; ``HPC_RAY_COLLECTIVE_NODES=0`` turns
it off (such groups then go through every member's rank).

A dead member is reported as on the other routes: the members of its node see
it in the store (its pid or its token is gone), and its node's leader posts a
"gone" header on the leaders' communicator naming it (``leaders:abandon``; its
rank does so if the leader itself died), so that the other leaders' next
operation fails with a RayError naming the member. A member that fails writes
the dead member's index into its store header, so that the members of its node
waiting for it fail with the same error instead of waiting.
"""
from __future__ import annotations

import numpy as np

from ..exceptions import RayError
from ..transport import messages as m
from . import collective_buffers
from .collective_shm import ShmGroup, check_call

#: Prefix of the COLLECTIVE_OP operations a leader's rank runs on the leaders'
#: communicator.
LEADERS = "leaders:"


def plan(peers: list) -> list[list[int]] | None:
    """Member indices by node, nodes in order of their first member (whose
    first member leads it); None where the group does not take this route."""
    from .. import _config
    if not _config.os_environ_get("COLLECTIVE_NODES", 1, int):
        return None
    if any(p[1] is None for p in peers):
        return None
    nodes: dict = {}
    for i, p in enumerate(peers):
        nodes.setdefault(p[0], []).append(i)
    if len(nodes) < 2 or all(len(members) == 1 for members in nodes.values()):
        return None
    return list(nodes.values())


class NodesGroup:
    """This member's view of a group run through each node's store and its leaders."""

    #: The operations this route runs; the others go through every member's rank.
    OPS = ("allreduce", "reduce", "broadcast", "barrier", "allgather")

    def __init__(self, ctx, name: str, block, token: int, me: int, peers: list,
                 nodes: list[list[int]]) -> None:
        self.ctx = ctx
        self.name = name
        self.block = block          # keeps this member's store block lent
        self.me = me
        self.size = len(peers)
        self.nodes = nodes
        self.node = next(k for k, members in enumerate(nodes) if me in members)
        mine = nodes[self.node]
        self.leader = mine[0] == me
        self.local = ShmGroup(ctx, name, block, token, mine.index(me),
                              [peers[i] for i in mine], members=mine) \
            if len(mine) > 1 else None
        self.broken: str | None = None

    def run(self, op: str, arr: np.ndarray, reduce_op: str = "sum", root: int = 0) -> None:
        """``op`` on ``arr`` (C-contiguous, writable), in place, with the other members."""
        check_call(self.broken, self.size, op, reduce_op, root)
        try:
            if op == "allreduce":
                self._allreduce(arr, reduce_op)
            elif op == "reduce":
                self._reduce(arr, reduce_op, root)
            elif op == "broadcast":
                self._broadcast(arr, root)
            elif op == "barrier":
                self._local("barrier", arr)
                self._leaders("barrier", arr, {}, then_local=True)
                self._local("barrier", arr)
            else:
                raise ValueError(f"unknown collective {op!r}")
        except RayError as exc:
            self._fail(exc)
            raise

    def _allreduce(self, arr: np.ndarray, reduce_op: str) -> None:
        step = "sum" if reduce_op == "mean" else reduce_op
        self._local("reduce", arr, leaders_next=True, reduce_op=step, root=0)
        self._leaders("allreduce", arr, {"reduce_op": step}, then_local=True)
        self._local("broadcast", arr, root=0)
        if reduce_op == "mean":
            if np.issubdtype(arr.dtype, np.integer):
                arr //= self.size
            else:
                arr /= self.size

    def _reduce(self, arr: np.ndarray, reduce_op: str, root: int) -> None:
        """Into the leaders as allreduce does, then the leaders' Reduce into the
        root's node's leader, which hands the result to the root through the store
        (a broadcast into scratch arrays on that node's other members). Only the
        root's tensor changes: a leader that is not the root works on a copy."""
        target = next(k for k, members in enumerate(self.nodes) if root in members)
        step = "sum" if reduce_op == "mean" else reduce_op
        work = arr if self.me == root or not self.leader else arr.copy()
        self._local("reduce", work, leaders_next=True, reduce_op=step, root=0)
        then_local = self.node == target and self.nodes[target][0] != root
        self._leaders("reduce", work, {"reduce_op": step, "root": target},
                      then_local=then_local)
        if then_local:
            mine = work if self.leader else arr if self.me == root else np.empty_like(arr)
            self._local("broadcast", mine, root=0)
        if self.me == root and reduce_op == "mean":
            if np.issubdtype(arr.dtype, np.integer):
                arr //= self.size
            else:
                arr /= self.size

    def allgather(self, arr: np.ndarray) -> np.ndarray:
        """Every member's ``arr`` (C-contiguous), stacked in member order: each
        node's members gathered in the store, the leaders' Allgather of those
        stacks (padded to the largest node), the whole stack broadcast through
        the store."""
        if self.broken is not None:
            raise RayError(self.broken)
        out = np.empty((self.size,) + arr.shape, arr.dtype)
        try:
            if self.local is None:
                mine = arr[None]
            else:
                try:
                    mine = self.local.allgather(arr)
                except ValueError:
                    self._mismatch(arr)
                    raise
            if self.leader:
                width = max(len(members) for members in self.nodes)
                padded = np.zeros((width,) + arr.shape, arr.dtype)
                padded[:len(mine)] = mine
                try:
                    every = collective_buffers.run(self.ctx, self.name,
                                                   LEADERS + "allgather", padded, {},
                                                   members=len(self.nodes))
                except ValueError:
                    self._release()
                    raise
                for k, members in enumerate(self.nodes):
                    out[members] = every[k, :len(members)]
            if self.local is not None:
                self.local.run("broadcast", out, root=0)
        except RayError as exc:
            self._fail(exc)
            raise
        return out

    def _broadcast(self, arr: np.ndarray, root: int) -> None:
        source = next(k for k, members in enumerate(self.nodes) if root in members)
        if self.node == source:
            self._local("broadcast", arr, leaders_next=True,
                        root=self.nodes[source].index(root))
        self._leaders("broadcast", arr, {"root": source}, then_local=self.node != source)
        if self.node != source:
            self._local("broadcast", arr, root=0)

    def _local(self, op: str, arr: np.ndarray, leaders_next: bool = False, **kw) -> None:
        """``op`` among this node's members; ``leaders_next``: the leaders' step
        follows, so that a leader whose node's members disagree (a ValueError
        here) makes every leader's step fail with a ValueError too."""
        if self.local is None:
            return
        try:
            self.local.run(op, arr if op != "barrier" else np.empty(0), **kw)
        except ValueError:
            if leaders_next:
                self._mismatch(arr)
            raise

    def _mismatch(self, arr: np.ndarray) -> None:
        """This node's members disagree: from the leader, make the other leaders'
        step raise the ValueError too."""
        if not self.leader:
            return
        shape = np.lib.stride_tricks.as_strided(np.empty(1, arr.dtype), arr.shape,
                                                (0,) * arr.ndim)
        try:
            self._request("mismatch", (shape,))
        except ValueError:
            pass

    def _leaders(self, op: str, arr: np.ndarray, kw: dict, then_local: bool) -> None:
        """The leaders' MPI step, run by this leader's rank (nothing on the others);
        ``then_local``: this node's members wait for its result."""
        if not self.leader:
            return
        try:
            if op == "barrier":
                self._request("barrier", ())
            else:
                collective_buffers.run(self.ctx, self.name, LEADERS + op, arr, kw)
        except ValueError:
            if then_local:
                self._release()
            raise

    def _release(self) -> None:
        """The nodes' shapes or dtypes differ (every leader raises that): the
        members of this node waiting for the leaders' result get a ValueError
        too, from ShmGroup's check that the members called the same operation
        (a barrier against their broadcast), which leaves the group usable."""
        if self.local is not None:
            try:
                self.local.run("barrier", np.empty(0))
            except ValueError:
                pass

    def _request(self, op: str, args: tuple):
        ok, result = self.ctx._request(m.COLLECTIVE_OP, self.name, LEADERS + op, args)
        if not ok:
            raise result
        return result

    def _fail(self, exc: RayError) -> None:
        """Break the group here, tell this node's members waiting on this one and,
        from a leader, the other leaders (its rank does nothing if it knows already)."""
        self.broken = str(exc)
        dead = getattr(exc, "members", None) or []
        if self.local is not None and self.local.dead is not None:
            dead = [self.local.dead]
        if self.local is not None:
            self.local.break_off(dead[0] if dead else self.me)
        if self.leader:
            self._request("abandon", (self.broken, dead[0] if dead else self.me))
