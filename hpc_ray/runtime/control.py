"""Control calls answered by the head: cluster state, named actors, kill, ...

Called with the head lock held, from the driver thread directly or from the
comm thread for a CONTROL_CALL message sent by an executor.
"""
from __future__ import annotations

import collections
import warnings
import weakref
from typing import Any

from ..transport import messages as m
from ..transport.serialization import ERROR, SHM
from .head import ActorState, Head
from .signals import source_of


class TaskTable(dict):
    """What ``tasks()`` returns: task id -> record, plus ``truncated``, the number of
    finished tasks the head no longer remembers (its history has a memory budget)."""

    truncated = 0


def call(head: Head, name: str, args: tuple) -> Any:
    fn = _CALLS.get(name)
    if fn is None:
        raise ValueError(f"unknown control call {name!r}")
    return fn(head, *args)


def _create_actor(head: Head, spec, resources, max_restarts, name, class_name,
                  max_task_retries, meta=None, lifetime_oid=None) -> None:
    head.create_actor(spec, resources, max_restarts, name, class_name, max_task_retries,
                      meta, lifetime_oid)


def _get_actor(head: Head, name: str):
    actor_id = head.named_actors.get(name)
    if actor_id is None:
        known = sorted(head.named_actors)
        raise ValueError(f"no actor named {name!r} (named actors: {known})")
    actor = head.actors[actor_id]
    return actor_id, actor.class_name, actor.meta


def _kill(head: Head, actor_id: int, no_restart: bool = True) -> None:
    head.kill_actor(actor_id, no_restart)


def _cluster_resources(head: Head) -> dict:
    total: dict = {}
    for w in head.workers.values():
        if w.alive:
            for k, v in w.total.items():
                if v:
                    total[k] = total.get(k, 0) + v
    for pool in head.pools.values():       # custom resources: once per node
        for k, v in pool.total.items():
            if v:
                total[k] = total.get(k, 0) + v
    return total


def _available_resources(head: Head) -> dict:
    avail: dict = {}
    for w in head.workers.values():
        if not w.alive:
            continue
        for k, v in w.avail.items():
            # Queued tasks reserve CPUs too (avail can go below zero): clamp.
            v = min(v + (w.blocked if k == "CPU" else 0), w.total.get(k, 0))
            if v > 0:
                avail[k] = avail.get(k, 0) + v
    for pool in head.pools.values():
        for k, v in pool.avail.items():
            if v > 0:
                avail[k] = avail.get(k, 0) + v
    return avail


def _set_resource(head: Head, name: str, capacity: float, client_id: str | None,
                  rank: int) -> None:
    """``experimental.set_resource``: on the node ``client_id`` names (a ``NodeID``
    of ``nodes()``), or the node of the caller's ``rank`` when it is None."""
    if client_id is None:
        node = head.node_of[rank]
    else:
        known = {f"node-{n}": n for n in sorted(set(head.node_of))}
        node = known.get(client_id)
        if node is None:
            raise ValueError(f"no node {client_id!r} (known: {sorted(known)}); pass a "
                             f"'NodeID' of hpc_ray.nodes(), or None for the caller's node")
    head.set_resource(node, name, capacity)


def _nodes(head: Head) -> list[dict]:
    by_node: dict[int, dict] = {}
    for w in head.workers.values():
        n = by_node.setdefault(w.node, {
            "NodeID": f"node-{w.node}", "ClientID": f"node-{w.node}",
            "NodeManagerHostname": w.host,
            "NodeManagerAddress": w.host, "Alive": True, "Resources": {},
            "Ranks": [], "ObjectStoreMemory": head.store_size,
            "ObjectStoreUsed": head.objects.allocators[w.node].used,
            "ObjectsReceived": head.objects.received.get(w.node, 0),
            "BytesReceived": head.objects.received_bytes.get(w.node, 0),
        })
        n["Ranks"].append(w.rank)
        n["Alive"] = n["Alive"] and w.alive
        for k, v in w.total.items():
            if v:
                n["Resources"][k] = n["Resources"].get(k, 0) + v
    for node, pool in head.pools.items():
        if node in by_node:
            for k, v in pool.total.items():
                if v:
                    by_node[node]["Resources"][k] = v
    if 0 not in by_node:
        pool = head.pools.get(0)
        by_node[0] = {"NodeID": "node-0", "ClientID": "node-0",
                      "NodeManagerHostname": head.host_of[0],
                      "NodeManagerAddress": head.host_of[0], "Alive": True,
                      "Resources": {k: v for k, v in pool.total.items() if v} if pool else {},
                      "Ranks": [0], "ObjectStoreMemory": head.store_size,
                      "ObjectStoreUsed": head.objects.allocators[0].used,
                      "ObjectsReceived": head.objects.received.get(0, 0),
                      "BytesReceived": head.objects.received_bytes.get(0, 0)}
    elif 0 not in by_node[0]["Ranks"]:
        by_node[0]["Ranks"].insert(0, 0)
    return [by_node[k] for k in sorted(by_node)]


def _tasks(head: Head) -> dict:
    head.settle_direct_reports()
    out = TaskTable()
    for tid, name, state, rank, attempts, returns, t_submit, t_start, t_end, _ in \
            head.history.tasks:
        out[f"{tid:040x}"] = _task_record(tid, name, state, rank, attempts, returns,
                                          t_submit, t_start, t_end)
    for t in head.tasks.values():
        tid = t.spec[m.T_ID]
        out[f"{tid:040x}"] = _task_record(tid, t.spec[m.T_NAME], t.state.value, t.rank,
                                          t.attempts, t.spec[m.T_RETURNS], t.t_submit,
                                          t.t_start, t.t_end)
    out.truncated = head.history.tasks.dropped
    if out.truncated:
        warnings.warn(f"tasks(): the {out.truncated} oldest finished tasks are no longer "
                      f"kept (the head's history budget, HPC_RAY_HEAD_HISTORY_BYTES)",
                      stacklevel=5)
    return out


def _task_record(tid, name, state, rank, attempts, returns, t_submit, t_start, t_end):
    return {"TaskID": f"{tid:040x}", "FunctionName": name, "State": state,
            "Rank": rank, "Attempts": attempts,
            "ReturnIDs": [f"{o:040x}" for o in returns],
            "SubmitTime": t_submit, "StartTime": t_start or None, "EndTime": t_end or None}


def _objects(head: Head) -> dict:
    out = {}
    for oid, e in head.objects.entries.items():
        rec = e.record
        if rec is None:
            state, where, size = "PENDING", None, None
        elif rec[0] == ERROR:
            state, where, size = "ERROR", None, None
        elif rec[0] == SHM:
            state, where, size = "READY", "shared memory", rec[3]
        else:
            state, where, size = "READY", "inline", None
        out[f"{oid:040x}"] = {"ObjectID": f"{oid:040x}", "State": state,
                              "Location": where, "DataSize": size,
                              "RefCount": e.refs,
                              "Nodes": ([rec[1]] + sorted(e.locations)) if (
                                  rec is not None and rec[0] == SHM) else []}
    return out


def _timeline(head: Head) -> list:
    head.settle_direct_reports()
    events = head.history.events
    out = list(events)
    if events.dropped:
        # Said inside the trace itself, as an instant event at the start.
        first = min((ev[2] for ev in out if isinstance(ev, tuple)), default=0.0)
        out.insert(0, {"name": f"timeline truncated: {events.dropped} older events dropped",
                       "cat": "hpc_ray", "ph": "i", "s": "g", "pid": "head", "tid": 0,
                       "ts": first * 1e6, "args": {"dropped_events": events.dropped}})
    return out


def _run_function(head: Head, blob: bytes) -> None:
    head.run_function_on_all_workers(blob)


def _world(head: Head) -> dict:
    return {"size": head.world_size, "node_of": head.node_of, "host_of": head.host_of}


def _signal_send(head: Head, actor_id, task_id, blob: bytes) -> None:
    head.add_signal(actor_id, task_id, blob)


def _signal_source(head: Head, key) -> tuple:
    return source_of(key, head.history.signals.task_of)


def _signal_poll(head: Head, keyed: list) -> list:
    head.settle_direct_reports()    # (direct calls' ErrorSignals)
    signals = head.history.signals
    return [(key, *signals.since(_signal_source(head, key), cursor)) for key, cursor in keyed]


def _collective_create(head: Head, name: str, actor_ids: list[int]) -> None:
    ranks = []
    for actor_id in actor_ids:
        actor = head.actors.get(actor_id)
        if actor is None or actor.state in (ActorState.DEAD, ActorState.PENDING) \
                or actor.rank < 0:
            state = "unknown" if actor is None else actor.state.value
            raise ValueError(f"actor {actor_id:016x} cannot join group {name!r}: it is "
                             f"{state}, not placed on a rank")
        ranks.append(actor.rank)
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"group {name!r} needs one actor per rank, but its actors share "
                         f"ranks {ranks}; give the actors num_cpus=1 (or more ranks)")
    for r in ranks:
        head.send(r, (m.GROUP_CREATE, name, ranks, list(actor_ids)))


def _register_actor(head: Head, name: str, actor_id: int) -> None:
    """``hpc_ray.experimental.register_actor``: name an existing actor."""
    if name in head.named_actors:
        raise ValueError(f"an actor named {name!r} already exists")
    if actor_id not in head.actors:
        raise ValueError(f"no actor {actor_id:016x} to name {name!r}")
    head.named_actors[name] = actor_id


#: Head -> actor id -> [(checkpoint id bytes, timestamp)], oldest first
#: (hpc_ray.actor.Checkpointable); dropped with the head.
_CHECKPOINTS: "weakref.WeakKeyDictionary[Head, dict]" = weakref.WeakKeyDictionary()


def _actor_checkpoints(head: Head, actor_id: int) -> list:
    """The actor's recorded checkpoints, newest first."""
    return list(reversed(_CHECKPOINTS.get(head, {}).get(actor_id, [])))


def _actor_checkpoint_saved(head: Head, actor_id: int, checkpoint_id: bytes,
                            timestamp: float, keep: int) -> list:
    """Record a checkpoint; returns the ids of those beyond the newest ``keep``."""
    by_actor = _CHECKPOINTS.setdefault(head, {})
    kept = by_actor.get(actor_id)
    if kept is None:
        for gone in [a for a in by_actor if a not in head.actors]:
            del by_actor[gone]     # (dead actors' ids go when another actor's come)
        kept = by_actor[actor_id] = []
    kept.append((checkpoint_id, timestamp))
    expired = kept[:-keep] if keep > 0 else []
    del kept[:len(expired)]
    return [b for b, _ in expired]


#: Head -> errors pushed to the driver (``hpc_ray.errors()``), oldest dropped first.
_PUSHED: "weakref.WeakKeyDictionary[Head, collections.deque]" = weakref.WeakKeyDictionary()

#: Pushed errors kept, at most.
PUSHED_KEPT = 1000


def _push_error(head: Head, kind: str, message: str, timestamp: float) -> None:
    """An error the head has no failed task for (Ray 0.7's ``push_error_to_driver``):
    an actor's constructor or a Checkpointable actor's hook that raised."""
    pushed = _PUSHED.get(head)
    if pushed is None:
        pushed = _PUSHED[head] = collections.deque(maxlen=PUSHED_KEPT)
    pushed.append({"type": kind, "message": message, "timestamp": timestamp})


def _pushed_errors(head: Head) -> list:
    return [dict(e) for e in _PUSHED.get(head, ())]


def _failure_texts(head: Head) -> dict:
    """Failed tasks' error texts, keyed as ``tasks()`` keys them."""
    head.settle_direct_reports()
    return {f"{tid:040x}": text for tid, text in head.history.failures.items()}


def _actor_pid(head: Head, actor_id: int) -> int:
    """The process the head runs the actor in now; 0 while it has none (dead,
    restarting, not started)."""
    from .head.actors import A_ALIVE
    actor = head.actors.get(actor_id)
    return actor.pid if actor is not None and actor.state is A_ALIVE else 0


def _actor_death(head: Head, actor_id: int) -> tuple:
    """(class name, how its last process ended, whether it is being restarted)."""
    from .head.actors import A_DEAD
    actor = head.actors.get(actor_id)
    if actor is not None:
        return actor.class_name, actor.last_death or actor.error, actor.state is not A_DEAD
    dead = head.history.dead_actors.get(actor_id)
    return (dead[0], dead[1], False) if dead else (None, None, False)


def _ping(head: Head) -> None:
    """Nothing: its answer tells a caller that the head has handled every message
    the caller sent before it (``peer_calls``: its holds of a result's refs)."""


_CALLS = {
    "ping": _ping,
    "actor_pid": _actor_pid,
    "actor_death": _actor_death,
    "register_actor": _register_actor,
    "actor_checkpoints": _actor_checkpoints,
    "actor_checkpoint_saved": _actor_checkpoint_saved,
    "push_error": _push_error,
    "pushed_errors": _pushed_errors,
    "failure_texts": _failure_texts,
    "collective_create": _collective_create,
    "signal_send": _signal_send,
    "signal_poll": _signal_poll,
    "create_actor": _create_actor,
    "get_actor": _get_actor,
    "kill": _kill,
    "set_resource": _set_resource,
    "cluster_resources": _cluster_resources,
    "available_resources": _available_resources,
    "nodes": _nodes,
    "tasks": _tasks,
    "objects": _objects,
    "timeline": _timeline,
    "run_function": _run_function,
    "world": _world,
}
